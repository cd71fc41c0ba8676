"""The CNN family's config (`model.family: cnn`, `model.cnn.*`): parsing, the checks that
reject what a CNN has no use for, trial ids, the trials-table columns, curve labels and the
sweep plan's counts."""

import polars as pl
import pytest

from rope_lab.analysis.curve_labels import variant_expr
from rope_lab.analysis.plots.curves import label_columns
from rope_lab.config import ConfigError, LayerConfig, TrialConfig, from_dict, replace, validate
from rope_lab.model.transformer import count_non_embedding_params, count_params
from rope_lab.registry import MODELS
from rope_lab.results.columns import variant_columns
from rope_lab.sweep.plan import estimate_cost, forward_flops
from rope_lab.trial.scaling_plan import scalings_for
from rope_lab.trial.train import make_model

BASE = {"family": "cnn", "width": 16, "depth": 3, "cnn": {"kernel_size": 3, "dilations": [1, 2, 4]}}


def cnn(**changes) -> TrialConfig:
    """A validated CNN trial (passkey at its defaults) with dotted `changes`."""
    cfg = from_dict(TrialConfig, {"model": BASE})
    return validate(replace(cfg, **changes))


def test_families_are_registered_and_typed():
    assert MODELS.names() == ("transformer", "cnn")
    cfg = cnn()
    assert cfg.model.arch.kernel_size == 3 and cfg.model.arch.dilations == (1, 2, 4)
    assert type(TrialConfig().model.arch) is MODELS["transformer"]
    with pytest.raises(ConfigError, match=r"model\.cnn\.kernel_sise: unknown key"):
        from_dict(TrialConfig, {"model": {"family": "cnn", "cnn": {"kernel_sise": 3}}})
    with pytest.raises(ConfigError, match=r"model\.family: unknown value 'rnn'"):
        from_dict(TrialConfig, {"model": {"family": "rnn"}})


def test_trial_ids():
    """The default trial keeps its pinned id; a CNN's slug names the CNN, not an encoding, and
    its fields are in the hash."""
    assert TrialConfig().trial_id == "passkey-rope-w128-d2-L64-s0-2d33b89688"
    tid = cnn().trial_id
    assert tid.startswith("passkey-cnn-k3-d1.2.4-w16-d3-L64-s0-") and "rope" not in tid
    assert cnn(**{"model.cnn.kernel_size": 5}).trial_id[-10:] != tid[-10:]


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"model.position.kind": "alibi"}, "model.position.kind"),
        ({"model.position.rope.theta": 5e5}, "model.position.rope.theta"),
        ({"model.position.randomized": True}, "model.position.randomized"),
        ({"model.layers": (LayerConfig(window=4),)}, "model.layers"),
        ({"model.heads": 2}, "model.heads"),
        ({"model.attention": "blocked"}, "model.attention"),
        ({"model.scalable_softmax": True}, "model.scalable_softmax"),
        ({"model.block": "parallel"}, "model.block"),
        ({"model.logit_scale": 0.5}, "model.logit_scale"),
        ({"model.cnn.kernel_size": 0}, "model.cnn.kernel_size"),
        ({"model.cnn.dilations": ()}, "model.cnn.dilations"),
        ({"model.cnn.dilations": (1, 0)}, r"model.cnn.dilations\[1\]"),
        ({"eval.decode.protocols": ("prefill_fixed",)}, "eval.decode.protocols"),
        ({"eval.zero_shot_temperature": True}, "eval.zero_shot_temperature"),
        ({"train.pose_target_length": 128}, "train.pose_target_length"),
    ],
)
def test_rejects_what_a_cnn_has_no_use_for(changes, key):
    with pytest.raises(ConfigError, match=rf"^{key}:"):
        cnn(**changes)


def test_width_needs_no_heads_and_scaling_stages_are_skipped():
    """Width 16 is not a multiple of the default head_dim 32: a CNN has no heads. It declares no
    scaling, so the default eval methods give the model as trained only."""
    cfg = cnn()
    assert not cfg.model.supports_scaling
    assert [s.method for s in scalings_for(cfg)] == ["none"]


def test_trials_table_columns():
    """A CNN row: its label and receptive field, no encoding attributes of the (unused) RoPE;
    a Transformer row: an empty label and a null receptive field."""
    cols = variant_columns(cnn())
    assert cols["family.label"] == "CNN k3 d1,2,4"
    assert cols["family.receptive_field"] == 15
    assert cols["encoding.family"] == "none" and cols["encoding.rotary"] is False
    assert cols["encoding.options"] == ""
    rope = variant_columns(TrialConfig())
    assert rope["family.label"] == "" and rope["family.receptive_field"] is None
    assert rope["encoding.rotary"] is True


def test_curve_label_names_the_cnn():
    """Rows as the trials table has them: the CNN's label replaces the encoding's kind, in the
    label and in the label columns figures colour by; a Transformer keeps its kind."""
    rows = pl.DataFrame(
        {
            "model.position.kind": ["rope", "rope", "alibi"],
            "family.label": ["CNN k3 d1,2,4", "", None],
            "encoding.options": ["", "", ""],
            "method": ["none", "none", "none"],
        }
    )
    labels = rows.select(variant_expr(rows.columns)).to_series().to_list()
    assert labels == ["CNN k3 d1,2,4", "rope", "alibi"]
    kinds = rows.select(label_columns(rows.columns)[0]).to_series().to_list()
    assert kinds == ["CNN k3 d1,2,4", "rope", "alibi"]


@pytest.mark.parametrize(("norm", "mlp"), [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
def test_plan_counts_equal_the_model(norm, mlp):
    """Parameters as counted in the built model; forward FLOPs 2 N L with N the matmul
    weights: 3 layers x (conv 3 x 16^2 + MLP) + readout 16 V, linear in L."""
    cfg = cnn(**{"model.norm": norm, "model.mlp": mlp})
    cost, model, v = estimate_cost(cfg), make_model(cfg), cfg.task.vocab_size
    assert cost["n_params"] == count_params(model)
    assert cost["n_params_non_embedding"] == count_non_embedding_params(model)
    mlp_weights = (3 if mlp == "swiglu" else 2) * 16 * 64
    assert cost["matmul_params"] == 3 * (3 * 16 * 16 + mlp_weights) + 16 * v
    assert forward_flops(cfg, 100) == 2 * cost["matmul_params"] * 100
    assert forward_flops(cfg, 200) == 2 * forward_flops(cfg, 100)
    assert cost["receptive_field"] == 15 and estimate_cost(TrialConfig())["receptive_field"] == 0
    assert cost["finetune_flops"] == 0 and cost["stages"] == 2
