#!/usr/bin/env bash
# One short GPU check (a few minutes on one NVIDIA GPU): JAX on CUDA, then rope_lab's training
# step against Hugging Face LlamaForCausalLM in PyTorch at width 1024, depth 8, L 1024, bf16
# compute on float32 parameters; tokens/s, MFU and the ratio go to benchmarks/RESULTS.md.
#   bash benchmarks/gpu.sh            # from the repository root, on the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -e '.[cuda12,bench]'
fi
"$VENV/bin/python" - <<'PY'
import jax
print("devices:", jax.devices())
assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()}, not CUDA"
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$VENV/bin/python" -m benchmarks.train_step --widths 1024 --depth 8 --length 1024 --batch 8 \
  --dtype bfloat16 --repeats 10 --note "benchmarks/gpu.sh on $(hostname)"
