"""The zero-shot log-length temperature stage: which trials get it, its rows against direct
computations through the model, the bias it scales, its stage in the pipeline and a sweep, its
cost in the plan, and its labels, colours and line style in the figures."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from matplotlib import colors as mcolors

from rope_lab.analysis import query as q
from rope_lab.analysis.curve_labels import TEMPERATURE_LABEL
from rope_lab.analysis.plots.curves import Curve, with_labels
from rope_lab.analysis.plots.style import (
    SCALED_DASH,
    TEMPERATURE_DASH,
    dashed_labels,
    family_style,
    hue_mapping,
    label_key,
    sort_key,
)
from rope_lab.config import TrialConfig, replace, to_dict, validate
from rope_lab.model.factory import make_model
from rope_lab.model.transformer import Transformer, with_scaling, with_temperature
from rope_lab.registry import POSITIONS, SCALINGS
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.sweep.plan import estimate_cost
from rope_lab.sweep.stages import MODEL_FILE, run_stage
from rope_lab.tasks import Task, task_from_config
from rope_lab.trial import finetune
from rope_lab.trial.checkpoint import save_model
from rope_lab.trial.evaluate import evaluate_model
from rope_lab.trial.objective import token_losses
from rope_lab.trial.scaling_plan import (
    TEMPERATURE,
    Scaling,
    finetune_scalings,
    scaling_stages,
    scalings_for,
)
from rope_lab.trial.stage_plan import scaling_stage_name
from tests.helpers import tiny_trial

KINDS = POSITIONS.names()
L_TRAIN = 8
METRICS = ("loss", "perplexity", "accuracy", "exact_match", "sequences_per_forward")


def _with_temperature(cfg: TrialConfig, **changes) -> TrialConfig:
    return validate(replace(cfg, **{"eval.zero_shot_temperature": True, **changes}))


def _small(kind: str, **options) -> TrialConfig:
    """A tiny trial evaluated at 3/4 L_train, L_train and 2 L_train, with the temperature."""
    return _with_temperature(
        tiny_trial(kind, length=L_TRAIN, **options),
        **{"eval.length_multipliers": (0.75, 1.0, 2.0)},
    )


def _whole(rows: list[dict], method: str) -> dict[int, dict]:
    """Whole-sequence rows of `method` by length."""
    return {r["length"]: r for r in rows if r["method"] == method and r["position_bucket"] is None}


@eqx.filter_jit
def _forward(model: Transformer, tokens: jax.Array) -> jax.Array:
    """Logits (B, L, V) of tokens (B, L) at positions 0..L-1."""
    return model(tokens)


_token_losses = eqx.filter_jit(token_losses)


def _direct_loss(model: Transformer, cfg: TrialConfig, task: Task, length: int) -> float:
    """Mean loss over the scored tokens of the eval batches at `length`, each drawn as the
    evaluation draws it (key fold_in(fold_in(eval.seed, length), b), data from its first
    half), through `model` itself."""
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.eval.seed), length)
    total = count = 0.0
    for b in range(cfg.eval.batches):
        data_key = jax.random.split(jax.random.fold_in(key, b))[0]
        batch = task.sample_from(task.operands("eval"), cfg.eval.batch_size, length, key=data_key)
        positions = jnp.broadcast_to(jnp.arange(length), batch.tokens.shape)
        losses, _ = _token_losses(model, batch, positions)
        mask = np.asarray(batch.mask)
        total += float(np.sum(np.where(mask, np.asarray(losses, np.float64), 0.0)))
        count += float(mask.sum())
    return total / count


# ---------------------------------------------------------------- which trials get the stage


@pytest.mark.parametrize("kind", KINDS)
def test_every_encoding_gets_the_stage_with_the_flag_and_none_without(kind):
    off = validate(tiny_trial(kind))
    on = _with_temperature(off)
    assert (TEMPERATURE, 1.0) not in scaling_stages(off)
    assert scaling_stages(on) == [*scaling_stages(off), (TEMPERATURE, 1.0)]
    assert scalings_for(on)[0] == scalings_for(off)[0]  # the as-trained entry stays first
    tuned = {"eval.finetune_steps": 3}
    assert finetune_scalings(_with_temperature(off, **tuned)) == finetune_scalings(
        replace(off, **tuned)
    )
    assert scaling_stage_name(on, Scaling(TEMPERATURE, 1.0)).startswith("temperature_x1-")
    assert TEMPERATURE not in SCALINGS  # no RoPE method can be mistaken for it


def test_rope_stages_keep_their_order_and_the_temperature_comes_last():
    cfg = _with_temperature(tiny_trial("rope"))
    assert scaling_stages(cfg) == [("linear", 2.0), ("dynamic", 2.0), (TEMPERATURE, 1.0)]
    assert finetune_scalings(cfg) == []  # eval.finetune_steps 0: nothing is fine-tuned
    tuned = replace(cfg, **{"eval.finetune_steps": 3})
    assert [(s.method, s.factor) for s in finetune_scalings(tuned)] == [
        ("linear", 2.0),
        ("dynamic", 2.0),
    ]


def test_plan_counts_one_more_evaluation_pass():
    for kind, passes_off in (("alibi", 1), ("none", 1), ("rope", 3)):
        off = validate(tiny_trial(kind))
        on, base = estimate_cost(_with_temperature(off)), estimate_cost(off)
        assert on["eval_tokens"] * passes_off == base["eval_tokens"] * (passes_off + 1), kind
        assert on["train_tokens"] == base["train_tokens"]
        assert on["finetune_tokens"] == base["finetune_tokens"] == 0


def test_plan_does_not_count_a_finetune_for_the_temperature():
    off = validate(replace(tiny_trial("rope"), **{"eval.finetune_steps": 3}))
    on, base = estimate_cost(_with_temperature(off)), estimate_cost(off)
    assert on["finetune_tokens"] == base["finetune_tokens"]
    # 1 + 2 zero-shot + 2 fine-tuned passes, plus the temperature's
    assert on["eval_tokens"] * 5 == base["eval_tokens"] * 6


# ------------------------------------------------------------------ rows against direct maths


@pytest.fixture(scope="module")
def alibi():
    """A tiny ALiBi trial with the temperature: its config, model, task and evaluation rows."""
    cfg = _small("alibi")
    model, task = make_model(cfg, key=jax.random.PRNGKey(3)), task_from_config(cfg.task)
    return cfg, model, task, evaluate_model(model, task, cfg, step=0)


def _assert_rows_equal_up_to_l_train(rows: list[dict], as_trained: str) -> None:
    """Temperature rows equal the as-trained rows exactly at L <= L_train (buckets included)."""
    pick = lambda m: [r for r in rows if r["method"] == m and r["length"] <= L_TRAIN]
    temp, trained = pick(TEMPERATURE), pick(as_trained)
    assert len(temp) == len(trained) > 0
    for a, b in zip(temp, trained, strict=True):
        assert (a["factor"], a["finetune_steps"]) == (1.0, 0)
        for col in ("length", "position_bucket", *METRICS):
            assert a[col] == b[col] or (a[col] != a[col] and b[col] != b[col]), (col, a, b)


def test_rows_up_to_l_train_are_the_rows_as_trained(alibi):
    cfg, _, _, rows = alibi
    assert cfg.eval_lengths == (6, 8, 16)
    _assert_rows_equal_up_to_l_train(rows, "none")
    beyond = 2 * L_TRAIN
    assert _whole(rows, TEMPERATURE)[beyond]["loss"] != _whole(rows, "none")[beyond]["loss"]


def test_rows_beyond_l_train_are_the_model_with_its_logits_times_log_ratio(alibi):
    cfg, model, task, rows = alibi
    length = 2 * L_TRAIN
    t = math.log(length) / math.log(L_TRAIN)  # 4/3
    direct = _direct_loss(with_temperature(model, t), cfg, task, length)
    assert _whole(rows, TEMPERATURE)[length]["loss"] == pytest.approx(direct, rel=1e-5)
    untouched = _direct_loss(model, cfg, task, length)
    assert abs(direct - untouched) > 1e-3  # the temperature matters at this size


def _q_scaled(model: Transformer, t: float) -> Transformer:
    """Every layer's query weights times t: q.k times t, any bias left alone."""
    return eqx.tree_at(lambda m: m.blocks.attn.q.weight, model, model.blocks.attn.q.weight * t)


def test_alibi_bias_is_scaled_with_q_dot_k(alibi):
    """t (q.k / sqrt(d) + bias): the temperature equals scaling the queries and the ALiBi
    slopes by t, not the queries alone (with NoPE, which has no bias, the two agree)."""
    cfg, model, task, rows = alibi
    t, length = 1.75, 12
    tokens = jax.random.randint(jax.random.PRNGKey(5), (2, length), 0, cfg.task.vocab_size)
    slopes = model.position.slopes.value
    both = eqx.tree_at(lambda m: m.position.slopes.value, _q_scaled(model, t), slopes * t)
    hot = np.asarray(_forward(with_temperature(model, t), tokens))
    np.testing.assert_allclose(hot, np.asarray(_forward(both, tokens)), rtol=1e-5, atol=1e-5)
    assert np.abs(hot - np.asarray(_forward(_q_scaled(model, t), tokens))).max() > 1e-2

    nope = make_model(_small("none"), key=jax.random.PRNGKey(3))
    np.testing.assert_allclose(
        np.asarray(_forward(with_temperature(nope, t), tokens)),
        np.asarray(_forward(_q_scaled(nope, t), tokens)),
        rtol=1e-5,
        atol=1e-5,
    )
    # the stage's loss beyond L_train is not that of scaling q.k alone
    beyond = 2 * L_TRAIN
    q_only = _direct_loss(_q_scaled(model, math.log(beyond) / math.log(L_TRAIN)), cfg, task, beyond)
    assert abs(_whole(rows, TEMPERATURE)[beyond]["loss"] - q_only) > 1e-3


def test_first_layer_logits_by_hand(alibi):
    """logits[h, i, j] = t (q_i . k_j / sqrt(d_head) - m_h (i - j)), m_h = 2^(-8 (h + 1) / H)."""
    cfg, model, _, _ = alibi
    t, length = 1.75, 6
    tokens = jnp.arange(length) % cfg.task.vocab_size
    heads, d_head = cfg.model.n_heads, cfg.model.d_head
    first = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, model.blocks)
    h = first.attn_norm(model.embed(tokens, jnp.arange(length)))
    split = lambda x: np.asarray(x, np.float64).reshape(length, heads, d_head)
    qs, ks = split(first.attn.q(h)), split(first.attn.k(h))
    dots = np.einsum("ihd,jhd->hij", qs, ks) / math.sqrt(d_head)
    slopes = 2.0 ** (-8.0 * (np.arange(heads) + 1) / heads)
    distance = np.arange(length)[:, None] - np.arange(length)[None, :]
    bias = -slopes[:, None, None] * distance[None]
    got = np.asarray(with_temperature(model, t).attention_logits(tokens))
    np.testing.assert_allclose(got, t * (dots + bias), rtol=1e-5, atol=1e-5)
    assert np.abs(got - (t * dots + bias)).max() > 0.5  # the bias is scaled too


@pytest.mark.slow
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "alibi"])
def test_every_encoding_rows_as_trained_up_to_l_train_and_direct_beyond(kind):
    cfg = _small(kind)
    model, task = make_model(cfg, key=jax.random.PRNGKey(3)), task_from_config(cfg.task)
    rows = evaluate_model(model, task, cfg, step=0)
    as_trained = scalings_for(cfg)[0]
    _assert_rows_equal_up_to_l_train(rows, as_trained.method)
    length = 2 * L_TRAIN
    trained = model
    if cfg.model.supports_scaling:
        trained = with_scaling(model, as_trained.method, as_trained.factor, {}, seq_len=length)
    t = math.log(length) / math.log(L_TRAIN)
    direct = _direct_loss(with_temperature(trained, t), cfg, task, length)
    assert _whole(rows, TEMPERATURE)[length]["loss"] == pytest.approx(direct, rel=1e-5)


# --------------------------------------------------------------------- the stage on its own


def test_stage_of_a_finetuned_rope_trial_is_zero_shot_on_top_of_its_trained_scaling(
    tmp_path, monkeypatch
):
    """RoPE trained with dynamic x2 and fine-tuning on: the temperature stage fine-tunes
    nothing, its rows up to L_train are the as-trained (dynamic) rows, beyond them the dynamic
    model at that length with its logits times log L / log L_train; a rerun is cached."""
    cfg = _small("rope", scaling="dynamic", factor=2.0)
    cfg = validate(replace(cfg, **{"eval.finetune_steps": 2, "eval.methods": ("linear",)}))
    model, task = make_model(cfg, key=jax.random.PRNGKey(3)), task_from_config(cfg.task)
    folder = trial_dir(tmp_path, cfg.trial_id)
    save_model(folder / MODEL_FILE, model)

    def no_finetune(*args, **kwargs):
        raise AssertionError("the temperature stage is zero-shot only")

    monkeypatch.setattr(finetune, "train", no_finetune)
    name = scaling_stage_name(cfg, Scaling(TEMPERATURE, 1.0))
    result = run_stage(to_dict(cfg), str(tmp_path), name)
    assert result["status"] == "done", result
    assert (folder / "eval" / f"{name}.parquet").exists()
    rows = read_trial_table(folder, "eval").drop("trial_id").to_dicts()
    assert {(r["method"], r["factor"], r["finetune_steps"], r["step"]) for r in rows} == {
        (TEMPERATURE, 1.0, 0, cfg.train.steps)
    }
    base = evaluate_model(model, task, cfg, step=cfg.train.steps, scalings=scalings_for(cfg)[:1])
    assert base[0]["method"] == "dynamic"
    _assert_rows_equal_up_to_l_train(rows + base, "dynamic")
    length = 2 * L_TRAIN
    dynamic = with_scaling(model, "dynamic", 2.0, {}, seq_len=length)
    direct = _direct_loss(
        with_temperature(dynamic, math.log(length) / math.log(L_TRAIN)), cfg, task, length
    )
    assert _whole(rows, TEMPERATURE)[length]["loss"] == pytest.approx(direct, rel=1e-5)
    again = run_stage(to_dict(cfg), str(tmp_path), name)
    assert again["cached"] and read_trial_table(folder, "eval").height == len(rows)


# ---------------------------------------------------------------------------- a tiny sweep


@pytest.mark.slow
def test_tiny_sweep_writes_temperature_rows_resumes_and_plots(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from rope_lab.analysis import plots
    from rope_lab.results import is_finished, load
    from rope_lab.sweep.runner import run_sweep
    from rope_lab.sweep.spec import load_spec
    from rope_lab.sweep.stages import stage_dir
    from tests.sweep.conftest import write_spec

    spec = load_spec(
        write_spec(
            tmp_path,
            base__train={"length": 16, "batch_size": 8, "steps": 6, "warmup_steps": 2},
            base__eval={
                "length_multipliers": [1, 2],
                "batches": 1,
                "batch_size": 4,
                "position_buckets": 2,
                "zero_shot_temperature": True,
            },
            scaling={"methods": ["linear"], "factors": [2]},
        )
    )
    out = tmp_path / "runs"
    summary = run_sweep(spec, out, runner="serial", progress=False)
    assert summary.count("done") == 2
    for results in summary.stages.values():
        assert any(r["stage"].startswith("temperature_x1-") for r in results)
    run_dir = out / "tiny"
    ev = load(run_dir).eval_with_config.filter(pl.col("position_bucket").is_null()).collect()
    methods = {
        kind: set(zip(sub["method"], sub["factor"], strict=True))
        for (kind,), sub in ev.group_by("model.position.kind")
    }
    assert methods == {
        "rope": {("default", 1.0), ("linear", 2.0), (TEMPERATURE, 1.0)},
        "alibi": {("none", 1.0), (TEMPERATURE, 1.0)},
    }
    temp = ev.filter(pl.col("method") == TEMPERATURE)
    assert sorted(temp["length"]) == [16, 16, 32, 32]

    # a trial killed inside its temperature stage reruns that stage alone, in place
    alibi = next(t for t in spec.trials if t.model.position.kind == "alibi")
    folder = trial_dir(run_dir, alibi.trial_id)
    temperature = scaling_stage_name(alibi, Scaling(TEMPERATURE, 1.0))
    (stage_dir(run_dir, alibi.trial_id, temperature) / "done.json").unlink()
    (folder / "_SUCCESS").unlink()
    height = load(run_dir).eval.collect().height
    rerun = run_sweep(spec, out, runner="serial", progress=False)
    assert rerun.skipped == 1 and rerun.statuses[alibi.trial_id] == "done"
    stages = {r["stage"]: r.get("cached", False) for r in rerun.stages[alibi.trial_id]}
    as_trained = next(name for name in stages if name.startswith("eval-"))
    assert stages == {"train": True, as_trained: True, temperature: False}
    assert is_finished(folder) and load(run_dir).eval.collect().height == height

    fig = plots.extrapolation(run_dir, metric="loss")
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    entries = dict(zip(texts, legend.legend_handles, strict=True))
    assert list(entries)[-2:] == [f"alibi/{TEMPERATURE_LABEL}", f"rope/{TEMPERATURE_LABEL}"]
    for kind in ("alibi", "rope"):
        handle = entries[f"{kind}/{TEMPERATURE_LABEL}"]
        assert _dash(handle) == TEMPERATURE_DASH
        assert mcolors.to_hex(handle.get_color()) == POSITIONS[kind].color
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert sum(_dash(line) == TEMPERATURE_DASH for line in ax.lines) == 2


def _dash(line) -> tuple[float, ...] | None:
    """A line's on/off dash sequence as set (matplotlib has no public getter); None: solid."""
    _, seq = line._unscaled_dash_pattern
    return tuple(float(s) for s in seq) if seq else None


# ----------------------------------------------------------------- labels, colours, dashes

ROWS = [
    ("none", None, None, "none", 1.0),
    ("none", None, None, TEMPERATURE, 1.0),
    ("alibi", None, None, "none", 1.0),
    ("alibi", None, None, TEMPERATURE, 1.0),
    ("rope", "default", 1.0, "default", 1.0),
    ("rope", "default", 1.0, "yarn", 4.0),
    ("rope", "default", 1.0, TEMPERATURE, 1.0),
]


def _frame() -> pl.DataFrame:
    cols = [q.KIND, "model.position.rope.scaling", "model.position.rope.factor", "method", "factor"]
    schema = dict(zip(cols, [pl.String, pl.String, pl.Float64, pl.String, pl.Float64], strict=True))
    frame = pl.DataFrame(ROWS, schema=schema, orient="row")
    return frame.with_columns(pl.lit(0).alias("finetune_steps"))


def test_temperature_labels_name_the_kind_and_no_factor():
    labelled = with_labels(_frame())
    assert labelled["label"].to_list() == [
        "none",
        f"none/{TEMPERATURE_LABEL}",
        "alibi",
        f"alibi/{TEMPERATURE_LABEL}",
        "rope",
        "rope/yarn x4",
        f"rope/{TEMPERATURE_LABEL}",
    ]
    assert labelled.filter(pl.col("method") == TEMPERATURE)["label_method"].unique().to_list() == [
        TEMPERATURE
    ]
    bare = pl.DataFrame({"method": [TEMPERATURE, "yarn"], "factor": [1.0, 4.0]})
    assert bare.select(q.label_expr(bare.columns))["label"].to_list() == [
        TEMPERATURE_LABEL,
        "yarn x4",
    ]


def test_temperature_curves_order_colour_and_dash():
    frame = with_labels(_frame())
    order, palette = hue_mapping(frame, "label")
    assert order == [
        "none",
        "alibi",
        "rope",
        "rope/yarn x4",
        f"none/{TEMPERATURE_LABEL}",
        f"alibi/{TEMPERATURE_LABEL}",
        f"rope/{TEMPERATURE_LABEL}",
    ]
    hexes = {label: mcolors.to_hex(c) for label, c in palette.items()}
    for kind in ("none", "alibi", "rope"):
        assert hexes[f"{kind}/{TEMPERATURE_LABEL}"] == POSITIONS[kind].color
    dashes = dashed_labels(frame, "label")
    assert dashes == {
        f"none/{TEMPERATURE_LABEL}": TEMPERATURE_DASH,
        f"alibi/{TEMPERATURE_LABEL}": TEMPERATURE_DASH,
        "rope/yarn x4": SCALED_DASH,
        f"rope/{TEMPERATURE_LABEL}": TEMPERATURE_DASH,
    }
    assert TEMPERATURE_DASH not in ("", SCALED_DASH)
    assert sorted(order, key=label_key) == order  # bare label strings sort the same way


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_its_own_colour_for_the_temperature_and_ranks_after_rope_scalings(kind):
    curve = Curve(f"{kind}/{TEMPERATURE_LABEL}", kind, TEMPERATURE, 1.0)
    style = family_style(curve)
    assert style.shades == (POSITIONS[kind].color, POSITIONS[kind].color)
    scaled = {c for m in SCALINGS.names() if m != "default" for c in SCALINGS[m].colors}
    assert POSITIONS[kind].color not in scaled
    kinds = POSITIONS.names()
    assert style.rank == len(kinds) + len(SCALINGS.names()) + kinds.index(kind)
    assert sort_key(curve) > sort_key(Curve("rope/proportional x8", "rope", "proportional", 8.0))
