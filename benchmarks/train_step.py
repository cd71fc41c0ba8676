"""Training-step throughput: rope_lab (JAX/Equinox) against Hugging Face Llama (PyTorch), on CPU.

Both sides train the same architecture: vocabulary V, width D, depth 4, heads of dimension 32,
SwiGLU MLP of size 4 D, RMSNorm (eps 1e-5), RoPE (theta 1e4), untied embeddings, no biases,
float32, a batch of 16 sequences of 256 tokens. One timed step is forward, backward, global-norm
gradient clipping and the AdamW update, on a batch that already sits in memory:

- rope_lab: `rope_lab.trial.train.make_train_step` (the step `train()` runs: jitted, buffers
  donated, optimizer from `rope_lab.trial.optimizer.make_optimizer`), given a task whose
  "sampler" returns a fixed batch, so no data sampling is timed (torch does not sample
  either); timed to `block_until_ready`.
- torch: `LlamaForCausalLM(...).logits`, cross-entropy against the same targets,
  `loss.backward()`, `clip_grad_norm_`, `AdamW.step()`, `zero_grad()`; eager mode, SDPA
  attention, `torch.set_num_threads(os.cpu_count())`.

The two are timed interleaved (one step each, in turn) and medians reported. Model FLOPs per
token are 6 N + 12 depth L D (N: all parameters except the input embedding table, the readout
included; the attention term counts QK^T and AV at full L x L for forward and backward), and
MFU divides model FLOP/s by a float32 JAX matmul peak measured in the same run (interleaved with
the steps of each width, so both see the same machine load).

Run: `python -m benchmarks.train_step [--widths 128 256 512] [--repeats N] [--quick]
[--depth 4] [--length 256] [--batch 16] [--dtype float32|bfloat16]` (on a CUDA machine both
sides use the GPU; `benchmarks/gpu.sh` is the one-command GPU run)
(needs the `bench` extra: `pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import (
    interleaved,
    markdown_table,
    matmul_peak_flops,
    median,
    record,
)
from rope_lab.config import ModelConfig, PositionConfig, TrainConfig, TrialConfig
from rope_lab.model.transformer import Transformer, count_params, trainable
from rope_lab.runtime.allocator import reexec_tuned
from rope_lab.tasks import Batch, Operands, Task
from rope_lab.trial.optimizer import make_optimizer
from rope_lab.trial.train import TraceGuard, make_train_step

DEPTH = 4
HEAD_DIM = 32
MLP_RATIO = 4
LENGTH = 256
BATCH = 16
RMS_EPS = 1e-5  # rope_lab's Norm.eps
MATMUL_N = 2048  # matmul size of the FLOP/s peak
THETA = 10000.0


@dataclass(frozen=True)
class Shape:
    """Dimensions shared by both frameworks."""

    vocab: int
    width: int
    depth: int = DEPTH
    head_dim: int = HEAD_DIM
    length: int = LENGTH
    batch: int = BATCH
    dtype: str = "float32"  # compute dtype; parameters stay float32 on both sides
    attention: str = "auto"  # rope_lab's `model.attention`

    @property
    def heads(self) -> int:
        """Number of attention heads."""
        return self.width // self.head_dim

    @property
    def d_mlp(self) -> int:
        """SwiGLU hidden size."""
        return MLP_RATIO * self.width

    @property
    def tokens(self) -> int:
        """Tokens per training step (batch x length)."""
        return self.batch * self.length


def model_flops_per_token(shape: Shape, non_embedding_params: int) -> float:
    """Training FLOPs per token: 6 N + 12 depth L D (forward and backward)."""
    return 6.0 * non_embedding_params + 12.0 * shape.depth * shape.length * shape.width


def make_batch(shape: Shape, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random tokens and next-token targets, both (B, L) int32, from one (B, L+1) draw."""
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, shape.vocab, (shape.batch, shape.length + 1), dtype=np.int32)
    return seq[:, :-1], seq[:, 1:]


@dataclass(frozen=True)
class FixedBatchTask(Task):
    """A task whose sampler returns its operands (tokens, targets, mask), each (B, L), unchanged."""

    name = "fixed_batch"

    def _check_params(self) -> None:
        pass

    def min_vocab_size(self) -> int:
        """Any vocabulary."""
        return 1

    def min_length(self) -> int:
        """Any length."""
        return 1

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        tokens, targets, mask = operands
        assert tokens.shape == (batch_size, length)
        return Batch(tokens, targets, mask)


def rope_lab_trial(shape: Shape) -> TrialConfig:
    """The rope_lab trial config with the benchmark's shape (RMSNorm, SwiGLU, RoPE, sp)."""
    model = ModelConfig(
        width=shape.width,
        depth=shape.depth,
        head_dim=shape.head_dim,
        mlp_ratio=float(MLP_RATIO),
        norm="rmsnorm",
        mlp="swiglu",
        position=PositionConfig(kind="rope"),
        dtype=shape.dtype,
        attention=shape.attention,
    )
    train = TrainConfig(length=shape.length, batch_size=shape.batch, steps=1000, warmup_steps=10)
    return TrialConfig(name="bench", model=model, train=train)


@dataclass
class Side:
    """One framework's timed step: `run()` does one step and returns its wall seconds."""

    run: Callable[[], float]
    params: int
    non_embedding_params: int
    loss: Callable[[], float]


def rope_lab_side(shape: Shape, tokens: np.ndarray, targets: np.ndarray) -> Side:
    """rope_lab's jitted train step on tokens and targets (B, L); `run` times one step."""
    cfg = rope_lab_trial(shape)
    model = Transformer(
        cfg.model,
        shape.vocab,
        train_length=shape.length,
        max_length=shape.length,
        key=jax.random.PRNGKey(0),
    )
    task = FixedBatchTask(shape.vocab)
    optimizer = make_optimizer(cfg.train, model)
    params, static = eqx.partition(model, trainable(model))
    state: dict[str, Any] = {"params": params, "opt": optimizer.init(params), "metrics": None}
    operands = (jnp.asarray(tokens), jnp.asarray(targets), jnp.ones(tokens.shape, bool))
    key = jax.random.PRNGKey(1)
    step = make_train_step(cfg, task, optimizer, length=shape.length, guard=TraceGuard("bench"))

    def run() -> float:
        start = time.perf_counter()
        params, opt, metrics = step(static, state["params"], state["opt"], key, operands)
        jax.block_until_ready((params, opt, metrics))
        elapsed = time.perf_counter() - start
        state.update(params=params, opt=opt, metrics=metrics)
        return elapsed

    total = count_params(model)
    return Side(
        run=run,
        params=total,
        non_embedding_params=total - model.embedding.size,
        loss=lambda: float(state["metrics"]["loss"]),
    )


def torch_side(shape: Shape, tokens: np.ndarray, targets: np.ndarray) -> Side:
    """HF LlamaForCausalLM + AdamW on tokens and targets (B, L); `run` times one eager step."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.width,
        intermediate_size=shape.d_mlp,
        num_hidden_layers=shape.depth,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        head_dim=shape.head_dim,
        hidden_act="silu",
        max_position_embeddings=shape.length,
        rms_norm_eps=RMS_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": THETA},
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.float32).train()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=shape.dtype != "float32")
    tc = rope_lab_trial(shape).train
    # As rope_lab.trial.optimizer.decay_mask: decay Linear weights (readout included), not
    # embeddings/norms.
    decay = [p for n, p in model.named_parameters() if p.ndim == 2 and "embed_tokens" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and "embed_tokens" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=tc.lr,
        betas=(tc.b1, tc.b2),
        eps=tc.eps,
    )
    x = torch.from_numpy(tokens.astype(np.int64)).to(device)
    y = torch.from_numpy(targets.astype(np.int64)).reshape(-1).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    last = {"loss": float("nan")}

    def run() -> float:
        start = time.perf_counter()
        with autocast:  # bf16 compute on float32 parameters, as rope_lab's model.dtype
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, shape.vocab), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        elapsed = time.perf_counter() - start
        last["loss"] = float(loss.detach())
        return elapsed

    total = sum(p.numel() for p in model.parameters())
    embedding = model.model.embed_tokens.weight.numel()
    return Side(
        run=run, params=total, non_embedding_params=total - embedding, loss=lambda: last["loss"]
    )


def matmul_timers(n: int = 2048, dtype: str = "float32") -> dict[str, Callable[[], float]]:
    """Seconds of one (n, n) @ (n, n) matmul in `dtype` in JAX and in torch, as timing callables.

    Interleaved with the training steps, so the peak they give sees the same machine load.
    """
    import torch

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ta = torch.from_numpy(np.asarray(a)).to(device=device, dtype=getattr(torch, dtype))
    tb = torch.from_numpy(np.asarray(b)).to(device=device, dtype=getattr(torch, dtype))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a, b = a.astype(dtype), b.astype(dtype)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()

    def jax_matmul() -> float:
        start = time.perf_counter()
        f(a, b).block_until_ready()
        return time.perf_counter() - start

    def torch_matmul() -> float:
        start = time.perf_counter()
        ta @ tb
        sync()
        return time.perf_counter() - start

    return {"jax matmul": jax_matmul, "torch matmul": torch_matmul}


def with_cpu_time(run: Callable[[], float], cpu: list[float]) -> Callable[[], float]:
    """`run`, also appending the process CPU seconds (all threads) of each call to `cpu`."""

    def timed() -> float:
        start = time.process_time()
        wall = run()
        cpu.append(time.process_time() - start)
        return wall

    return timed


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, measure every width interleaved, print and record the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per side and width")
    parser.add_argument("--vocab", type=int, default=256, help="vocabulary (256: byte-level)")
    parser.add_argument("--quick", action="store_true", help="width 128, 3 repeats, no record")
    parser.add_argument("--no-record", action="store_true", help="print, don't append RESULTS.md")
    parser.add_argument("--note", default="", help="extra text for the notes under the table")
    parser.add_argument("--depth", type=int, default=DEPTH)
    parser.add_argument("--length", type=int, default=LENGTH)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="compute dtype"
    )
    parser.add_argument("--attention", default="auto", help="rope_lab's model.attention")
    args = parser.parse_args(argv)
    if argv is None:  # as `rope-lab` runs: both sides share this process and its allocator
        reexec_tuned()
    if args.quick:
        args.widths, args.repeats = [128], 3

    import torch

    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    peak = matmul_peak_flops(MATMUL_N)
    print(f"matmul peak (float32 2048^3, JAX): {peak / 1e9:.1f} GFLOP/s; torch threads {threads}")

    rows, slower = [], []
    for width in args.widths:
        shape = Shape(
            args.vocab,
            width,
            args.depth,
            HEAD_DIM,
            args.length,
            args.batch,
            args.dtype,
            args.attention,
        )
        tokens, targets = make_batch(shape)
        sides = {"rope_lab": rope_lab_side(shape, tokens, targets)}
        sides["torch"] = torch_side(shape, tokens, targets)
        counts = {name: (s.params, s.non_embedding_params) for name, s in sides.items()}
        print(f"width {width}: parameters (total, non-embedding) {counts}")
        if counts["rope_lab"] != counts["torch"]:
            raise SystemExit(f"parameter counts differ at width {width}: {counts}")
        first = {name: s.run() for name, s in sides.items()}  # compilation / warm-up
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        runs = {name: with_cpu_time(s.run, cpu[name]) for name, s in sides.items()}
        runs.update(matmul_timers(MATMUL_N, args.dtype))
        times = interleaved(runs, repeats=args.repeats, warmup=1)
        med = {name: median(ts) for name, ts in times.items()}
        med_cpu = {name: median(c[1:]) for name, c in cpu.items()}  # c[0]: the warm-up round
        per_token = model_flops_per_token(shape, sides["rope_lab"].non_embedding_params)
        tps = {name: shape.tokens / med[name] for name in sides}
        peaks = {name: 2 * MATMUL_N**3 / med[f"{name} matmul"] for name in ("jax", "torch")}
        mfu = {name: per_token * tps[name] / peaks["jax"] for name in sides}
        losses = {name: s.loss() for name, s in sides.items()}
        spread = {n: (round(min(ts), 3), round(max(ts), 3)) for n, ts in times.items()}
        print(
            f"width {width}: median s/step {med}, CPU s/step {med_cpu}, first step s {first}, "
            f"min/max s {spread}, final loss {losses}"
        )
        ratio = tps["rope_lab"] / tps["torch"]
        if ratio < 1:
            slower.append(width)
        rows.append(
            [
                width,
                sides["rope_lab"].params,
                per_token * shape.tokens / 1e9,
                tps["rope_lab"],
                tps["torch"],
                ratio,
                f"{100 * mfu['rope_lab']:.1f}%",
                f"{100 * mfu['torch']:.1f}%",
                peaks["jax"] / 1e9,
                peaks["torch"] / 1e9,
                med_cpu["rope_lab"],
                med_cpu["torch"],
                first["rope_lab"],
            ]
        )

    header = [
        "width",
        "params",
        "GFLOP/step",
        "rope_lab tok/s",
        "torch tok/s",
        "ratio rope_lab/torch",
        "rope_lab MFU",
        "torch MFU",
        "JAX matmul GFLOP/s",
        "torch matmul GFLOP/s",
        "rope_lab CPU s/step",
        "torch CPU s/step",
        "rope_lab compile s",
    ]
    table = markdown_table(header, rows)
    notes = (
        f"Train step (forward, backward, clip, AdamW) of the same Llama-style model: vocab "
        f"{args.vocab}, head_dim {HEAD_DIM}, SwiGLU {MLP_RATIO}D, RMSNorm, RoPE, "
        f"untied, no biases, {args.dtype} compute on float32 parameters, rope_lab attention "
        f"{args.attention}, depth {args.depth}, "
        f"batch {args.batch} x length {args.length} = {args.batch * args.length} "
        f"tokens/step; equal parameter counts checked. rope_lab: `make_train_step` on a fixed "
        f"in-memory batch (no sampling timed). torch: HF transformers `LlamaForCausalLM` (SDPA "
        f"attention, eager), torch.optim.AdamW, clip_grad_norm_, torch.set_num_threads({threads}) "
        f"(= cores); JAX uses all cores by default. tok/s from the median of {args.repeats} "
        f"interleaved steps per side; CPU s/step: median process CPU time per step (all threads, "
        f"spin-waits included). Model FLOPs/token = 6 N + 12 depth L D (N = parameters minus the "
        f"input embedding table). MFU (both sides) is against the JAX {MATMUL_N}^3 matmul "
        f"peak (`matmul_peak_flops`: {peak / 1e9:.1f} GFLOP/s at the start), re-timed per width "
        f"interleaved with the steps (column); torch's own matmul rate is shown beside it. Compile "
        f"s: first rope_lab step. Process allocator (both sides): "
        f"`GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')}` (see "
        f"rope_lab/runtime/allocator.py)."
    )
    if slower:
        notes += f" rope_lab slower than torch at width(s) {slower}."
    if args.note:
        notes += f"\n\n{args.note}"
    if args.quick or args.no_record:
        print(table)
        print(notes)
        return
    record(
        f"Train step: rope_lab vs HF Llama (torch), {jax.default_backend()}, {args.dtype}",
        table,
        notes=notes,
        packages=("torch", "transformers"),
    )


if __name__ == "__main__":
    main()
