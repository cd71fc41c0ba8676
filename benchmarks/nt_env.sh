#!/usr/bin/env bash
# neural-tangents comparison (benchmarks/ntk_neural_tangents.py) in its own throwaway venv.
# neural-tangents 0.6.5 installs with jax 0.10.2 but fails on import there, so the venv pins
# the last jax it works with; rope_lab's weights are exported from the main venv.
#   bash benchmarks/nt_env.sh [--quick] [--no-record]
# NT_VENV (default /tmp/ntenv) and ROPE_LAB_NT_WEIGHTS (default /tmp/rope_lab_nt) are never
# committed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${NT_VENV:-/tmp/ntenv}
weights=${ROPE_LAB_NT_WEIGHTS:-/tmp/rope_lab_nt}
if ! "$venv/bin/python" -c "import neural_tangents" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "jax==0.4.23" "jaxlib==0.4.23" "numpy<2" "scipy<1.13" \
        "tensorflow==2.15.1" "neural-tangents==0.6.5"
fi
.venv/bin/python -m benchmarks.ntk_neural_tangents --export "$weights"
TF_CPP_MIN_LOG_LEVEL=3 "$venv/bin/python" -m benchmarks.ntk_neural_tangents --weights "$weights" "$@"
