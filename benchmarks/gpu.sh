#!/usr/bin/env bash
# The one GPU check (aim: under 8 minutes on one NVIDIA GPU), from the repository root:
#   bash benchmarks/gpu.sh                    # on the GPU machine
#   GPU_SH_DRY=1 bash benchmarks/gpu.sh       # tiny CPU dry run of the plumbing (no GPU numbers)
# Steps (Python parts: benchmarks/gpu_checks.py, one JSON each under OUT/parts/):
#   1. env:        JAX runs on CUDA (fatal otherwise: nothing after it would mean anything);
#   2. sweep:      sweeps/smoke.yaml end to end with its 8 trials sharing the GPU
#                  (resources.num_gpus 1/8, written to WORK/smoke.yaml), every trial finished;
#   3. attention:  cuDNN against the blocked kernel, bf16, causal, L 1024..8192, with and
#                  without a 512 sliding window: outputs and gradients equal within bf16
#                  tolerance, time and peak device memory of each (one process per kernel);
#   4. train_step: rope_lab's train step at width 1024, depth 8, L 1024, bf16 compute against
#                  transformers' LlamaForCausalLM (benchmarks/train_step.py's sides): MFU, ratio;
#   5. pack:       eight packed trials (one vmapped program) against one trial: throughput ratio;
#   then one results file, OUT/gpu_results.json, and a summary. Every step runs even when an
#   earlier one failed (its failure is recorded); the script exits 1, loudly, if any check
#   failed, any step exited non-zero, or (GPU run) the total passed GPU_SH_BUDGET_S (480).
# Environment: OUT (results folder; default runs/gpu_sh/<UTC time>), GPU_SH_WORK (scratch:
# sweep run, compilation cache, pack runs, attention arrays; default OUT/work), VENV (default
# .venv-gpu, created with the cuda12 and bench extras when missing; the dry run uses .venv),
# GPU_SH_KEEP=1 keeps the compilation cache.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=${GPU_SH_DRY:-0}
export GPU_SH_DRY=$DRY
OUT=${OUT:-runs/gpu_sh/$(date -u +%Y%m%dT%H%M%SZ)}
WORK=${GPU_SH_WORK:-$OUT/work}
BUDGET=${GPU_SH_BUDGET_S:-480}
mkdir -p "$OUT/logs" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
STEPS=$OUT/steps.tsv
: >"$STEPS"
rm -rf "$OUT/parts"

if [ "$DRY" != 0 ]; then
  VENV=${VENV:-.venv}
  export JAX_PLATFORMS=cpu
  echo "### benchmarks/gpu.sh DRY RUN on the CPU: tiny sizes, no GPU numbers"
else
  VENV=${VENV:-.venv-gpu}
  export JAX_PLATFORMS=cuda # a worker that cannot start CUDA fails instead of using the CPU
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -e '.[cuda12,bench]'
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
PY=("$VENV/bin/python" -u)
CHECKS=("${PY[@]}" -m benchmarks.gpu_checks)
export ROPE_LAB_COMPILE_CACHE=$WORK/jax_cache # a cold cache: every number includes compiling
export PYTHONUNBUFFERED=1
echo "### OUT=$OUT WORK=$WORK $(date -u +%FT%TZ) on $(hostname)"

# run_step NAME SECONDS CMD...: run CMD under a time limit, log to OUT/logs/NAME.log, record
# "NAME<TAB>exit code<TAB>seconds" in STEPS; never stops the script.
run_step() {
  local name=$1 limit=$2 rc=0 t0=$SECONDS
  shift 2
  echo "=== [$name] $(date -u +%T) (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/logs/$name.log" || rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$STEPS"
  if [ "$rc" -ne 0 ]; then
    echo "!!! [$name] FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ": over ${limit}s"))" >&2
  fi
  return 0
}

report() {
  "${CHECKS[@]}" report --out "$OUT" --steps "$STEPS" --elapsed "$SECONDS" --budget "$BUDGET"
}

# 1. JAX on CUDA (fatal)
run_step env 120 "${CHECKS[@]}" env --out "$OUT"
if [ "$(cut -f2 "$STEPS" | tail -n1)" != 0 ]; then
  echo "!!! JAX does not run on CUDA: stopping here" >&2
  report || true
  exit 1
fi

# 2. the smoke sweep, end to end
SPEC=$("${CHECKS[@]}" sweep-spec --out "$OUT" --work "$WORK") || {
  echo "!!! could not write the sweep spec" >&2
  report || true
  exit 1
}
t0=$SECONDS
run_step sweep 240 "${PY[@]}" -m rope_lab.cli sweep run "$SPEC" --out "$WORK/sweep"
sweep_rc=$(tail -n1 "$STEPS" | cut -f2)
run_step sweep_check 60 "${CHECKS[@]}" sweep-check --out "$OUT" --spec "$SPEC" \
  --run-dir "$WORK/sweep" --wall-s "$((SECONDS - t0))" --rc "$sweep_rc"

# 3. cuDNN vs blocked attention
run_step attention 200 "${CHECKS[@]}" attention --out "$OUT" --work "$WORK" --timeout 90

# 4. train-step MFU against HF Llama (JAX takes half the GPU's memory, torch the rest)
XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 run_step train_step 150 "${CHECKS[@]}" train-step --out "$OUT"

# 5. eight packed trials against one
run_step pack 120 "${CHECKS[@]}" pack --out "$OUT" --work "$WORK"

[ "${GPU_SH_KEEP:-0}" != 0 ] || rm -rf "$WORK/jax_cache"
report
