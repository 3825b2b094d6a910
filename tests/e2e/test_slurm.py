"""The sbatch scripts under a real single-node SLURM (munged + slurmctld + slurmd
started for this module, all state in a temporary directory; tests/slurm_cluster.py).

Skipped where SLURM/munge are not installed or we are not root; scripts/setup.sh
installs them (apt) on a machine where it runs as root.  Single-process only: not
marked ``mpi``, so the ``mpirun ... -m mpi`` runs leave it out.
"""
import os
import re
import subprocess
import time

import pytest

from slurm_cluster import SlurmCluster, skip_reason

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "node_classification.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# A stand-in for examples/node_classification.py with the same command line: records
# its arguments, sleeps (not when resuming), stops on SIGUSR1 as the real one does,
# prints the line the real one prints.
STAND_IN = r'''
import argparse, os, signal, sys, time
from mpi4py import MPI
stop = []
signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))      # as hpcgnn.comm.signals does
p = argparse.ArgumentParser()
p.add_argument("--part-config", required=True)
p.add_argument("--layout", required=True)
p.add_argument("--epochs", type=int, required=True)
p.add_argument("--run-dir", required=True)
p.add_argument("--checkpoint-every", type=int, default=0)
p.add_argument("--resume", action="store_true")
p.add_argument("--sleep", type=float, default=0)
p.add_argument("--no-checkpoint", action="store_true")     # stop without writing one
a = p.parse_args()
comm = MPI.COMM_WORLD
if comm.rank == 0:
    os.makedirs(a.run_dir, exist_ok=True)
    with open(os.path.join(a.run_dir, "argv.log"), "a") as f:
        f.write(f"size={comm.size} " + " ".join(sys.argv[1:]) + "\n")
    with open(os.path.join(a.run_dir, "started"), "w") as f:
        f.write("1")
end = time.monotonic() + (0 if a.resume else a.sleep)     # a resumed run just ends
while time.monotonic() < end and not stop:
    time.sleep(0.05)
if comm.allreduce(len(stop)):
    if comm.rank == 0:
        if not a.no_checkpoint:            # as hpcgnn train does on a stop signal
            os.makedirs(os.path.join(a.run_dir, "checkpoints"), exist_ok=True)
            open(os.path.join(a.run_dir, "checkpoints", "step-1.h5"), "w").close()
        print("stand-in: stopped on SIGUSR1", flush=True)
    sys.exit(0)
if comm.rank == 0:
    open(os.path.join(a.run_dir, "model.pt"), "w").close()
    print("test accuracy: 0.5000", flush=True)
'''


@pytest.fixture(scope="module")
def cluster():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # 4 task slots even on 2 cores: the training job runs 2 ranks per partition
    with SlurmCluster(cpus=max(4, os.cpu_count() or 1)) as c:
        yield c


@pytest.fixture
def stand_in(tmp_path):
    path = tmp_path / "stand_in_train.py"
    path.write_text(STAND_IN)
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "synthetic.json").write_text("{}")
    return str(path), str(parts / "synthetic.json")


def _show(res):
    return f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"


def _job_field(cluster, jobid, field):
    out = cluster.run(["scontrol", "show", "job", str(jobid)]).stdout
    m = re.search(rf"\b{field}=(\S+)", out)
    return m.group(1) if m else None


def _wait_job(cluster, jobid, timeout=300):
    """Poll until the job ends (sbatch --wait polls only every 10-30 s); its JobState
    and the exit code of its batch script."""
    deadline = time.monotonic() + timeout
    while True:
        state = _job_field(cluster, jobid, "JobState")
        if state not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED"):
            break
        assert time.monotonic() < deadline, f"job {jobid} still {state}"
        time.sleep(0.3)
    code = _job_field(cluster, jobid, "ExitCode")
    return state, int(code.split(":")[0]) if code else None


def test_sbatch_wait_returns_exit_codes(cluster, tmp_path):
    # two at once: sbatch --wait notices the end of a job only about 10 s later
    procs = {name: subprocess.Popen(["sbatch", "--wait", "-o", str(tmp_path / f"{name}.out"),
                                     "--wrap", cmd], env=cluster.env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
             for name, cmd in (("ok", "echo hello from $SLURM_JOB_ID"), ("bad", "exit 3"))}
    out = {name: p.communicate(timeout=120)[0] for name, p in procs.items()}
    assert procs["ok"].returncode == 0, out["ok"]
    assert "hello from" in (tmp_path / "ok.out").read_text()
    assert procs["bad"].returncode == 3, out["bad"]


def test_doctor_sbatch(cluster, tmp_path):
    """slurm/doctor.sbatch as a user would submit it (srun --mpi=pmix), on one node."""
    if not os.path.exists(os.path.join(ROOT, ".venv", "bin", "activate")):
        pytest.skip("slurm/doctor.sbatch sources .venv/bin/activate; no .venv here")
    out = tmp_path / "doctor.out"
    sub = cluster.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "-o", str(out),
                       os.path.join(ROOT, "slurm", "doctor.sbatch")], cwd=ROOT)
    assert sub.returncode == 0, _show(sub)
    state, code = _wait_job(cluster, sub.stdout.strip().split(";")[0])
    text = out.read_text() if out.exists() else ""
    assert (state, code) == ("COMPLETED", 0), text
    assert "all green" in text, text


def _pipeline(cluster, work, env, timeout=400):
    env = dict(HPCGNN_WORK_DIR=str(work), HPCGNN_JOB_NODES="1", HPCGNN_POLL_S="0.5", **env)
    res = cluster.run(["bash", os.path.join(ROOT, "slurm", "pipeline.sh"), "--wait"], env=env,
                      timeout=timeout)
    ids = dict(re.findall(r"^(generate|partition|train): (\d+)$", res.stdout, re.M))
    return res, ids


def _train_output(work, ids):
    path = os.path.join(str(work), f"train-{ids.get('train')}.out")
    return open(path).read() if os.path.exists(path) else ""


def test_pipeline_trains(cluster, tmp_path):
    """generate -> partition -> train chained with afterok, with the real example; the
    training job gets SIGUSR1 after its first epoch (what --signal=B:USR1@120 sends
    before the time limit): it checkpoints, is requeued, resumes and finishes."""
    if not os.path.exists(EXAMPLE):
        pytest.skip("examples/node_classification.py does not exist yet")
    classes = 16
    work = tmp_path / "work"
    env = dict(HPCGNN_WORK_DIR=str(work), HPCGNN_JOB_NODES="1", HPCGNN_POLL_S="0.5",
               HPCGNN_GRAPH_NODES="3000", HPCGNN_NUM_CLASSES=str(classes), HPCGNN_NUM_PARTS="2",
               HPCGNN_EPOCHS="6", HPCGNN_TRAIN_ARGS="--batch-size 64")
    proc = subprocess.Popen(["bash", os.path.join(ROOT, "slurm", "pipeline.sh"), "--wait"],
                            env=cluster.env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        first = []
        for line in proc.stdout:          # the ids come first, then pipeline.sh waits
            first.append(line)
            if line.startswith("train: "):
                break
        ids = dict(re.findall(r"^(generate|partition|train): (\d+)$", "".join(first), re.M))
        assert "train" in ids, "".join(first) + proc.stdout.read()
        log = work / "run" / "log.jsonl"
        deadline = time.monotonic() + 300
        while not (log.exists() and '"epoch"' in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(first)
            time.sleep(0.1)
        sig = cluster.run(["scancel", "--batch", "--signal=USR1", ids["train"]])
        assert sig.returncode == 0, _show(sig)
        rest, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = _train_output(work, ids)
    logs = "".join(f"\n--- {f}\n" + (work / f).read_text()
                   for f in sorted(os.listdir(work)) if f.endswith(".out"))
    assert proc.returncode == 0, "".join(first) + rest + logs
    assert "stopped at step" in out and "SIGUSR1" in out and "requeueing job" in out, logs
    assert _job_field(cluster, ids["train"], "Restarts") == "1", logs
    runs = re.findall(r"^hpcgnn-train: job .*$", out, re.M)
    assert len(runs) == 2 and "--resume" in runs[1] and "--resume" not in runs[0], runs
    m = re.findall(r"^test accuracy: ([0-9.]+)\s*$", out, re.M)
    assert len(m) == 1, logs
    assert float(m[0]) > 1.5 / classes, logs


def test_pipeline_plumbing_with_stand_in(cluster, tmp_path, stand_in):
    """The same chain with a stand-in training script: paths and rank counts arrive.
    (Until the real example exists; then test_pipeline_trains covers the chain.)"""
    if os.path.exists(EXAMPLE):
        pytest.skip("test_pipeline_trains runs the chain with the real example")
    script, _ = stand_in
    work = tmp_path / "work"
    res, ids = _pipeline(cluster, work, dict(
        HPCGNN_GRAPH_NODES="2000", HPCGNN_NUM_PARTS="2", HPCGNN_EPOCHS="1",
        HPCGNN_TRAIN_SCRIPT=script))
    out = _train_output(work, ids)
    assert res.returncode == 0, _show(res) + out
    assert re.search(r"^test accuracy: 0\.5000$", out, re.M), out
    argv = (work / "run" / "argv.log").read_text()
    assert "size=4 " in argv                      # 2 partitions x (server + trainer)
    assert f"--part-config {work}/parts/synthetic.json" in argv
    assert "--layout servers=1,samplers=0,trainers=1 --epochs 1" in argv
    assert os.path.exists(work / "parts" / "synthetic.json")


def test_pipeline_failure_cancels_the_rest(cluster, tmp_path, stand_in):
    script, _ = stand_in
    res, ids = _pipeline(cluster, tmp_path / "work", dict(
        HPCGNN_GRAPH_NODES="0", HPCGNN_TRAIN_SCRIPT=script), timeout=120)
    assert res.returncode != 0, _show(res)
    assert _job_field(cluster, ids["generate"], "JobState") == "FAILED"
    assert _job_field(cluster, ids["train"], "JobState") == "CANCELLED"


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_train_requeue_resumes(cluster, tmp_path, stand_in, launcher):
    """SIGUSR1 to the batch shell (what --signal=B:USR1@120 sends) reaches the ranks
    through the launcher, they stop, the job is requeued; the second run gets --resume
    and finishes."""
    script, part_config = stand_in
    run_dir = tmp_path / "run"
    out = tmp_path / "train.out"
    env = dict(HPCGNN_PART_CONFIG=part_config, HPCGNN_RUN_DIR=str(run_dir), HPCGNN_EPOCHS="3",
               HPCGNN_TRAIN_SCRIPT=script, HPCGNN_TRAIN_ARGS="--sleep 60", HPCGNN_LAUNCHER=launcher)
    sub = cluster.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", f"--chdir={tmp_path}",
                       "-o", str(out), os.path.join(ROOT, "slurm", "train.sbatch")], env=env)
    assert sub.returncode == 0, _show(sub)
    jobid = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while not (run_dir / "started").exists():         # the first run is under way
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.2)
    sig = cluster.run(["scancel", "--batch", "--signal=USR1", jobid])
    assert sig.returncode == 0, _show(sig)
    state = None
    while time.monotonic() < deadline:
        state = _job_field(cluster, jobid, "JobState")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            break
        time.sleep(0.5)
    text = out.read_text()
    assert state == "COMPLETED", text
    assert _job_field(cluster, jobid, "Restarts") == "1", text
    runs = (run_dir / "argv.log").read_text().splitlines()
    assert len(runs) == 2, runs
    assert "--resume" not in runs[0].split() and "--resume" in runs[1].split(), runs
    assert runs[0].startswith("size=2 "), runs
    assert "stand-in: stopped on SIGUSR1" in text and "requeueing job" in text, text
    assert text.rstrip().splitlines()[-2:] == ["test accuracy: 0.5000", "hpcgnn-train: launcher exited with 0"], text


def test_train_stop_without_a_checkpoint_is_not_requeued(cluster, tmp_path, stand_in):
    """A stop that left no new checkpoint (or a run that had finished) is not
    requeued: a requeued run would start over and could loop for ever."""
    script, part_config = stand_in
    run_dir = tmp_path / "run"
    out = tmp_path / "train.out"
    env = dict(HPCGNN_PART_CONFIG=part_config, HPCGNN_RUN_DIR=str(run_dir), HPCGNN_EPOCHS="3",
               HPCGNN_TRAIN_SCRIPT=script, HPCGNN_TRAIN_ARGS="--sleep 60 --no-checkpoint")
    sub = cluster.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", f"--chdir={tmp_path}",
                       "-o", str(out), os.path.join(ROOT, "slurm", "train.sbatch")], env=env)
    assert sub.returncode == 0, _show(sub)
    jobid = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while not (run_dir / "started").exists():
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.2)
    assert cluster.run(["scancel", "--batch", "--signal=USR1", jobid]).returncode == 0
    state, code = _wait_job(cluster, jobid, timeout=120)
    text = out.read_text()
    assert state == "COMPLETED" and code == 0, text
    assert _job_field(cluster, jobid, "Restarts") == "0", text
    assert "not requeued (exit 0, no new checkpoint)" in text, text
