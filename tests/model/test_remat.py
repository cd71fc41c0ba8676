"""Rematerialisation (`train.remat`, `transformer.with_remat`): the same loss and gradients as
keeping every activation, less memory kept for the backward, refused where it does not apply."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax._src.core import jaxprs_in_params

from rope_lab.config import ConfigError, TrialConfig, replace, validate
from rope_lab.model.transformer import trainable, with_remat
from rope_lab.tasks import Batch, task_from_config
from rope_lab.trial.objective import masked_loss
from rope_lab.trial.train import make_model
from tests.helpers import tiny_trial

# float32 rounding of a recomputed forward: |g - g_none| <= ATOL + RTOL |g_none| per entry
ATOL, RTOL = 1e-6, 1e-5


def loss_and_grads(cfg: TrialConfig, policy: str, batch_size: int = 4):
    """The jitted masked loss of a fixed batch and its gradient in the trainable parameters,
    the model under rematerialisation `policy`."""
    model, task = make_model(cfg), task_from_config(cfg.task)
    length = cfg.train.length
    batch = task.sample_from(task.operands(), batch_size, length, key=jax.random.PRNGKey(3))
    positions = jnp.broadcast_to(jnp.arange(length), (batch_size, length))
    params, static = eqx.partition(model, trainable(model))

    def loss(p):
        return masked_loss(with_remat(eqx.combine(p, static), policy), batch, positions)

    return jax.jit(jax.value_and_grad(loss))(params)


def trial(attention: str, depth: int = 2) -> TrialConfig:
    return replace(tiny_trial(depth=depth), **{"model.attention": attention})


@pytest.fixture(scope="module")
def keep_everything():
    return {att: loss_and_grads(trial(att), "none") for att in ("reference", "blocked")}


def assert_same(got, want):
    (loss, grads), (loss_none, grads_none) = got, want
    assert jnp.allclose(loss, loss_none, rtol=RTOL, atol=ATOL)
    leaves, leaves_none = jax.tree.leaves(grads), jax.tree.leaves(grads_none)
    assert len(leaves) == len(leaves_none)
    for g, g_none in zip(leaves, leaves_none, strict=True):
        assert jnp.allclose(g, g_none, rtol=RTOL, atol=ATOL), float(jnp.abs(g - g_none).max())


@pytest.mark.parametrize("policy", ["block", "dots"])
@pytest.mark.parametrize("attention", ["reference", "blocked"])
def test_policy_gives_the_loss_and_gradients_of_none(keep_everything, attention, policy):
    assert_same(loss_and_grads(trial(attention), policy), keep_everything[attention])


def test_attention_policy_gives_the_loss_and_gradients_of_none(keep_everything):
    assert_same(loss_and_grads(trial("blocked"), "attention"), keep_everything["blocked"])


@pytest.mark.slow
@pytest.mark.parametrize("attention_fn", ["fox", "sinks"])
def test_attention_policy_with_a_forget_gate_or_a_prior_logit(attention_fn):
    """FoX's decay and a sink's prior logit run in the same softmax kernel, whose residuals
    stay its output and log-sum-exp: the numbers of `none` too."""
    cfg = replace(trial("blocked"), **{"model.attention_fn": attention_fn})
    assert_same(loss_and_grads(cfg, "attention"), loss_and_grads(cfg, "none"))


def kernel_forwards(policy: str) -> int:
    """How many times the blocked kernel's forward (`flash._forward`: a scan over query blocks
    with no carry, each running a while loop over key blocks; the backward's scan carries the
    key gradients) runs in the jaxpr of the loss's gradient of a 2-block model under `policy`
    (under a policy the stack runs as a scan, so each run there stands for one per block)."""
    cfg = trial("blocked")
    model, task = make_model(cfg), task_from_config(cfg.task)
    length = cfg.train.length
    batch = task.sample_from(task.operands(), 2, length, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(model, trainable(model))

    def loss(p):
        return masked_loss(with_remat(eqx.combine(p, static), policy), batch, None)

    def count(jaxpr) -> int:
        found = 0
        for eqn in jaxpr.eqns:
            found += (
                eqn.primitive.name == "scan"
                and eqn.params["num_carry"] == 0
                and any(e.primitive.name == "while" for e in eqn.params["jaxpr"].jaxpr.eqns)
            )
            found += sum(count(sub) for sub in jaxprs_in_params(eqn.params))
        return found

    return count(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)


def test_attention_policy_never_reruns_the_attention_forward():
    """`block` recomputes the whole block in the backward, the kernel's O(L^2) forward with
    it: two forwards in the scanned block; `attention` keeps the kernel's output and
    log-sum-exp, so its backward recomputes only the projections and MLP: one forward, as
    many as keeping everything runs per block (`none`: two unrolled blocks, two forwards)."""
    assert {p: kernel_forwards(p) for p in ("none", "block", "attention")} == {
        "none": 2,
        "block": 2,
        "attention": 1,
    }


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["reference", "blocked"])
def test_block_policy_under_the_scanned_stack(attention):
    """Past MAX_UNROLL blocks the stack runs under `lax.scan`: checkpointing inside its body
    gives the same numbers too."""
    cfg = trial(attention, depth=9)
    assert_same(loss_and_grads(cfg, "block"), loss_and_grads(cfg, "none"))


def test_block_policy_keeps_less_for_the_backward():
    """XLA's temporary bytes of the compiled loss-and-gradient of a 3-block model: checkpointing
    each block keeps its input only, so the estimate drops below half of keeping every
    activation (0.4x measured)."""
    cfg = replace(tiny_trial(depth=3, length=128), **{"model.attention": "reference"})
    model = make_model(cfg)
    params, static = eqx.partition(model, trainable(model))
    tokens = jnp.zeros((2, 128), jnp.int32)
    batch = Batch(tokens, tokens, jnp.ones(tokens.shape, bool))
    positions = jnp.broadcast_to(jnp.arange(128), tokens.shape)

    def temp_bytes(policy: str) -> int:
        def loss(p):
            return masked_loss(with_remat(eqx.combine(p, static), policy), batch, positions)

        compiled = jax.jit(jax.grad(loss)).lower(params).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    block, none = temp_bytes("block"), temp_bytes("none")
    assert block < 0.5 * none, (block, none)


def test_attention_policy_refused_where_the_blocked_softmax_kernel_does_not_run():
    """The policy names the blocked softmax kernel's residuals: the reference path, `auto`
    (which may pick another path) and a normaliser's own kernel (stick-breaking keeps no
    output or log-sum-exp) are refused, naming the key."""
    base = replace(tiny_trial(), **{"train.remat": "attention"})
    for attention in ("auto", "reference", "cudnn"):
        with pytest.raises(
            ConfigError,
            match=rf"^train\.remat: 'attention' keeps the blocked kernel's output and "
            rf"log-sum-exp; it needs model\.attention=blocked, not '{attention}'$",
        ):
            validate(replace(base, **{"model.attention": attention}))
    sticks = replace(base, **{"model.attention": "blocked", "model.attention_fn": "stick_breaking"})
    with pytest.raises(
        ConfigError,
        match=r"^train\.remat: 'attention' keeps the softmax kernel's output and log-sum-exp; "
        r"model\.attention_fn='stick_breaking' runs its own kernel \(use block or dots\)$",
    ):
        validate(sticks)
    validate(replace(base, **{"model.attention": "blocked", "model.attention_fn": "fox"}))


def test_unknown_policy_is_one_line_naming_the_key():
    allowed = "allowed: none, block, dots, attention"
    with pytest.raises(ConfigError, match=rf"^train\.remat: unknown 'all'; {allowed}$"):
        validate(replace(tiny_trial(), **{"train.remat": "all"}))


def test_remat_needs_a_rich_transformer():
    with pytest.raises(ConfigError, match=r"^train\.remat: 'block' needs train\.regime=rich"):
        validate(replace(tiny_trial(), **{"train.remat": "block", "train.regime": "lazy"}))
    validate(replace(tiny_trial(), **{"train.remat": "dots"}))


def test_remat_leaves_the_trial_id():
    base = validate(tiny_trial())
    for policy in ("block", "dots"):
        assert validate(replace(base, **{"train.remat": policy})).trial_id == base.trial_id
    blocked = validate(replace(base, **{"model.attention": "blocked"}))
    attention = replace(blocked, **{"train.remat": "attention"})
    assert validate(attention).trial_id == blocked.trial_id


def test_with_remat_refuses_an_unknown_policy_and_leaves_the_model():
    model = make_model(tiny_trial())
    assert with_remat(model, "block").remat == "block" and model.remat == "none"
    with pytest.raises(ValueError, match="unknown rematerialisation policy 'x'"):
        with_remat(model, "x")


def test_train_step_runs_its_forward_under_train_remat():
    """The train step checkpoints the blocks under `train.remat`: one `remat` in the scanned
    stack's body, none without (the numbers are those of `loss_and_grads`, tested above)."""
    from rope_lab.trial.optimizer import make_optimizer
    from rope_lab.trial.train import init_state, train_step_body

    def remats(policy: str) -> int:
        cfg = replace(tiny_trial(depth=2), **{"train.remat": policy})
        task = task_from_config(cfg.task)
        model, opt_state = init_state(cfg)
        params, static = eqx.partition(model, trainable(model))
        body = train_step_body(cfg, task, make_optimizer(cfg.train, model), length=cfg.train.length)
        args = (params, opt_state, jax.random.PRNGKey(0), task.operands())
        return str(jax.make_jaxpr(lambda *a: body(static, *a))(*args)).count("remat")

    assert (remats("none"), remats("block"), remats("dots")) == (0, 1, 1)


def test_remat_refused_for_a_network_without_blocks():
    cnn = replace(tiny_trial(), **{"model.family": "cnn", "train.remat": "block"})
    with pytest.raises(ConfigError, match=r"^train\.remat: 'block' rematerialises Transformer"):
        validate(cnn)
