"""Every plot kind renders from a small synthetic, schema-correct results store, with the
expected axes, labels, scales, lines and facets; the `plot` CLI command and its errors."""

from __future__ import annotations

import argparse
import itertools
import math
import re
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl
import pytest
from matplotlib.figure import Figure

from rope_lab import cli_analysis, plots
from rope_lab import query as q
from rope_lab.results import append_rows, mark_success, trial_dir, write_trial_row

matplotlib.use("Agg")

KINDS = ("rope", "alibi", "learned", "none")
WIDTHS = (32, 64)
SEEDS = (0, 1)
L_TRAIN = 32
LENGTHS = (16, 32, 64, 128)
SCALINGS = (("linear", 2.0), ("linear", 4.0), ("yarn", 2.0), ("yarn", 4.0))
NTK_STEPS = (0, 10, 100, 1000)
PROBES = (32, 64, 128)
N_BUCKETS = 4
# Labels drawn for every width: 4 PE kinds + 4 RoPE scalings.
N_LABELS = len(KINDS) + len(SCALINGS)


def _accuracy(kind: str, method: str, factor: float, length: int, width: int, seed: int) -> float:
    """Synthetic accuracy: flat up to L_train, then a PE- and scaling-dependent decay."""
    base = 0.9 + 0.04 * (width == 64) + 0.01 * seed
    over = max(0.0, math.log2(length / L_TRAIN))
    decay = {"rope": 0.25, "alibi": 0.03, "learned": 0.4, "none": 0.1}[kind]
    if method in ("linear", "yarn"):
        decay = 0.2 / factor if method == "linear" else 0.1 / factor
    return max(0.05, base - decay * over)


def make_store(root: Path) -> Path:
    """A fake run directory: 4 PE kinds x 2 widths x 2 seeds, RoPE scalings, ntk rows."""
    run = root / "synthetic"
    for kind, width, seed in itertools.product(KINDS, WIDTHS, SEEDS):
        tid = f"passkey-{kind}-w{width}-s{seed}"
        d = trial_dir(run, tid)
        config = {
            "model.width": width,
            "model.depth": 2,
            "model.position.kind": kind,
            "model.position.rope.scaling": "default",
            "model.position.rope.factor": 1.0,
            "model.parametrization": "sp",
            "task.name": "passkey",
            "train.length": L_TRAIN,
            "train.seed": seed,
            "eval.length_multipliers": [0.5, 1.0, 2.0, 4.0],
        }
        write_trial_row(
            d,
            {"status": "done", "sweep": "synthetic", "n_params": 25 * width * width},
            config,
        )
        append_rows(
            d,
            "train",
            [
                {"step": s, "loss": 3.0 * (1 + s) ** -0.5 * (32 / width) ** 0.3}
                for s in (10, 50, 100, 200)
            ],
            segment="train_0",
        )
        stages = [("none" if kind != "rope" else "default", 1.0)]
        if kind == "rope":
            stages += list(SCALINGS)
        for method, factor in stages:
            rows = []
            for length in LENGTHS:
                acc = _accuracy(kind, method, factor, length, width, seed)
                loss = -math.log(acc) + 0.05
                common = {"step": 200, "method": method, "factor": factor, "finetune_steps": 0}
                rows.append(
                    {**common, "length": length, "loss": loss, "accuracy": acc,
                     "perplexity": math.exp(loss), "exact_match": acc**2}
                )  # fmt: skip
                for b in range(N_BUCKETS):
                    start = b * length // N_BUCKETS
                    # first bucket has no scored targets (NaN), like the passkey task
                    bl = math.nan if b == 0 else loss * (1 + 0.3 * max(0, start - L_TRAIN) / length)
                    rows.append(
                        {**common, "length": length, "loss": bl, "accuracy": acc,
                         "perplexity": math.exp(bl), "position_bucket": start}
                    )  # fmt: skip
            append_rows(d, "eval", rows, segment=f"eval_{method}_x{factor:g}")
        ntk = []
        for step, probe, group in itertools.product(NTK_STEPS, PROBES, ("total", "mlp")):
            for method, factor in [("none", 1.0)] + ([("yarn", 4.0)] if kind == "rope" else []):
                common = {"step": step, "probe_length": probe, "group": group,
                          "method": method, "factor": factor}  # fmt: skip
                if probe == L_TRAIN and method == "none":
                    drift = 2.0 * width**-0.5 * math.log1p(step) * (1 + 0.02 * seed)
                    ntk += [
                        {**common, "metric": "distance_from_init", "value": drift},
                        {**common, "metric": "velocity", "value": drift / (1 + step)},
                        {**common, "metric": "relative_change", "value": drift / 3},
                    ]
                if probe == L_TRAIN:
                    ntk.append({**common, "metric": "k_train_cos_mean", "value": 0.8})
                if probe > L_TRAIN:
                    cos = 0.8 * (L_TRAIN / probe) ** (0.2 if method == "none" else 0.05)
                    ntk.append({**common, "metric": "k_cross_cos_mean", "value": cos})
        append_rows(d, "ntk", ntk, segment="ntk")
        mark_success(d)
    return run


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("plots"))


@pytest.fixture(scope="module")
def rendered(store: Path) -> dict[str, tuple[Figure, Path]]:
    """Every plot kind with its defaults, through the dispatcher, written as PNG once."""
    kernel = store.parent / "kernels" / "k.npz"
    kernel.parent.mkdir()
    k = np.add.outer(np.arange(16.0), np.arange(16.0))
    np.savez(kernel, K_train=k[:8, :8], K_cross=k[:8], profile=k[0], train_length=8)
    out = {}
    for kind in plots.KINDS:
        path = store.parent / "figures" / f"{kind}.png"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # readable defaults: e.g. no averaging warnings
            fig = plots.plot(kind, [kernel if kind == "kernel" else store], out=path)
        out[kind] = (fig, path)
    return out


@pytest.mark.parametrize("kind", plots.KINDS)
def test_every_kind_renders_a_png(rendered: dict[str, tuple[Figure, Path]], kind: str) -> None:
    fig, path = rendered[kind]
    assert isinstance(fig, Figure)
    _png_ok(path)
    assert fig.get_suptitle()


def _png_ok(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 5000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _data_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def _vlines(ax) -> list:
    return [ln for ln in ax.lines if ln.get_linestyle() == "--" and len(set(ln.get_xdata())) == 1]


def test_extrapolation_facets_lines_and_axes(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["extrapolation"][0]
    axes = _data_axes(fig)
    assert len(axes) == len(WIDTHS)  # auto facets: one column per width
    assert [ax.get_title() for ax in axes] == ["width 32", "width 64"]
    for ax in axes:
        assert ax.get_xscale() == "log"
        assert ax.xaxis.get_transform().base == 2
        vlines = _vlines(ax)
        assert len(vlines) == 1 and vlines[0].get_xdata()[0] == L_TRAIN
        # one data line per label, plus the L_train marker
        assert len(ax.lines) == N_LABELS + 1
        # two seeds: the spread is shaded
        assert len(ax.collections) >= N_LABELS
    assert axes[0].get_xlabel() == "evaluation length (tokens)"
    assert axes[0].get_ylabel() == "accuracy"
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts[:4] == ["none", "learned", "alibi", "rope"]
    assert "rope/yarn x4" in legend_texts
    assert "2 seeds" in fig.get_suptitle()


def test_extrapolation_rows_cols_and_ratio_axis(store: Path) -> None:
    fig = plots.extrapolation(
        store, metric="loss", x="length_ratio", col="model.position.kind", row="model.width"
    )
    axes = _data_axes(fig)
    assert len(axes) == len(KINDS) * len(WIDTHS)
    rope_ax = next(ax for ax in axes if ax.get_title() == "width 32, PE rope")
    assert len(rope_ax.lines) == 1 + len(SCALINGS) + 1
    alibi_ax = next(ax for ax in axes if ax.get_title() == "width 64, PE alibi")
    assert len(alibi_ax.lines) == 2
    assert _vlines(alibi_ax)[0].get_xdata()[0] == 1.0
    assert axes[-1].get_xlabel() == "evaluation length / L_train"
    assert axes[0].get_ylabel() == "loss (nats / scored token)"


def test_extrapolation_warns_when_averaging_over_config(store: Path) -> None:
    with pytest.warns(UserWarning, match=r"model\.width"):
        plots.extrapolation(store, col=None, row=None)


def test_positions(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["positions"][0]
    axes = _data_axes(fig)
    assert len(axes) == len(WIDTHS)
    for ax in axes:
        assert ax.get_xscale() == "linear"
        assert len(ax.lines) == N_LABELS + 1
        assert ax.get_xlim() == (0.0, 128.0)
        line = ax.lines[0]
        assert len(line.get_xdata()) == N_BUCKETS - 1  # the NaN bucket is left out
    assert "bucket" in axes[0].get_xlabel()
    assert axes[0].get_ylabel().startswith("loss")
    assert "length 128" in fig.get_suptitle()
    assert "have no scored targets" in fig.get_suptitle()


def test_ntk_drift(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["ntk-drift"][0]
    axes = _data_axes(fig)
    assert len(axes) == 4  # three metrics + end-of-training panel
    for ax, metric in zip(axes[:3], plots.DRIFT_METRICS, strict=True):
        assert ax.get_xscale() == "log"
        assert ax.get_xlabel() == "training step"
        assert ax.get_ylabel() == plots.name_of(metric)
        # one line per width x PE kind
        assert len(ax.lines) == len(WIDTHS) * len(KINDS)
    end = axes[3]
    assert end.get_xscale() == "log" and end.get_yscale() == "log"
    assert end.get_xlabel() == "width (d_model)"
    texts = [t.get_text() for t in end.get_legend().get_texts()]
    # drift = 2 width^-0.5 log1p(step): slope -0.5 for every kind
    assert len(texts) == len(KINDS)
    assert all("slope -0.50" in t for t in texts), texts


def test_ntk_cross(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["ntk-cross"][0]
    axes = _data_axes(fig)
    assert len(axes) == 2 * len(WIDTHS)  # two metrics x width rows
    for ax in axes:
        assert ax.get_xscale() == "log"
        assert ax.get_xlabel() == "probe length (tokens)"
        # 4 PE kinds as trained + rope/yarn x4
        assert len([ln for ln in ax.lines if ln.get_linestyle() != ":"]) == len(KINDS) + 1 + 1
    ratio_ax = axes[1]
    assert ratio_ax.get_ylabel() == "cross / train kernel cosine"
    # the ratio was computed from k_cross_cos_mean / k_train_cos_mean: 0.8 x (32/64)^0.2 / 0.8
    ys = sorted(y for ln in ratio_ax.lines[:1] for y in ln.get_ydata())
    assert ys[-1] == pytest.approx(0.5**0.2, rel=1e-6)


def test_kernel_matrices(rendered: dict[str, tuple[Figure, Path]], tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(48, 10))
    k = feats @ feats.T
    fig = plots.plot_kernel_matrices(
        k[:16, :16], k[:16, :], {"mean |K_cross|": np.abs(k[:16]).mean(0)}, train_length=16
    )
    axes = _data_axes(fig)
    assert len(axes) == 3
    assert axes[0].get_title() == "K_train (16×16)"
    assert axes[1].get_title() == "K_cross (16×48)"
    assert len(axes[0].images) == 1 and axes[1].images[0].get_array().shape == (16, 48)
    assert axes[2].get_xlabel() == "position (tokens)"
    assert len(axes[2].lines) == 2  # profile + L_train
    written = plots.save(fig, tmp_path / "k.png", formats=("pdf",), dpi=40)
    assert [p.name for p in written] == ["k.png", "k.pdf"]
    assert (tmp_path / "k.pdf").read_bytes()[:4] == b"%PDF"
    from_npz = _data_axes(rendered["kernel"][0])  # found k.npz, train_length 8
    assert from_npz[1].get_title() == "K_cross (8×16)"
    assert _vlines(from_npz[2])[0].get_xdata()[0] == 8
    with pytest.raises(ValueError, match="2-D"):
        plots.plot_kernel_matrices(np.ones(3), k, k[0])


def test_scaling_recovers_exponent(store: Path) -> None:
    fig = plots.scaling(store, metric="distance_from_init", n_boot=100)
    (ax,) = _data_axes(fig)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "width (d_model)"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(texts) == len(KINDS)
    assert all("b = 0.50" in t for t in texts), texts
    assert all("(n=4, no CI)" in t for t in texts)  # 2 seeds: too few to resample
    fig = plots.scaling(store, metric="loss", x="n_params", hue=None)
    (ax,) = _data_axes(fig)
    assert ax.get_xlabel() == "parameters"
    assert len(ax.collections) == 1  # points, no band
    # a third seed: the bootstrap over seeds gives a band and an interval
    e = q.eval_table(store)
    third = e.filter(pl.col("train.seed") == 0).with_columns(
        pl.lit(2, dtype=pl.Int64).alias("train.seed"),
        pl.col("trial_id") + "-s2",
        pl.col("loss") * 1.02,
    )
    fig = plots.scaling(pl.concat([e, third]), metric="loss", hue=None, n_boot=100)
    (ax,) = _data_axes(fig)
    assert len(ax.collections) == 2  # points + band
    (text,) = [t.get_text() for t in ax.get_legend().get_texts()]
    assert re.search(r"b = 0\.\d\d \[0\.\d\d, 0\.\d\d\]", text), text


def test_summary_dashboard(rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["summary"][0]
    axes = _data_axes(fig)
    assert len(axes) == 9  # 6 eval panels + 3 ntk panels
    titles = [ax.get_title() for ax in axes]
    assert any(t.startswith("accuracy vs length") for t in titles)
    assert any(t.startswith("longest length keeping") for t in titles)
    assert any("drift" in t for t in titles)


def test_dispatcher_errors(store: Path) -> None:
    with pytest.raises(q.QueryError, match="unknown plot kind 'heatmap'; kinds are: extrap"):
        plots.plot("heatmap", store)
    with pytest.raises(q.QueryError, match="does not take x"):
        plots.plot("positions", store, x="length")
    with pytest.raises(q.QueryError, match=r"unknown column.*'model\.widht'.*available columns"):
        plots.plot("extrapolation", store, col="model.widht")
    with pytest.raises(q.QueryError, match="use one of the extensions"):
        plots.plot("extrapolation", store, out="x.jpeg")


def test_ntk_plots_without_ntk_rows(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_trial_row(trial_dir(run, "t"), {"status": "done"}, {"model.width": 8})
    with pytest.raises(q.QueryError, match="no ntk rows"):
        plots.ntk_drift(run)


# --- CLI -------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rope-lab")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_analysis.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_plot_default_out(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plot", "positions", str(store), "--metric", "accuracy", "--row", "model.width"]
    assert _cli(argv) == 0
    _png_ok(store / "plots" / "positions.png")
    assert "positions.png" in capsys.readouterr().out


def test_cli_plot_pdf_and_options(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.pdf"
    argv = ["plot", "scaling", str(store), "--out", str(out), "--x", "n_params",
            "--metric", "error_rate", "--hue", "none", "--col", "model.position.kind"]  # fmt: skip
    assert _cli(argv) == 0
    assert out.read_bytes()[:4] == b"%PDF"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["plot", "bogus", "RUN"],
            "unknown plot kind 'bogus'; kinds are: extrapolation, positions",
        ),
        (["plot", "positions", "RUN", "--x", "length"], "does not take --x"),
        (["plot", "extrapolation", "RUN", "--hue", "nope"], "available columns:"),
        (["plot", "extrapolation", "RUN", "--out", "a.gif"], "use one of the extensions"),
        (["plot", "extrapolation", "/does/not/exist"], "not a run directory"),
    ],
)
def test_cli_plot_errors(
    store: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(store) if a == "RUN" else a for a in argv]
    assert _cli(argv) == 1
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
