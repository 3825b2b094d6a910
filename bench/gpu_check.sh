#!/usr/bin/env bash
# The checks that need a GPU, in one go (each JSON on stdout, in this order):
#   1. the GPU tests (1 process, then 2-4 ranks);
#   2. the zoo on the GPU against the CPU on the README graph (bench/gpu_bench.py:
#      epochs, the model-only floor, host time, GPU busy time, bytes copied);
#   3. the GPU sampler on the products-sized graph ([15,10,5], batch 1024; target 50 M edges/s);
#   4. sage on the products-sized graph against its floor (GPU_CHECK_PRODUCTS=0 skips 3-4).
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
export PATH="$(dirname "$PY"):$PATH"
"$PY" bench/gpu_bench.py ${GPU_BENCH_ARGS:-} || status=1
if [ "${GPU_CHECK_PRODUCTS:-1}" = 1 ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/hpcgnn-gpucheck.XXXXXX")
  "$PY" bench/sampling_bench.py --device cuda --dir "$work/s" --batches 50 --numpy-batches 1 || status=1
  "$PY" bench/gpu_bench.py --models sage --nodes 2449029 --degree 25 --feat-dim 100 --classes 47 \
      --dir "$work/g" --epochs 2 || status=1
  rm -rf "$work"
fi
exit $status
