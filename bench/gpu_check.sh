#!/usr/bin/env bash
# The checks that need a GPU, in one go: the GPU tests (1 process, then 2-4 ranks),
# then the zoo on the GPU against the CPU (bench/gpu_bench.py, JSON on stdout).
#
#   bash bench/gpu_check.sh                  # after scripts/setup.sh, on a node with a CUDA device
#   GPU_BENCH_ARGS="--part-config P.json" bash bench/gpu_check.sh
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
PY=${HPCGNN_VENV:-$here/.venv}/bin/python
[ -x "$PY" ] || { echo "gpu_check: no venv at .venv; run: bash scripts/setup.sh" >&2; exit 1; }
"$PY" - <<'PYEOF' || exit 2
import sys, torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: torch {torch.__version__} sees no CUDA device")
print(f"gpu_check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
PYEOF
status=0
# the tests that take another path on a GPU (they are skipped, or run on the CPU only, elsewhere)
bash scripts/test.sh -k "cuda or gpu or device or cache or half or zoo" || status=1
PATH="$(dirname "$PY"):$PATH" "$PY" bench/gpu_bench.py ${GPU_BENCH_ARGS:-} || status=1
exit $status
