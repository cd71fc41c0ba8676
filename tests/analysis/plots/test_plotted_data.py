"""What every plot kind draws: the plotted numbers, read back from the axes, against the
results recomputed from the store with polars (seed means, ± 1 s.e.) and NumPy (power-law
fits as OLS on log-log)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.collections import FillBetweenPolyCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from rope_lab.analysis import plots
from rope_lab.results import load
from tests.analysis.plots.synthetic import KINDS, L_TRAIN, N_BUCKETS, WIDTHS, data_axes

TOL = {"rtol": 1e-9, "atol": 1e-12}

# reading the figure


def color_of(artist_color: Any) -> str:
    """A colour as hex (alpha dropped), to match lines, bands and legend entries."""
    return mcolors.to_hex(artist_color)


def dash_of(line: Line2D) -> tuple[float, ...] | None:
    """A line's on/off dash sequence as set (matplotlib has no public getter), None when
    solid."""
    _, seq = line._unscaled_dash_pattern
    return tuple(float(s) for s in seq) if seq else None


def legend_entries(legend: Legend) -> list[tuple[str, Any]]:
    """(text, handle) of every entry of a legend."""
    return [
        (t.get_text(), h) for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)
    ]


def hue_colors(legend: Legend) -> dict[str, str]:
    """Colour -> text of the legend's colour entries (those before a blank spacer entry)."""
    out: dict[str, str] = {}
    for text, handle in legend_entries(legend):
        if not text:
            break
        color = handle.get_facecolor() if hasattr(handle, "get_width") else handle.get_color()
        assert color_of(color) not in out, f"two legend entries share the colour of {text!r}"
        out[color_of(color)] = text
    return out


def style_dashes(legend: Legend, title: str) -> dict[tuple[float, ...] | None, str]:
    """Dash sequence -> text of the legend's dash entries listed under the entry ``title``."""
    entries = legend_entries(legend)
    start = next(i for i, (text, _) in enumerate(entries) if text == title) + 1
    return {dash_of(h): text for text, h in entries[start:]}


def data_lines(ax: Axes) -> list[Line2D]:
    """Lines drawn in data coordinates with points (no L_train markers, no legend proxies)."""
    return [ln for ln in ax.lines if ln.get_transform() == ax.transData and len(ln.get_xdata())]


def lines_by(
    ax: Axes, colors: Mapping[str, Any], dashes: Mapping[Any, Any] | None = None
) -> dict[Any, np.ndarray]:
    """The (x, y) points of each data line keyed by its colour's legend level (and dash's)."""
    out: dict[Any, np.ndarray] = {}
    for ln in data_lines(ax):
        key = colors[color_of(ln.get_color())]
        if dashes is not None:
            key = (key, dashes[dash_of(ln)])
        assert key not in out, f"two lines for {key!r} in {ax.get_title()!r}"
        out[key] = np.asarray(ln.get_xydata(), dtype=float)
    return out


def bands_by(ax: Axes, colors: Mapping[str, Any]) -> dict[Any, np.ndarray]:
    """Each shaded band as rows (x, low, high), keyed by its colour's legend level."""
    out: dict[Any, np.ndarray] = {}
    for coll in ax.collections:
        if not isinstance(coll, FillBetweenPolyCollection):
            continue
        key = colors[color_of(coll.get_facecolor()[0])]
        vertices = coll.get_paths()[0].vertices
        xs = np.unique(vertices[:, 0])
        rows = [
            (
                x,
                vertices[np.isclose(vertices[:, 0], x), 1].min(),
                vertices[np.isclose(vertices[:, 0], x), 1].max(),
            )
            for x in xs
        ]
        out[key] = np.asarray(rows)
    return out


def panels_by_title(fig: Figure) -> dict[str, Axes]:
    """The visible panels of ``fig`` by title."""
    axes = data_axes(fig)
    titles = [ax.get_title() for ax in axes]
    assert len(set(titles)) == len(titles), titles
    return dict(zip(titles, axes, strict=True))


def scatter_points(ax: Axes, colors: Mapping[str, Any]) -> dict[Any, np.ndarray]:
    """The offsets of each scatter, sorted, keyed by its colour's legend level."""
    out: dict[Any, np.ndarray] = {}
    for coll in ax.collections:
        if isinstance(coll, PathCollection):
            key = colors[color_of(coll.get_facecolor()[0])]
            assert key not in out
            out[key] = sort_points(np.asarray(coll.get_offsets(), dtype=float))
    return out


def sort_points(points: np.ndarray) -> np.ndarray:
    """Rows (x, y) sorted by x, then y."""
    return points[np.lexsort((points[:, 1], points[:, 0]))]


# the numbers, from the store


def curve_label(kind: str, method: str | None, factor: float | None) -> str:
    """The curve a row belongs to: the PE kind as trained, else ``kind/method x{factor}``."""
    if method in (None, "none", "default"):
        return kind
    return f"{kind}/{method} x{factor:g}"


def with_config(store: Path, table: str) -> pl.DataFrame:
    """Rows of ``table`` joined with their trial's row, plus a ``label`` column."""
    res = load(store)
    rows = res.table(table).collect().join(res.trials.collect(), on="trial_id", how="left")
    if "method" not in rows.columns:
        return rows.with_columns(pl.col("model.position.kind").alias("label"))
    labels = [
        curve_label(*r) for r in rows.select("model.position.kind", "method", "factor").rows()
    ]
    return rows.with_columns(pl.Series("label", labels, dtype=pl.String))


def eval_rows(store: Path, *, buckets: bool = False) -> pl.DataFrame:
    """Whole-sequence eval rows (or the per-bucket ones) with config, label, length_ratio and
    error_rate."""
    rows = with_config(store, "eval").filter(
        (pl.col("position_bucket").is_null() != buckets)
        & pl.col("mode").is_null()
        & pl.col("depth").is_null()
    )  # figures read the teacher-forced rows (decode rows have a mode) at no set depth
    return rows.with_columns(
        (pl.col("length") / pl.col("train.length")).alias("length_ratio"),
        (1 - pl.col("accuracy")).alias("error_rate"),
    )


def perturbed_ntk(store: Path) -> pl.DataFrame:
    """The store's ntk rows with config, each value scaled by a factor that differs between
    seeds, steps, groups, probe lengths, metrics and PE kinds, with a PE-dependent width
    exponent: in the store itself several of those rows are equal, here none are, so a figure
    drawing other rows than the ones asked for draws other numbers. The figures get it without
    the ``label`` column (they derive their own)."""
    rows = with_config(store, "ntk")
    kind = pl.col("model.position.kind").replace_strict({k: i for i, k in enumerate(KINDS)})
    factor = (
        1
        + 0.05 * pl.col("train.seed")
        + 0.02 * pl.col("step").cast(pl.Float64).log1p()
        + 0.1 * (pl.col("group") == "mlp").cast(pl.Float64)
        + 0.01 * pl.col("probe_length") / L_TRAIN
        + 0.04 * (pl.col("metric") == "k_train_cos_mean").cast(pl.Float64)
        + 0.03 * kind
    ) * (pl.col("model.width") / WIDTHS[0]).pow(-0.1 * kind)
    return rows.with_columns(pl.col("value") * factor)


def seed_means(frame: pl.DataFrame, keys: Sequence[str], x: str, y: str) -> dict[Any, np.ndarray]:
    """Rows (x, mean, s.e.) of finite ``y`` per ``keys`` level over the seeds, sorted by x
    (s.e. = sample std / sqrt(n), NaN for one value)."""
    finite = frame.filter(pl.col(y).cast(pl.Float64).is_finite())
    agg = (
        finite.group_by([*keys, x])
        .agg(
            pl.col(y).mean().alias("mean"),
            (pl.col(y).std(ddof=1) / pl.len().cast(pl.Float64).sqrt()).alias("se"),
        )
        .sort(x)
    )
    out: dict[Any, np.ndarray] = {}
    for key, part in agg.partition_by(list(keys), as_dict=True).items():
        out[key[0] if len(keys) == 1 else key] = (
            part.select(x, "mean", "se").to_numpy().astype(float)
        )
    return out


def assert_curves(drawn: Mapping[Any, np.ndarray], expected: Mapping[Any, np.ndarray]) -> None:
    """Every expected curve drawn once at its (x, mean) points, and nothing else."""
    assert sorted(map(str, drawn)) == sorted(map(str, expected))
    for key, rows in expected.items():
        np.testing.assert_allclose(drawn[key], rows[:, :2], **TOL, err_msg=str(key))


def loglog_fit(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
    """(a, slope) of y = a x^slope by least squares on log y vs log x."""
    slope, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(np.exp(intercept)), float(slope)


def assert_power_law_panel(
    ax: Axes,
    points: Mapping[str, np.ndarray],
    legend_text: Callable[[str, float], str],
) -> None:
    """Per level of the panel's legend: the scatter is ``points`` (rows x, y), the fitted line
    runs over the points' x range on y = a x^slope fitted independently, and the legend entry
    starts with ``legend_text(level, slope)``."""
    entries = legend_entries(ax.get_legend())
    colors = {color_of(h.get_color()): text.split(":")[0] for text, h in entries}
    assert sorted(colors.values()) == sorted(points)
    assert_curves(scatter_points(ax, colors), {k: sort_points(v) for k, v in points.items()})
    fitted = lines_by(ax, colors)
    assert sorted(fitted) == sorted(points)
    for level, pts in points.items():
        a, slope = loglog_fit(pts[:, 0], pts[:, 1])
        xs, ys = fitted[level][:, 0], fitted[level][:, 1]
        assert xs[0] == pytest.approx(pts[:, 0].min()) and xs[-1] == pytest.approx(pts[:, 0].max())
        np.testing.assert_allclose(ys, a * xs**slope, rtol=1e-9, err_msg=level)
        (text,) = [t for t, _ in entries if t.split(":")[0] == level]
        assert text.startswith(legend_text(level, slope)), (text, legend_text(level, slope))


def trial_points(rows: pl.DataFrame, by: str | None, x: str, y: str) -> dict[str, np.ndarray]:
    """Rows (x, y), one per trial, per level of ``by`` (all under "data" when None)."""
    if by is None:
        return {"data": rows.select(x, y).to_numpy().astype(float)}
    return {
        key[0]: part.select(x, y).to_numpy().astype(float)
        for key, part in rows.partition_by(by, as_dict=True).items()
    }


def ntk_train_rows(frame: pl.DataFrame, metric: str, group: str = "total") -> pl.DataFrame:
    """Train-kernel rows (probe length L_train) of ``metric`` for the kernel as trained."""
    return frame.filter(
        (pl.col("metric") == metric)
        & (pl.col("group") == group)
        & (pl.col("method") == "none")
        & (pl.col("probe_length") == pl.col("train.length"))
    )


def last_step(frame: pl.DataFrame) -> pl.DataFrame:
    """Each trial's rows at its last step."""
    return frame.filter(pl.col("step") == pl.col("step").max().over("trial_id"))


def cross_and_ratio(end: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The k_cross_cos_mean rows of ``end`` and the same rows divided by their trial's
    k_train_cos_mean (same step and RoPE scaling)."""
    keys = ["trial_id", "step", "method", "factor"]
    cross = end.filter(pl.col("metric") == "k_cross_cos_mean")
    train = end.filter(pl.col("metric") == "k_train_cos_mean").select(
        *keys, pl.col("value").alias("train")
    )
    ratio = cross.join(train, on=keys).with_columns(pl.col("value") / pl.col("train"))
    assert ratio.height == cross.height > 0
    return cross, ratio


def b_text(level: str, slope: float) -> str:
    """Legend text of a scaling fit, y = a x^-b."""
    return f"{level}: b = {-slope:.2f}"


def slope_text(level: str, slope: float) -> str:
    """Legend text of a drift fit."""
    return f"{level}: slope {slope:+.2f}"


# the figures


@pytest.mark.parametrize(
    ("metric", "x", "row", "col"),
    [
        ("loss", "length", None, "model.width"),
        ("accuracy", "length_ratio", "model.width", "model.position.kind"),
    ],
)
def test_extrapolation_draws_seed_means_of_the_metric(
    store: Path, metric: str, x: str, row: str | None, col: str
) -> None:
    fig = plots.plot("extrapolation", [store], metric=metric, x=x, row=row, col=col)
    rows = eval_rows(store)
    colors = hue_colors(fig.legends[0])
    panels = panels_by_title(fig)
    titles = {"model.width": "width {}", "model.position.kind": "PE {}"}
    facet_keys = [c for c in (row, col) if c]
    expected_panels = rows.partition_by(facet_keys, as_dict=True)
    assert len(panels) == len(expected_panels)
    for values, sub in expected_panels.items():
        title = ", ".join(titles[c].format(v) for c, v in zip(facet_keys, values, strict=True))
        ax = panels[title]
        expected = seed_means(sub, ["label"], x, metric)
        assert_curves(lines_by(ax, colors), expected)
        # the band: mean ± one standard error over the two seeds
        bands = bands_by(ax, colors)
        assert sorted(bands) == sorted(expected)
        for label, (xs, mean, se) in ((k, v.T) for k, v in expected.items()):
            np.testing.assert_allclose(bands[label][:, 0], xs, **TOL)
            np.testing.assert_allclose(bands[label][:, 1], mean - se, **TOL, err_msg=label)
            np.testing.assert_allclose(bands[label][:, 2], mean + se, **TOL, err_msg=label)


@pytest.mark.parametrize(("metric", "length"), [("loss", "longest"), ("perplexity", 64)])
def test_positions_draws_bucket_means_at_the_length(
    store: Path, metric: str, length: int | str
) -> None:
    fig = plots.plot("positions", [store], metric=metric, length=length)
    at = max(eval_rows(store).get_column("length")) if length == "longest" else length
    rows = (
        eval_rows(store, buckets=True)
        .filter(pl.col("length") == at)
        .with_columns(
            (pl.col("position_bucket") + pl.col("length") / (2 * N_BUCKETS)).alias("position")
        )
    )
    colors = hue_colors(fig.legends[0])
    panels = panels_by_title(fig)
    assert sorted(panels) == [f"width {w}" for w in WIDTHS]
    for (width,), sub in rows.partition_by("model.width", as_dict=True).items():
        expected = seed_means(sub, ["label"], "position", metric)
        # the first bucket has no scored targets: left out
        assert all(len(pts) == N_BUCKETS - 1 for pts in expected.values())
        assert_curves(lines_by(panels[f"width {width}"], colors), expected)


def drift_keys(fig: Figure) -> tuple[dict[str, int], dict[Any, str]]:
    """Colour -> width and dash -> PE kind, from the ntk-drift figure legend."""
    legend = fig.legends[0]
    widths = {c: int(t) for c, t in hue_colors(legend).items()}
    return widths, style_dashes(legend, plots.name_of("model.position.kind"))


@pytest.mark.parametrize("metrics", [plots.drift_metrics(), ("velocity",)])
def test_ntk_drift_draws_train_kernel_means_and_fits(store: Path, metrics: tuple[str]) -> None:
    frame = perturbed_ntk(store)
    if len(metrics) == 1:
        fig = plots.plot("ntk-drift", frame.drop("label"), metric=metrics[0])
    else:
        fig = plots.ntk_drift(frame.drop("label"))
    axes = data_axes(fig)
    assert len(axes) == len(metrics) + 1
    widths, kinds = drift_keys(fig)
    assert sorted(kinds.values()) == sorted(KINDS)
    for ax, metric in zip(axes, metrics, strict=False):
        assert ax.get_title() == plots.name_of(metric)
        rows = ntk_train_rows(frame, metric).filter(pl.col("step") > 0)
        expected = seed_means(rows, ["model.width", "model.position.kind"], "step", "value")
        assert_curves(lines_by(ax, widths, kinds), expected)
    final = last_step(ntk_train_rows(frame, metrics[0]))
    points = trial_points(final, "model.position.kind", "model.width", "value")
    assert_power_law_panel(axes[-1], points, slope_text)


def test_ntk_cross_draws_end_of_training_cross_kernels(store: Path) -> None:
    frame = perturbed_ntk(store)
    fig = plots.plot("ntk-cross", frame.drop("label"), group="mlp")
    cross, ratio = cross_and_ratio(last_step(frame.filter(pl.col("group") == "mlp")))
    colors = hue_colors(fig.legends[0])
    panels = panels_by_title(fig)
    assert len(panels) == 2 * len(WIDTHS)
    for metric, rows in (("k_cross_cos_mean", cross), ("cross_train_cos_ratio", ratio)):
        for (width,), sub in rows.partition_by("model.width", as_dict=True).items():
            ax = panels[f"{plots.name_of(metric)}\nwidth {width}"]
            assert_curves(lines_by(ax, colors), seed_means(sub, ["label"], "probe_length", "value"))


def scaling_rows(store: Path, metric: str) -> pl.DataFrame:
    """One row per trial: eval ``metric`` at L_train for the PE as trained."""
    return eval_rows(store).filter(
        (pl.col("label") == pl.col("model.position.kind"))
        & (pl.col("finetune_steps") == 0)
        & (pl.col("length") == pl.col("train.length"))
    )


@pytest.mark.parametrize(
    ("metric", "x", "hue", "col"),
    [
        ("loss", "model.width", "model.position.kind", None),
        ("accuracy", "n_params", "model.position.kind", None),
        ("error_rate", "model.width", None, "model.position.kind"),
        ("distance_from_init", "model.width", "model.position.kind", None),
    ],
)
def test_scaling_draws_trials_and_loglog_fits(
    store: Path, metric: str, x: str, hue: str | None, col: str | None
) -> None:
    if metric in plots.EVAL_METRICS:
        source: Any = store
        rows = scaling_rows(store, metric).rename({metric: "_y"})
    else:
        frame = perturbed_ntk(store)
        source = frame.drop("label")
        rows = last_step(ntk_train_rows(frame, metric)).rename({"value": "_y"})
    assert rows.height == len(KINDS) * len(WIDTHS) * 2
    fig = plots.plot("scaling", source, metric=metric, x=x, hue=hue, col=col, n_boot=20)
    panels = panels_by_title(fig)
    if col is None:
        parts = {"": rows}
    else:
        parts = {f"PE {k}": part for (k,), part in rows.partition_by(col, as_dict=True).items()}
    assert sorted(panels) == sorted(parts)
    for title, part in parts.items():
        assert_power_law_panel(panels[title], trial_points(part, hue, x, "_y"), b_text)


def test_kernel_draws_the_arrays(store: Path, rendered: dict[str, tuple[Figure, Path]]) -> None:
    with np.load(store.parent / "kernels" / "k.npz") as z:
        arrays = {k: z[k] for k in z.files}
    ax_t, ax_c, ax_p = data_axes(rendered["kernel"][0])
    np.testing.assert_array_equal(ax_t.images[0].get_array(), arrays["K_train"])
    np.testing.assert_array_equal(ax_c.images[0].get_array(), arrays["K_cross"])
    # one colour scale: 0 to the 98th percentile of |K| (no negative entries)
    both = np.abs(np.concatenate([arrays["K_train"].ravel(), arrays["K_cross"].ravel()]))
    for ax in (ax_t, ax_c):
        norm = ax.images[0].norm
        assert norm.vmin == 0.0 and norm.vmax == pytest.approx(np.percentile(both, 98))
    (line,) = data_lines(ax_p)
    profile = arrays["profile"]
    np.testing.assert_array_equal(
        line.get_xydata(), np.column_stack([np.arange(profile.size), profile])
    )

    rng = np.random.default_rng(1)
    feats = rng.normal(size=(24, 6))
    k = feats @ feats.T
    positions = np.arange(24) * 2.0
    profiles = {"diag": np.diag(k), "row 0": k[0]}
    fig = plots.plot_kernel_matrices(k[:8, :8], k[:8], profiles, positions=positions)
    ax_t, ax_c, ax_p = data_axes(fig)
    np.testing.assert_array_equal(ax_t.images[0].get_array(), k[:8, :8])
    np.testing.assert_array_equal(ax_c.images[0].get_array(), k[:8])
    vmax = np.percentile(np.abs(np.concatenate([k[:8, :8].ravel(), k[:8].ravel()])), 98)
    for ax in (ax_t, ax_c):
        norm = ax.images[0].norm
        assert isinstance(norm, mcolors.TwoSlopeNorm)  # signed: centred at 0
        assert (norm.vmin, norm.vcenter, norm.vmax) == pytest.approx((-vmax, 0.0, vmax))
    drawn = lines_by(ax_p, hue_colors(ax_p.get_legend()))
    assert_curves(drawn, {n: np.column_stack([positions, p]) for n, p in profiles.items()})


def longest_ratio(curve: pl.DataFrame, threshold: float) -> float:
    """Longest length / L_train up to which every length of one trial's curve from L_train on
    keeps ``threshold`` x its accuracy at L_train."""
    by_length = dict(curve.select("length", "accuracy").rows())
    best = L_TRAIN
    for length in sorted(v for v in by_length if v >= L_TRAIN):
        if by_length[length] < threshold * by_length[L_TRAIN]:
            break
        best = length
    return best / L_TRAIN


def test_summary_eval_panels(store: Path, rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["summary"][0]
    panels = panels_by_title(fig)
    colors = hue_colors(fig.legends[0])
    rows = eval_rows(store)
    widest = max(WIDTHS)
    wide = rows.filter(pl.col("model.width") == widest)

    for metric in ("accuracy", "loss"):
        ax = panels[f"{metric} vs length (width {widest})"]
        assert_curves(lines_by(ax, colors), seed_means(wide, ["label"], "length", metric))

    ax = panels[f"loss by position at the longest length (width {widest})"]
    buckets = (
        eval_rows(store, buckets=True)
        .filter((pl.col("model.width") == widest) & (pl.col("length") == max(rows["length"])))
        .with_columns(
            (pl.col("position_bucket") + pl.col("length") / (2 * N_BUCKETS)).alias("position")
        )
    )
    assert_curves(lines_by(ax, colors), seed_means(buckets, ["label"], "position", "loss"))

    ax = panels["loss at L_train (PE as trained) vs width"]
    scaling = scaling_rows(store, "loss")
    assert_power_law_panel(
        ax, trial_points(scaling, "model.position.kind", "model.width", "loss"), b_text
    )

    # training loss: colour = PE kind (the figure legend), dash = width (the panel's legend)
    ax = panels["training loss (dash = width)"]
    dashes = {dash_of(h): int(t.removeprefix("width ")) for t, h in legend_entries(ax.get_legend())}
    train = with_config(store, "train")
    expected = seed_means(train, ["label", "model.width"], "step", "loss")
    assert_curves(lines_by(ax, colors, dashes), expected)


def test_summary_longest_length_bars(store: Path, rendered: dict[str, tuple[Figure, Path]]) -> None:
    ax = panels_by_title(rendered["summary"][0])["longest length keeping ≥ 90% of L_train accuracy"]
    rows = eval_rows(store)
    curves = rows.partition_by(["trial_id", "label", "model.width"], as_dict=True)
    per_trial = [
        {"label": label, "model.width": width, "ratio": longest_ratio(curve, 0.9)}
        for (_, label, width), curve in curves.items()
    ]
    expected = pl.DataFrame(per_trial).group_by("label", "model.width").agg(pl.col("ratio").mean())
    # horizontal bars: the category (y tick label) is the curve, the colour the width
    width_of = {c: int(t) for c, t in hue_colors(ax.get_legend()).items()}
    label_at = {round(t.get_position()[1]): t.get_text() for t in ax.get_yticklabels()}
    bars = {}
    for p in ax.patches:
        if p.get_height() > 0:
            label = label_at[round(p.get_y() + p.get_height() / 2)]
            bars[label, width_of[color_of(p.get_facecolor())]] = p.get_width()
    assert bars == {
        (r["label"], r["model.width"]): pytest.approx(r["ratio"])
        for r in expected.iter_rows(named=True)
    }


def test_summary_ntk_panels(store: Path, rendered: dict[str, tuple[Figure, Path]]) -> None:
    fig = rendered["summary"][0]
    panels = panels_by_title(fig)
    ntk = with_config(store, "ntk")
    ax = panels["NTK distance from init (dash = PE kind)"]
    entries = legend_entries(ax.get_legend())
    widths = {
        color_of(h.get_color()): int(t.removeprefix("width "))
        for t, h in entries
        if t.startswith("width ")
    }
    kinds = {dash_of(h): t for t, h in entries if not t.startswith("width ")}
    assert sorted(kinds.values()) == sorted(KINDS)
    drift = ntk_train_rows(ntk, "distance_from_init").filter(pl.col("step") > 0)
    expected = seed_means(drift, ["model.width", "model.position.kind"], "step", "value")
    assert_curves(lines_by(ax, widths, kinds), expected)

    final = last_step(ntk_train_rows(ntk, "distance_from_init"))
    assert_power_law_panel(
        panels["end-of-training drift vs width"],
        trial_points(final, "model.position.kind", "model.width", "value"),
        slope_text,
    )

    # cross / train cosine: mean over all trials of a curve (seeds and widths)
    ax = panels["cross / train kernel cosine (end of training)"]
    _, ratio = cross_and_ratio(last_step(ntk.filter(pl.col("group") == "total")))
    expected = seed_means(ratio, ["label"], "probe_length", "value")
    assert_curves(lines_by(ax, hue_colors(fig.legends[0])), expected)
