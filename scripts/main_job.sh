#!/usr/bin/env bash
# The main job: what a new user runs after scripts/setup.sh.
#   bash scripts/main_job.sh            # HPCGNN_NODES=100000 nodes, HPCGNN_EPOCHS=3
#   (HPCGNN_NP=2: ranks of the doctor/generate/partition steps; HPCGNN_RUN_DIR=runs/main)
# Check the installation under a real launch, generate a synthetic graph in parallel,
# partition it with ParMETIS into 2 parts (one parallel-HDF5 file + JSON), describe
# the result, then train GraphSAGE on it: 2 virtual nodes of 2 ranks (a server and a
# trainer each, one partition per node), DDP between the trainers, and print the test
# accuracy of layer-wise full-graph inference.  Run files land in runs/main/train.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export PATH="$here/.venv/bin:$PATH"
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
NP=${HPCGNN_NP:-2}
NODES=${HPCGNN_NODES:-100000}
EPOCHS=${HPCGNN_EPOCHS:-3}
RUN=${HPCGNN_RUN_DIR:-$here/runs/main}
mkdir -p "$RUN"

echo "== hpcgnn doctor on $NP ranks"
mpirun -n "$NP" hpcgnn doctor --layout "servers=1,samplers=0,trainers=rest"

echo "== generate a $NODES-node class-structured graph ($NP ranks)"
mpirun -n "$NP" hpcgnn generate "$RUN/graph.h5" --num-nodes "$NODES" --avg-degree 20 \
  --feat-dim 64 --num-classes 16 --seed 0 --name synthetic --overwrite

echo "== partition it into 2 parts with ParMETIS ($NP ranks)"
mpirun -n "$NP" hpcgnn partition "$RUN/graph.h5" -o "$RUN/parts" -k 2 \
  --balance-ntypes train_mask --overwrite

echo "== the result"
hpcgnn info "$RUN/parts/synthetic.json"

echo "== train GraphSAGE on the 2 partitions (4 ranks: 2 x [server, trainer])"
mpirun -n 4 hpcgnn train --part-config "$RUN/parts/synthetic.json" \
  --layout "servers=1,samplers=0,trainers=1" --ranks-per-node 2 \
  --epochs "$EPOCHS" --batch-size 1000 --fanouts 25,10 --hidden 128 --lr 0.003 \
  --run-dir "$RUN/train"
echo "== run files: $RUN/train (log.jsonl, metrics.csv, curve.png, model.pt)"
