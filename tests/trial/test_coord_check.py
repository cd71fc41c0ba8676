"""The coordinate check: per-layer activations, the width laws of sp and mup, the CLI and its
plot."""

import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
import yaml

from rope_lab.cli import main
from rope_lab.config import replace, to_dict
from rope_lab.trial.coord_check import (
    CoordCheckError,
    coord_check,
    layer_activations,
    width_slopes,
)
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

# muP: every layer's change is width-independent in the limit (slope 0); SP with Adam: the
# readout's update moves each logit by O(lr) per coordinate summed over `width` coherent
# coordinates (slope 1). The midpoint 0.5 separates the two laws; muP must stay within half of
# it, leaving room for finite-width corrections at widths 32..128 (measured: |slope| <= 0.11
# for muP, 0.92 for SP's logits).
MUP_BOUND = 0.25
SP_LOGITS_BOUND = 0.5


def _cfg(**model):
    cfg = tiny_trial("rope", width=32, depth=1, head_dim=8, steps=3)
    changes = {"model.base_width": 32, "train.lr": 1e-2, "train.batch_size": 4}
    return replace(cfg, **changes | {f"model.{k}": v for k, v in model.items()})


def test_layer_activations_end_in_the_models_logits():
    model = make_model(_cfg(depth=2))
    tokens = jnp.arange(32).reshape(2, 16) % 24
    acts = layer_activations(model, tokens)
    assert list(acts) == [
        "embedding",
        *(f"block{i}.{part}" for i in range(2) for part in ("attn", "mlp", "residual")),
        "logits",
    ]
    np.testing.assert_array_equal(np.asarray(acts["logits"]), np.asarray(model(tokens)))
    # the residual stream is the embedding plus every branch output
    branches = sum(acts[f"block{i}.{p}"] for i in range(2) for p in ("attn", "mlp"))
    np.testing.assert_allclose(acts["block1.residual"], acts["embedding"] + branches, atol=1e-5)


@pytest.mark.slow  # trains 2 parametrisations x 2 widths
def test_mup_changes_are_flat_in_width_and_sp_logits_grow():
    frame = coord_check(_cfg(), [32, 128], ["sp", "mup"], steps=3)
    assert frame.height == 2 * 2 * 5 and set(frame["steps"]) == {3}
    slopes = width_slopes(frame)
    mup = slopes.filter(pl.col("parametrization") == "mup")
    assert mup["slope_change"].abs().max() < MUP_BOUND, mup
    sp_logits = slopes.filter((pl.col("parametrization") == "sp") & (pl.col("layer") == "logits"))
    assert sp_logits["slope_change"].item() > SP_LOGITS_BOUND, slopes
    # at the base width the two are one model: identical rows
    at_base = frame.filter(pl.col("width") == 32).drop("parametrization").partition_by("layer")
    for rows in at_base:
        assert rows["rms_init"].n_unique() == rows["rms_change"].n_unique() == 1


def test_width_slopes_closed_form():
    frame = pl.DataFrame(
        {
            "parametrization": ["mup"] * 3,
            "width": [32, 64, 128],
            "layer": ["logits"] * 3,
            "rms_init": [0.0, 0.0, 0.0],
            "rms_change": [3.0, 3.0 * 2**0.5, 6.0],
        }
    )
    row = width_slopes(frame).row(0, named=True)
    assert row["slope_init"] is None  # a zero RMS has no log
    assert row["slope_change"] == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--widths", "32,36"], "--widths: 36 is not a multiple of model.head_dim=8"),
        (["--widths", "32"], "--widths [32]: give two or more distinct positive widths"),
        (["--parametrizations", "sp,mu"], "--parametrizations: 'mu' is not one of sp, ntk, mup"),
    ],
)
def test_cli_refusals_are_one_line(tmp_path, capsys, args, error):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(to_dict(_cfg())))
    assert main(["coord-check", str(path), *args]) == 1
    err = capsys.readouterr().err
    assert err == f"rope-lab: error: {error}\n"
    with pytest.raises(CoordCheckError, match=r"model\.heads: leave it unset"):
        coord_check(_cfg(heads=2), [32, 64])


@pytest.mark.slow  # trains at 2 widths
def test_cli_writes_parquet_and_plot(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(to_dict(_cfg(width=8))))
    out = tmp_path / "cc.parquet"
    argv = ["coord-check", str(path), "--widths", "8,16", "--parametrizations", "mup"]
    assert main([*argv, "--steps", "1", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "slope of log RMS against log width" in printed
    frame = pl.read_parquet(out)
    assert sorted(set(frame["width"])) == [8, 16] and set(frame["parametrization"]) == {"mup"}
    png = tmp_path / "cc.png"
    assert main(["plot", "coord-check", str(out), "--out", str(png)]) == 0
    assert png.stat().st_size > 0
