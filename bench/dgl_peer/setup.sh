#!/usr/bin/env bash
# A separate virtual environment with DGL's distributed module, to run DGL as the peer
# in the same benchmark run (bench/train_bench.py --dgl-venv .dglvenv).  Not part of
# hpcgnn's own set-up or tests.  DGL 2.1 (the release TARGETS.md's rows were measured
# with) needs PyTorch <= 2.2 and NumPy 1; PyPI's torch 2.2.1 is a CUDA build (~2.5 GB
# with its NVIDIA libraries), used here on the CPU.
#
#   bash bench/dgl_peer/setup.sh [VENV]      # default: ./.dglvenv
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${1:-$here/.dglvenv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.2.1" "torchdata==0.7.1" "numpy<2" "setuptools<70" "pandas<2.3" \
    "dgl==2.1.0" scipy networkx psutil tqdm pyyaml pydantic requests h5py
"$venv/bin/python" -c "import dgl, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)"
