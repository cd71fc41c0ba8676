"""The label columns a figure's frame carries, the curves read from them, and their order."""

from __future__ import annotations

import polars as pl
from matplotlib import colors as mcolors

from rope_lab.analysis import query as q
from rope_lab.analysis.plots.curves import LABEL_COLUMNS, Curve, curves, with_labels
from rope_lab.analysis.plots.style import hue_mapping, label_key, sort_key

# kind, trained scaling and factor, evaluated method and factor, fine-tuning steps
ROWS = [
    ("alibi", "default", 1.0, "none", 1.0, 0),
    ("rope", "default", 1.0, "default", 1.0, 100),
    ("rope", "default", 1.0, "yarn", 4.0, 0),
    ("rope", "linear", 2.0, "linear", 2.0, 0),
    ("rope", "linear", 2.0, "ntk", 1.5, 100),
    ("rope", "default", 1.0, "default", 1.0, 0),
]


def frame() -> pl.DataFrame:
    scaling, factor = "model.position.rope.scaling", "model.position.rope.factor"
    cols = [q.KIND, scaling, factor, "method", "factor", "finetune_steps"]
    return pl.DataFrame(ROWS, schema=cols, orient="row")


def test_label_columns_carry_the_parts_of_the_label() -> None:
    got = with_labels(frame()).select("label", *LABEL_COLUMNS).rows()
    assert got == [
        ("alibi", "alibi", None, None, 0),
        ("rope +ft100", "rope", None, None, 100),
        ("rope/yarn x4", "rope", "yarn", 4.0, 0),
        ("rope (linear x2)", "rope", None, 2.0, 0),
        ("rope/ntk x1.5 +ft100", "rope", "ntk", 1.5, 100),
        ("rope", "rope", None, None, 0),
    ]
    ntk = with_labels(frame().with_columns(pl.lit("none").alias("method")), as_trained="none")
    assert set(ntk.get_column("label_method")) == {None}


def test_curves_order_and_colours_read_the_columns() -> None:
    keys = curves(with_labels(frame()))
    assert keys["rope/yarn x4"] == Curve("rope/yarn x4", "rope", "yarn", 4.0, 0)
    assert keys["rope/yarn x4"].family == "rope/yarn" and keys["rope/yarn x4"].scaled
    assert keys["rope (linear x2)"].family == "rope" and not keys["rope (linear x2)"].scaled
    # a label the columns contradict: the columns win
    odd = with_labels(frame()).with_columns(pl.lit("custom").alias("label")).head(1)
    assert curves(odd)["custom"].family == "alibi"
    order, palette = hue_mapping(with_labels(frame()), "label")
    assert order == [
        "alibi",
        "rope",
        "rope +ft100",
        "rope (linear x2)",
        "rope/ntk x1.5 +ft100",
        "rope/yarn x4",
    ]
    hexes = {label: mcolors.to_hex(c) for label, c in palette.items()}
    # curves of one encoding as trained: its hue (#d62728) from a tint (0.55 of the way to
    # white) to a shade (0.6 of the way to black), so none is drawn like another
    assert (hexes["rope"], hexes["rope +ft100"], hexes["rope (linear x2)"]) == (
        "#ed9e9e",
        "#d52728",
        "#561010",
    )
    assert (hexes["alibi"], hexes["rope/ntk x1.5 +ft100"], hexes["rope/yarn x4"]) == (
        "#2ca02c",
        "#54278f",  # the dark end of a family of one
        "#ae017e",
    )
    # bare label strings (analysis/report.py) sort the same way
    assert sorted(keys, key=label_key) == sorted(keys, key=lambda v: sort_key(keys[v]))


def test_every_encoding_and_scaling_pair_has_its_own_legible_colour() -> None:
    """Every registered encoding as trained and every rotary encoding under every registered
    scaling at two factors (43 curves with RoPE and xPos): pairwise distinct colours, at least
    0.05 apart in RGB (about 13 of 255 per channel), read from the registries alone."""
    from itertools import combinations

    import numpy as np

    from rope_lab.analysis.plots.style import curve_mapping
    from rope_lab.registry import POSITIONS, SCALINGS

    keys = [Curve(k, k) for k in POSITIONS.names()]
    rotary = [k for k in POSITIONS.names() if POSITIONS[k].supports_scaling]
    assert len(rotary) >= 2  # RoPE and xPos
    for kind in rotary:
        for method in SCALINGS.names():
            keys += [Curve(f"{kind}/{method} x{f:g}", kind, method, f) for f in (2.0, 4.0)]
    order, palette = curve_mapping(keys)
    assert sorted(order) == sorted(c.label for c in keys)
    rgb = {label: np.array(mcolors.to_rgb(c)) for label, c in palette.items()}
    closest = min(np.linalg.norm(rgb[a] - rgb[b]) for a, b in combinations(rgb, 2))
    assert closest >= 0.05
