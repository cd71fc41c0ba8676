"""The vanishing threshold's crossing (`rope_lab.analysis.kernel_map`) on synthetic rows with
closed-form answers."""

from __future__ import annotations

import math

import polars as pl
import pytest

from rope_lab.analysis.kernel_map import (
    VANISHING_COS,
    crossing,
    log_linear_trend,
    random_feature_cosine,
    vanishing_ratios,
    vanishing_table,
)

RATIOS = [2.0, 4.0, 8.0, 16.0, 32.0]


def test_first_ratio_at_or_below_the_threshold_in_any_order():
    got = crossing([16.0, 2.0, 8.0, 4.0], [0.05, 0.5, 0.1, 0.3])
    assert got["crossed_at"] == 8.0  # 0.1 is at the threshold: crossed
    assert got["extrapolated"] is None


def test_an_exact_log_linear_fall_extrapolates_in_closed_form():
    """value = 0.9 - 0.1 log2(r): at 0.1 when log2 r = 8, r = 256; never crossed up to 32."""
    values = [0.9 - 0.1 * math.log2(r) for r in RATIOS]
    assert log_linear_trend(RATIOS, values) == pytest.approx((0.9, -0.1))
    got = crossing(RATIOS, values)
    assert got["crossed_at"] is None
    assert got["slope"] == pytest.approx(-0.1)
    assert got["extrapolated"] == pytest.approx(256.0)


def test_a_nearly_flat_fall_extrapolates_to_infinity_not_an_overflow():
    """0.6 - 1e-4 log2(r) reaches 0.1 after 5000 doublings: past any float, inf."""
    got = crossing(RATIOS, [0.6 - 1e-4 * math.log2(r) for r in RATIOS])
    assert got["extrapolated"] == math.inf


def test_a_kernel_that_does_not_fall_never_vanishes():
    got = crossing(RATIOS, [0.5, 0.6, 0.6, 0.7, 0.8])
    assert got["crossed_at"] is None and got["extrapolated"] is None and got["slope"] > 0


def test_seeds_are_averaged_before_the_crossing():
    """Seeds 0.05 and 0.25 at 4x average 0.15 > 0.1: the crossing is at 8x, not 4x."""
    rows = [
        {"encoding": "rope", "depth": 2, "width": 32, "parametrization": "ntk", "kernel": "ntk",
         "seed": s, "ratio": r, "tail_cos_mean": v}
        for s, values in ((0, [0.5, 0.05, 0.0]), (1, [0.5, 0.25, 0.0]))
        for r, v in zip([2.0, 4.0, 8.0], values, strict=True)
    ]  # fmt: skip
    table = vanishing_ratios(pl.DataFrame(rows))
    assert table.height == 1
    assert table["crossed_at"][0] == 8.0
    assert table["at_min_ratio"][0] == pytest.approx(0.5)
    assert vanishing_table(pl.DataFrame(rows))["metric"].to_list() == ["tail_cos_mean"]


def test_the_threshold_is_far_above_the_random_feature_floor():
    """sqrt(2 / (pi P)): 0.0025 at 100k parameters, about 40 times below the threshold."""
    assert random_feature_cosine(100_000) == pytest.approx(
        math.sqrt(2 / math.pi) / 316.2278, rel=1e-4
    )
    assert random_feature_cosine(100_000) < VANISHING_COS / 39


def synthetic_map() -> pl.DataFrame:
    """Two encodings, depths 1 and 2, NTK and NNGP at ntk w32; sp w32 at depth 2, NTK only."""
    rows = []
    for enc in ("none", "rope"):
        for depth in (1, 2):
            for kernel in ("ntk", "nngp"):
                for r in RATIOS:
                    rows.append({"encoding": enc, "depth": depth, "width": 32,
                                 "parametrization": "ntk", "kernel": kernel, "ratio": r,
                                 "tail_cos_mean": 0.9 - 0.1 * depth * math.log2(r)})  # fmt: skip
        for r in RATIOS:
            rows.append({"encoding": enc, "depth": 2, "width": 32, "parametrization": "sp",
                         "kernel": "ntk", "ratio": r, "tail_cos_mean": 0.5})  # fmt: skip
    return pl.DataFrame(rows)


def test_the_plot_draws_a_line_per_depth_and_the_threshold(tmp_path):
    from rope_lab.analysis.plots import plot

    path = tmp_path / "map.parquet"
    synthetic_map().write_parquet(path)
    fig = plot("kernel-map", path, out=tmp_path / "map.png", threshold=0.2)
    assert (tmp_path / "map.png").stat().st_size > 0
    axes = fig.axes[:6]  # rows ntk, nngp, variants x columns none, rope
    assert len(fig.get_axes()) == 6
    ntk_none = axes[0]
    depth_lines = [ln for ln in ntk_none.get_lines() if ln.get_label() in ("1", "2")]
    assert len(depth_lines) == 2
    threshold = [ln for ln in ntk_none.get_lines() if list(ln.get_ydata()) == [0.2, 0.2]]
    assert len(threshold) == 1
    assert list(depth_lines[1].get_ydata()) == pytest.approx([0.7, 0.5, 0.3, 0.1, -0.1])
    variants = {ln.get_label() for ln in fig.axes[4].get_lines()} - {"_child0"}
    assert {"ntk w32", "sp w32"} <= variants


def test_the_plot_names_what_it_needs(tmp_path):
    from rope_lab.analysis.plots import plot
    from rope_lab.analysis.query import QueryError

    with pytest.raises(
        QueryError, match="not a file; give the Parquet file of rope-lab kernel-map"
    ):
        plot("kernel-map", tmp_path)
    with pytest.raises(QueryError, match="lack column 'depth'"):
        plot("kernel-map", synthetic_map().drop("depth"))


def test_the_command_names_a_bad_spec_in_one_line(tmp_path, capsys):
    from rope_lab.cli import main

    assert main(["kernel-map", str(tmp_path / "missing.yaml")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rope-lab: error: ")
    assert "missing.yaml" in err[0]


def test_the_main_setting_comes_first_by_depth():
    """The most common (parametrisation, width) first, ordered by depth; the others after."""
    from types import SimpleNamespace

    from rope_lab.cli_kernel_map import map_order

    def trial(param, width, depth):
        model = SimpleNamespace(parametrization=param, width=width, depth=depth)
        return SimpleNamespace(model=model)

    trials = [trial("sp", 32, 2), trial("ntk", 32, 8), trial("ntk", 32, 1), trial("ntk", 32, 2)]
    got = [(t.model.parametrization, t.model.depth) for t in map_order(trials)]
    assert got == [("ntk", 1), ("ntk", 2), ("ntk", 8), ("sp", 2)]


def staged_map() -> pl.DataFrame:
    """synthetic_map at init; after training, the NTK of depth d falls as 0.9 - 0.2 d log2 r."""
    init = synthetic_map().with_columns(stage=pl.lit("init"))
    trained = init.filter(pl.col("kernel") == "ntk").with_columns(
        stage=pl.lit("trained"),
        tail_cos_mean=0.9 - 0.2 * pl.col("depth") * pl.col("ratio").log(2),
    )
    return pl.concat([init, trained])


def test_the_two_stages_sit_side_by_side():
    """Depth 1 of "none": init 0.9 - 0.1 log2 r never crosses by 32x and extrapolates to 256x;
    trained 0.9 - 0.2 log2 r reaches 0.1 at 16x (0.9 - 0.8 = 0.1, at the threshold). The
    NNGP is measured at init only: its trained columns are null."""
    from rope_lab.analysis.kernel_map import stages_side_by_side

    table = stages_side_by_side(vanishing_table(staged_map()))
    assert "stage" not in table.columns
    assert table.height == vanishing_table(synthetic_map()).height
    point = (pl.col("encoding") == "none") & (pl.col("depth") == 1) & (pl.col("width") == 32)
    ntk = table.filter(point & (pl.col("kernel") == "ntk")).row(0, named=True)
    assert ntk["init_crossed_at"] is None
    assert ntk["init_extrapolated"] == pytest.approx(256.0)
    assert ntk["init_slope"] == pytest.approx(-0.1)
    assert ntk["trained_crossed_at"] == 16.0 and ntk["trained_extrapolated"] is None
    assert ntk["trained_at_max_ratio"] == pytest.approx(-0.1)
    nngp = table.filter(point & (pl.col("kernel") == "nngp")).row(0, named=True)
    assert nngp["init_extrapolated"] == pytest.approx(256.0)
    assert nngp["trained_slope"] is None and nngp["trained_crossed_at"] is None


def test_the_plot_draws_init_dotted_and_trained_solid(tmp_path):
    from rope_lab.analysis.plots import plot

    fig = plot("kernel-map", staged_map(), out=tmp_path / "map.png")
    ntk_none = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ntk_none.get_lines() if ln.get_label()[0] in "12"}
    assert sorted(lines) == ["1 init", "1 trained", "2 init", "2 trained"]
    assert lines["2 init"].get_linestyle() == ":" and lines["2 trained"].get_linestyle() == "-"
    assert list(lines["2 trained"].get_ydata()) == pytest.approx([0.5, 0.1, -0.3, -0.7, -1.1])
    nngp_lines = [ln.get_label() for ln in fig.axes[2].get_lines()]
    assert "1 init" not in nngp_lines and "1" in nngp_lines  # the NNGP has one stage
    assert "dotted: init, solid: trained" in fig._suptitle.get_text()
