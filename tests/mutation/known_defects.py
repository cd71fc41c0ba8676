"""Wrong-science edits that the default suite must catch.

Each defect is one textual edit of a rope_lab module that changes a number in a results table
(or loses work) while the code still runs. For each, this script copies the checkout to a
scratch folder, applies the edit there, runs the named default-suite tests against the copy and
reports whether they failed (the defect is "killed") or passed ("survived"). The checkout itself
is never modified.

    .venv/bin/python tests/mutation/known_defects.py            # every defect
    .venv/bin/python tests/mutation/known_defects.py alibi-sign # some, by name

Exit status 1 when a defect survives. Takes a few minutes (one pytest process per defect).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Defect:
    """An edit `old` -> `new` of `path` (old must occur exactly once) and the tests that must
    fail on it (pytest node ids or files, relative to the repository root)."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


DEFECTS = (
    Defect(
        "alibi-sign",
        "rope_lab/model/positions/modules/alibi.py",
        "return -self.slopes.get()[:, None, None] * distance[None]",
        "return self.slopes.get()[:, None, None] * distance[None]",
        ("tests/model/positions/test_position_laws.py",),
    ),
    Defect(
        "rope-factor-queries-only",
        "rope_lab/model/positions/modules/rotary.py",
        "rotation.apply_rotary(k, positions, inv_freq, factor),",
        "rotation.apply_rotary(k, positions, inv_freq, 1.0),",
        ("tests/model/positions/test_position_laws.py",),
    ),
    Defect(
        "kerple-log-bias-sign",
        "rope_lab/model/positions/modules/kerple.py",
        "return -r1 * jnp.log1p(r2 * distance[None])",
        "return r1 * jnp.log1p(r2 * distance[None])",
        ("tests/model/positions/test_kerple.py",),
    ),
    Defect(
        "proportional-not-divided-by-factor",
        "rope_lab/model/scalings/proportional.py",
        "return _output(inv / float(factor))",
        "return _output(inv)",
        ("tests/model/test_rope.py", "tests/model/scalings/test_proportional.py"),
    ),
    Defect(
        "finetuned-rows-evaluate-untuned-model",
        "rope_lab/trial/finetune.py",
        "tuned.model, task, cfg, step=step, scalings=[scaling], finetune_steps=ev.finetune_steps",
        "model, task, cfg, step=step, scalings=[scaling], finetune_steps=ev.finetune_steps",
        ("tests/trial/test_evaluate.py",),
    ),
    Defect(
        "scaled-kcross-at-training-length",
        "rope_lab/ntk/tracking.py",
        "scaled = with_scaling(model, s.method, s.factor, params, seq_len=length)",
        "scaled = with_scaling(model, s.method, s.factor, params, seq_len=L)",
        ("tests/ntk/test_columns.py",),
    ),
    Defect(
        "tail-cos-whole-sequence-norm",
        "rope_lab/ntk/kernels.py",
        '"tail_cos": cosine(tail, sq[:, 1], short_sq),',
        '"tail_cos": cosine(tail, sq[:, 0], short_sq),',
        ("tests/ntk/test_columns.py",),
    ),
    Defect(
        "offdiag-mean-counts-diagonal",
        "rope_lab/ntk/metrics.py",
        "return float((K.sum() - np.trace(K)) / (n * (n - 1))) if n > 1 else math.nan",
        "return float(K.sum() / (n * n)) if n > 1 else math.nan",
        ("tests/ntk/test_columns.py", "tests/ntk/test_metrics.py"),
    ),
    Defect(
        "cosine-schedule-wrong-decay-steps",
        "rope_lab/trial/optimizer.py",
        "decay_steps=max(cfg.steps, warmup + 1),",
        "decay_steps=max(cfg.steps + 10, warmup + 1),",
        ("tests/trial/test_train.py",),
    ),
    Defect(
        "extrapolation-plots-another-metric",
        "rope_lab/analysis/plots/eval_curves.py",
        "draw_extrapolation(ax, sub, metric=m, x=x,",
        'draw_extrapolation(ax, sub, metric="accuracy", x=x,',
        ("tests/analysis/plots/test_plotted_data.py",),
    ),
    Defect(
        "atomic-writer-fixed-temp-name",
        "rope_lab/runtime/atomic.py",
        'tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")\n    try:',
        'tmp = path.with_name(f".{path.name}.tmp")\n    try:',
        ("tests/runtime/test_atomic.py",),
    ),
    Defect(
        "flash-no-rescale",
        "rope_lab/model/flash.py",
        "correction = jnp.exp(m - m_new)",
        "correction = jnp.ones_like(m_new)",
        ("tests/model/test_attention.py::test_blocked_and_reference_equal_the_masked_softmax",),
    ),
    Defect(
        "flash-backward-without-delta",
        "rope_lab/model/flash.py",
        "ds = p * (dp - delta[i][..., None])",
        "ds = p * dp",
        ("tests/model/test_attention.py::test_blocked_gradients_equal_autodiff_of_the_reference",),
    ),
    Defect(
        "window-skips-a-visible-block",
        "rope_lab/model/flash.py",
        "(i * self.block - self.window + 1) // self.block",
        "(i * self.block - self.window + 1) // self.block + 1",
        ("tests/model/test_attention.py::test_blocked_and_reference_equal_the_masked_softmax",),
    ),
    Defect(
        "kerple-power-sign",
        "rope_lab/model/positions/modules/kerple.py",
        "return -r1 * power",
        "return r1 * power",
        ("tests/model/positions/test_kerple.py",),
    ),
    Defect(
        "fire-normalise-by-min",
        "rope_lab/model/positions/modules/fire.py",
        "normaliser = jnp.log1p(c * jnp.maximum(threshold, q))",
        "normaliser = jnp.log1p(c * jnp.minimum(threshold, q))",
        ("tests/model/positions/test_fire.py",),
    ),
    Defect(
        "t5-exact-buckets-off-by-one",
        "rope_lab/model/positions/t5.py",
        "m, span = num_buckets // 2, num_buckets - num_buckets // 2",
        "m, span = num_buckets // 2 + 1, num_buckets - num_buckets // 2 - 1",
        ("tests/model/positions/test_t5.py",),
    ),
    Defect(
        "text-evaluated-on-training-split",
        "rope_lab/trial/evaluate.py",
        'operands = task.operands("eval")',
        "operands = task.operands()",
        ("tests/tasks/test_text_lm.py",),
    ),
    Defect(
        "text-corpus-cached-under-trace",
        "rope_lab/tasks/sampling/__init__.py",
        "        with jax.ensure_compile_time_eval():\n"
        "            _DEVICE[key] = jax.device_put(host())",
        "        _DEVICE[key] = jax.device_put(host())",
        ("tests/tasks/test_text_lm.py::test_operands_made_inside_a_trace_are_concrete",),
    ),
    Defect(
        "cope-counts-from-the-first-key",
        "rope_lab/model/positions/modules/cope.py",
        "jax.lax.cumsum(gates, axis=2, reverse=True)",
        "jax.lax.cumsum(gates, axis=2)",
        ("tests/model/positions/test_cope.py",),
    ),
    Defect(
        "row-scale-left-out-of-the-logit-gradient",
        "rope_lab/model/flash.py",
        "        ds = ds * ri[..., None]\n",
        "",
        (
            "tests/model/test_attention.py::test_row_scale_gradients_of_the_blocked_kernel_equal_autodiff",
        ),
    ),
    Defect(
        "layer-window-ignored",
        "rope_lab/model/attention_layer.py",
        "            window=layer.window,\n",
        "",
        (
            "tests/model/test_transformer_layers.py::test_sliding_windows_give_a_receptive_field_of_depth_times_window",
        ),
    ),
    Defect(
        "scalable-softmax-counts-one-key-too-many",
        "rope_lab/model/attention_layer.py",
        "jnp.log(n)[None, :]",
        "jnp.log(n + 1)[None, :]",
        (
            "tests/model/test_transformer_layers.py::test_scalable_softmax_multiplies_logits_by_s_log_n",
        ),
    ),
    Defect(
        "claims-interval-touching-the-threshold-holds",
        "rope_lab/analysis/claims/base.py",
        'return "holds" if low > threshold else',
        'return "holds" if low >= threshold else',
        ("tests/analysis/claims/test_base.py",),
    ),
    Defect(
        "claims-rise-counts-the-bucket-at-l-train-as-inside",
        "rope_lab/analysis/claims/measures.py",
        'pl.col("position_bucket") >= pl.col("train.length")',
        'pl.col("position_bucket") > pl.col("train.length")',
        ("tests/analysis/claims/test_encodings.py",),
    ),
    Defect(
        "claims-rise-against-the-wrong-sign",
        "rope_lab/analysis/claims/measures.py",
        '(pl.col("value") - pl.col("base")).alias("value")',
        '(pl.col("base") - pl.col("value")).alias("value")',
        ("tests/analysis/claims/test_encodings.py",),
    ),
    Defect(
        "sliding-windows-score-a-byte-twice",
        "rope_lab/tasks/windows.py",
        "mask[1:, : length - step] = False",
        "mask[1:, : length - step - 1] = False",
        ("tests/tasks/test_text_lm.py::test_text_windows_read_each_byte_once",),
    ),
    Defect(
        "finetune-every-scaling-despite-the-choice",
        "rope_lab/trial/scaling_plan.py",
        "and (not ev.finetune_methods or scaling.method in ev.finetune_methods)",
        "",
        ("tests/trial/test_evaluate.py::test_finetune_only_the_chosen_methods_and_factors",),
    ),
    Defect(
        "lazy-twin-without-its-initial-output",
        "rope_lab/model/lazy.py",
        "    return out + tangent",
        "    return tangent",
        ("tests/model/test_lazy.py::test_lazy_model_is_the_taylor_expansion_around_init",),
    ),
    Defect(
        "nngp-divided-by-k",
        "rope_lab/ntk/nngp.py",
        "reshape(n, rows, -1) / math.sqrt(samples)",
        "reshape(n, rows, -1) / samples",
        ("tests/ntk/test_columns.py",),
    ),
    Defect(
        "cnn-padded-on-the-right",
        "rope_lab/model/cnn.py",
        "[(pad, 0), (0, 0)]",
        "[(0, pad), (0, 0)]",
        ("tests/model/test_cnn.py",),
    ),
    Defect(
        "tail-movement-without-region-sizes",
        "rope_lab/ntk/predictions.py",
        "    return float(np.mean(np.abs(_f64(tail)))) / n_tail / den",
        "    return float(np.mean(np.abs(_f64(tail)))) / den",
        ("tests/ntk/test_columns.py", "tests/ntk/test_predictions.py"),
    ),
    Defect(
        "gqa-heads-tiled-not-repeated",
        "rope_lab/model/attention.py",
        "    return x if groups == 1 else jnp.repeat(x, groups, axis=-3)",
        "    return x if groups == 1 else jnp.concatenate([x] * groups, axis=-3)",
        ("tests/model/test_pretrained_arch.py",),
    ),
    Defect(
        "phi3-gate-and-up-swapped",
        "rope_lab/hf/weights.py",
        '        gate, up = np.split(tensors.pop(pre + "mlp.gate_up_proj.weight"), 2)',
        '        up, gate = np.split(tensors.pop(pre + "mlp.gate_up_proj.weight"), 2)',
        ("tests/hf/test_from_hf.py",),
    ),
    Defect(
        "hf-norm-epsilon-ignored",
        "rope_lab/hf/config.py",
        '        norm_eps=f.number("rms_norm_eps", 1e-6, positive=True),',
        "        norm_eps=1e-5,",
        ("tests/hf/test_from_hf.py",),
    ),
    Defect(
        "needle-depth-over-the-whole-haystack",
        "rope_lab/tasks/niah.py",
        "        return round(depth * (self.haystack_length(length) - self.block_length))",
        "        return round(depth * self.haystack_length(length))",
        ("tests/tasks/test_niah.py::test_the_asked_needles_sit_at_the_requested_depth",),
    ),
    Defect(
        "multi-value-answer-in-reverse-order",
        "rope_lab/tasks/sampling/niah.py",
        "    earlier = jnp.tril(jnp.ones((n_target, n_target), bool), -1)",
        "    earlier = jnp.triu(jnp.ones((n_target, n_target), bool), 1)",
        ("tests/tasks/test_niah.py::test_multi_value_answer_is_exactly_the_bound_values",),
    ),
    Defect(
        "variable-bound-to-the-next-in-its-chain",
        "rope_lab/tasks/sampling/variable_tracking.py",
        "        names[rows, chain, jnp.maximum(hop - 1, 0)],",
        "        names[rows, chain, jnp.minimum(hop + 1, k - 1)],",
        ("tests/tasks/test_variable_tracking.py::test_answer_is_the_brute_force_resolution",),
    ),
    Defect(
        "common-words-tied-by-last-appearance",
        "rope_lab/tasks/sampling/words.py",
        "    rank = counts * (n + 1) - first",
        "    rank = counts * (n + 1) + first",
        ("tests/tasks/test_cwe.py::test_cwe_answer_is_counter_most_common",),
    ),
    Defect(
        "a-changed-stage-file-is-trusted",
        "rope_lab/trial/stage_files.py",
        "        return broken_files(folder, done[FILES_KEY] or {})",
        "        return []",
        ("tests/sweep/test_corrupt_rerun.py",),
    ),
    Defect(
        "a-broken-train-segment-resumed-past",
        "rope_lab/trial/stage_files.py",
        "            shutil.rmtree(ckpt)",
        "            pass",
        ("tests/sweep/test_corrupt_rerun.py",),
    ),
    Defect(
        "file-proof-checks-size-only",
        "rope_lab/runtime/checked_files.py",
        '    if "crc32" in recorded and _crc32(path, st) != recorded["crc32"]:',
        '    if "crc32" not in recorded:',
        ("tests/runtime/test_checked_files.py",),
    ),
)


def scratch_copy(dest: Path) -> None:
    """The checkout without .git, virtualenvs, caches and run folders."""
    ignore = shutil.ignore_patterns(".git", ".venv", "runs", "mutants", "__pycache__", ".*_cache")
    shutil.copytree(REPO, dest, ignore=ignore)


def apply(defect: Defect, root: Path) -> None:
    """Apply the edit in the scratch copy at `root`; the edited text must occur exactly once."""
    target = root / defect.path
    text = target.read_text()
    count = text.count(defect.old)
    if count != 1:
        raise SystemExit(f"{defect.name}: expected the text once in {defect.path}, found {count}")
    target.write_text(text.replace(defect.old, defect.new))


def run(defect: Defect, timeout: float) -> tuple[bool, float, str]:
    """(killed, seconds, the first failed test or pytest's last lines) for one defect."""
    with tempfile.TemporaryDirectory(prefix=f"defect_{defect.name}_") as tmp:
        root = Path(tmp) / "repo"
        scratch_copy(root)
        apply(defect, root)
        env = {**os.environ, "PYTHONPATH": str(root)}
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider"]
        start = time.perf_counter()
        try:
            r = subprocess.run(
                [*cmd, *defect.tests],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False, time.perf_counter() - start, "timed out"
        seconds = time.perf_counter() - start
        lines = (r.stdout + r.stderr).strip().splitlines()
        failed = [line.split(" - ")[0] for line in lines if line.startswith("FAILED ")]
        tail = failed[0] if r.returncode == 1 and failed else "\n".join(lines[-3:])
        # exit 1: tests failed. 2-5 (interrupted, internal error, usage, none collected) are
        # not kills: a defect must be caught by a test that ran.
        return r.returncode == 1, seconds, tail


def main(argv: list[str] | None = None) -> int:
    """Run the named defects (all by default); print one line each; 1 if any survived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="defects to run (default: all)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per defect")
    args = parser.parse_args(argv)
    known = {d.name: d for d in DEFECTS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown defect(s) {', '.join(unknown)}; known: {', '.join(known)}")
    survived = []
    for defect in [known[n] for n in args.names] or DEFECTS:
        killed, seconds, tail = run(defect, args.timeout)
        verdict = "killed" if killed else "SURVIVED"
        print(f"{verdict:8s} {defect.name:40s} {seconds:6.1f}s")
        print("    " + tail.replace("\n", "\n    "))
        if not killed:
            survived.append(defect.name)
    print(
        f"{len(DEFECTS if not args.names else args.names) - len(survived)} killed, "
        f"{len(survived)} survived"
    )
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
