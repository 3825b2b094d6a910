#!/usr/bin/env bash
# The main job: what a new user runs after scripts/setup.sh.
#   bash scripts/main_job.sh
# Today: check the installation under a real 2-rank launch (hpcgnn doctor).
# (Grows into generate -> partition -> train -> accuracy as those land.)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export PATH="$here/.venv/bin:$PATH"
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
NP=${HPCGNN_NP:-2}

echo "== hpcgnn doctor on $NP ranks"
mpirun -n "$NP" hpcgnn doctor --layout "servers=1,samplers=0,trainers=rest"
