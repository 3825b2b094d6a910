#!/usr/bin/env bash
# Submit generate -> partition -> train as three SLURM jobs chained with
# --dependency=afterok (each starts only when the one before succeeded).
#
#   bash slurm/pipeline.sh                 # submit, print the three job ids, return
#   bash slurm/pipeline.sh --wait          # ... and wait for the training job; exit with its code
#
# Everything is set by environment variables (small defaults, for a first try):
#   HPCGNN_WORK_DIR       where the graph, partitions and run go   (runs/pipeline)
#   HPCGNN_GRAPH_NODES    graph size                               (20000)
#   HPCGNN_AVG_DEGREE, HPCGNN_FEAT_DIM, HPCGNN_NUM_CLASSES, HPCGNN_SEED: see generate.sbatch
#   HPCGNN_NUM_PARTS      partitions = training nodes of 2 ranks   (2)
#   HPCGNN_JOB_NODES      machines for the training job            (HPCGNN_NUM_PARTS);
#                         fewer machines than parts puts several (virtual) nodes on one
#   HPCGNN_PREP_TASKS     ranks of the generate and partition jobs (2)
#   HPCGNN_EPOCHS         training epochs                          (2)
#   HPCGNN_RUN_DIR        training run directory                   ($HPCGNN_WORK_DIR/run)
#   HPCGNN_SBATCH_ARGS    extra sbatch options for all three jobs, e.g.
#                         "--partition=cpu --account=myproject --time=00:20:00"
#   HPCGNN_TRAIN_SBATCH_ARGS  extra sbatch options for the training job only, e.g. "--gpus-per-node=1"
#   HPCGNN_POLL_S         with --wait: seconds between looks at the jobs' states   (2)
#   HPCGNN_LAUNCHER, HPCGNN_VENV, HPCGNN_TRAIN_SCRIPT, HPCGNN_CHECKPOINT_EVERY, ...:
#                         passed on to the jobs (see the .sbatch files)
# Job output goes to $HPCGNN_WORK_DIR/{generate,partition,train}-JOBID.out.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

wait_last=0
for a in "$@"; do
  case $a in
    --wait) wait_last=1 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "pipeline: unknown argument $a (only --wait)" >&2; exit 2 ;;
  esac
done

work=${HPCGNN_WORK_DIR:-$here/runs/pipeline}
mkdir -p "$work"
work=$(cd "$work" && pwd)
parts=${HPCGNN_NUM_PARTS:-2}
job_nodes=${HPCGNN_JOB_NODES:-$parts}
if [ $((parts % job_nodes)) -ne 0 ]; then
  echo "pipeline: HPCGNN_NUM_PARTS=$parts is not a multiple of HPCGNN_JOB_NODES=$job_nodes" >&2; exit 2
fi
per_node=$((parts / job_nodes))           # partitions (server+trainer pairs) per machine
prep=${HPCGNN_PREP_TASKS:-2}
graph=$work/graph.h5
parts_dir=$work/parts
name=synthetic
run_dir=${HPCGNN_RUN_DIR:-$work/run}

# the jobs find the repository (and its .venv) here
export HPCGNN_HOME=${HPCGNN_HOME:-$here}
# --kill-on-invalid-dep: a job whose predecessor failed is cancelled, not left pending
common=(--parsable --chdir="$work" ${HPCGNN_SBATCH_ARGS:-})
dep=(--kill-on-invalid-dep=yes)

gen=$(sbatch "${common[@]}" --nodes=1 --ntasks-per-node="$prep" --output="$work/generate-%j.out" \
  --export="ALL,HPCGNN_GRAPH=$graph,HPCGNN_GRAPH_NODES=${HPCGNN_GRAPH_NODES:-20000},HPCGNN_GENERATE_ARGS=--name $name ${HPCGNN_GENERATE_ARGS:-}" \
  "$here/slurm/generate.sbatch")
gen=${gen%%;*}     # --parsable prints "id" or "id;cluster"

part=$(sbatch "${common[@]}" "${dep[@]}" --dependency="afterok:$gen" --nodes=1 --ntasks-per-node="$prep" \
  --output="$work/partition-%j.out" \
  --export="ALL,HPCGNN_GRAPH=$graph,HPCGNN_PARTS_DIR=$parts_dir,HPCGNN_NUM_PARTS=$parts" \
  "$here/slurm/partition.sbatch")
part=${part%%;*}

train_env="ALL,HPCGNN_PART_CONFIG=$parts_dir/$name.json,HPCGNN_EPOCHS=${HPCGNN_EPOCHS:-2},HPCGNN_RUN_DIR=$run_dir"
if [ "$per_node" -gt 1 ]; then train_env="$train_env,HPCGNN_RANKS_PER_NODE=2"; fi
train=$(sbatch "${common[@]}" "${dep[@]}" --dependency="afterok:$part" --nodes="$job_nodes" \
  --ntasks-per-node=$((2 * per_node)) --output="$work/train-%j.out" \
  --export="$train_env" ${HPCGNN_TRAIN_SBATCH_ARGS:-} "$here/slurm/train.sbatch")
train=${train%%;*}

echo "generate: $gen"
echo "partition: $part"
echo "train: $train"
echo "output: $work/{generate-$gen,partition-$part,train-$train}.out"

if [ "$wait_last" = 1 ]; then
  # poll the training job (it may be requeued and run again); a job left pending on a
  # failed dependency (a site that ignores --kill-on-invalid-dep) is cancelled
  while :; do
    state=$(squeue -h -j "$train" -o "%T %r" 2>/dev/null || true)
    case $state in
      "") break ;;
      *DependencyNeverSatisfied*)
        echo "pipeline: an earlier job failed; cancelling $train" >&2
        scancel "$train" || true ;;
    esac
    sleep "${HPCGNN_POLL_S:-2}"
  done
  rc=$(sacct -n -X -j "$train" -o ExitCode 2>/dev/null | head -n 1 | tr -d ' ' || true)
  if [ -z "$rc" ]; then
    rc=$(scontrol show job "$train" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' | head -n 1)
  fi
  state=$(scontrol show job "$train" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1)
  echo "train: ${state:-finished} exit ${rc:-?}"
  code=${rc%%:*}
  [ "${state:-}" = COMPLETED ] && exit 0
  [ -n "$code" ] && [ "$code" != 0 ] && exit "$code"
  exit 1
fi
