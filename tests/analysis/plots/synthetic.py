"""A small synthetic, schema-correct results store (4 PE kinds x 2 widths x 2 seeds, RoPE
scalings, ntk rows), and checks on the figures drawn from it."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from rope_lab.results import append_rows, mark_success, trial_dir, write_trial_row

KINDS = ("rope", "alibi", "learned", "none")
WIDTHS = (32, 64)
SEEDS = (0, 1)
L_TRAIN = 32
LENGTHS = (16, 32, 64, 128)
SCALINGS = (("linear", 2.0), ("linear", 4.0), ("yarn", 2.0), ("yarn", 4.0))
NTK_STEPS = (0, 10, 100, 1000)
PROBES = (32, 64, 128)
N_BUCKETS = 4
DEPTHS = (0.0, 0.5, 1.0)  # eval.depths of the rope trials
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


def depth_accuracy(acc: float, depth: float, length: int) -> float:
    """Synthetic accuracy with the needle at ``depth``: lost the deeper into a long context."""
    return acc * (1.0 - 0.3 * (1.0 - depth) * max(0.0, math.log2(length / L_TRAIN)) / 2)


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
            {
                "status": "done",
                "sweep": "synthetic",
                "n_params": 25 * width * width,
                "n_params_non_embedding": 24 * width * width,
                "tokens_seen": 200 * 8 * L_TRAIN,
            },
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
                if kind == "rope":  # rows at a set needle depth (eval.depths)
                    rows += [
                        {**common, "length": length, "depth": d, "loss": loss,
                         "accuracy": depth_accuracy(acc, d, length)}
                        for d in DEPTHS
                    ]  # fmt: skip
            append_rows(d, "eval", rows, segment=f"eval_{method}_x{factor:g}")
        # answers decoded with a cache (scalings that do not depend on the length: once)
        decoded = [
            {"step": 200, "method": method, "factor": factor, "finetune_steps": 0,
             "length": length, "mode": "decode", "protocol": "any",
             "accuracy": 0.9 * _accuracy(kind, method, factor, length, width, seed),
             "exact_match": _accuracy(kind, method, factor, length, width, seed) ** 2}
            for method, factor in stages
            for length in LENGTHS
        ]  # fmt: skip
        append_rows(d, "eval", decoded, segment="decode")
        # attention statistics (eval.attention_stats), as trained: per layer, then per head
        attention = [
            {"step": 200, "method": stages[0][0], "factor": 1.0, "finetune_steps": 0,
             "length": length, "mode": "attention", "layer": layer, "head": head,
             "first_token_mass": 0.6 * (L_TRAIN / length) ** 0.5 / (1 + layer + 0.1 * seed)}
            for length in LENGTHS
            for layer in (0, 1)
            for head in (None, 0, 1)
        ]  # fmt: skip
        append_rows(d, "eval", attention, segment="attention")
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


def png_ok(path: Path) -> None:
    """A PNG file of a real figure (not an empty canvas)."""
    assert path.is_file() and path.stat().st_size > 5000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def data_axes(fig: Figure) -> list:
    """The visible panels of ``fig``, colour bars left out."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def dashed_vlines(ax) -> list:
    """The dashed vertical lines of a panel (the L_train markers)."""
    return [ln for ln in ax.lines if ln.get_linestyle() == "--" and len(set(ln.get_xdata())) == 1]


GAP_SIZES = (2e4, 8e4, 3.2e5, 1.28e6, 5.12e6)


def make_gap_store(
    root: Path, gammas: dict[str, float], *, bump: str | None = None, ratios=(1, 2, 4)
) -> Path:
    """Trials (each kind x 5 sizes x 3 seeds) evaluated at ``ratios`` x L_train: loss at
    L_train 1.5 + 30 N^-0.3, plus at r x L_train the gap 50 log2(r) N^gamma of the kind's
    ``gammas`` entry, each value times its own seeded noise factor within 1%; the kind
    ``bump`` has 30% more loss at every ratio at the largest size (a law cannot predict it)."""
    import numpy as np

    run = root / "gaps"
    rng = np.random.default_rng(0)
    for kind, n, seed in itertools.product(gammas, GAP_SIZES, (0, 1, 2)):
        folder = trial_dir(run, f"gap-{kind}-n{n:g}-s{seed}")
        config = {"model.position.kind": kind, "task.name": "lm_text", "train.length": L_TRAIN,
                  "train.seed": seed}  # fmt: skip
        row = {"status": "done", "sweep": "gaps", "n_params": int(n * 1.1)}
        write_trial_row(folder, row | {"n_params_non_embedding": int(n), "tokens_seen": 10**6},
                        config)  # fmt: skip
        base = (1.5 + 30 * n**-0.3) * (1 + 0.01 * rng.uniform(-1, 1))
        scale = 1.3 if kind == bump and n == GAP_SIZES[-1] else 1.0
        common = {"step": 100, "method": "none", "factor": 1.0, "finetune_steps": 0}
        rows = []
        for r in ratios:
            gap = 50 * math.log2(r) * n ** gammas[kind] * (1 + 0.01 * rng.uniform(-1, 1))
            rows.append({**common, "length": L_TRAIN * r, "loss": scale * (base + gap)})
        append_rows(folder, "eval", rows, segment="eval")
        mark_success(folder)
    return run


def lr_rows(slopes: dict[str, float] | None = None, seeds: int = 2) -> pl.DataFrame:
    """Eval rows of trained ALiBi models over an lr x width grid whose optimal lr moves with
    width by ``slopes`` (parametrisation -> slope; `tests.analysis.test_lr_transfer`)."""
    from tests.analysis.test_lr_transfer import sweep_rows

    extra = {"model.position.kind": pl.lit("alibi"), "method": pl.lit("none"),
             "factor": pl.lit(1.0), "finetune_steps": pl.lit(0)}  # fmt: skip
    return sweep_rows(slopes or {"mup": 0.0, "sp": -1.0}, seeds=seeds).with_columns(**extra)
