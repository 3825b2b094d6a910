"""Lost and frozen ranks (issue 29): the first line names the rank that failed, and
a wait on a rank that does not answer ends the job after HPCGNN_TIMEOUT."""
import os
import signal
import subprocess
import sys
import time

import h5py
import pytest

from hpcgnn.comm import failure, peers, watchdog
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph

SCRIPT = """
import os, signal, sys
import hpcgnn
from hpcgnn.comm.agree import agreed
from hpcgnn.comm.mpi import MPI
ctx = hpcgnn.initialize("servers=0,samplers=0,trainers=rest", serve=False)
if MPI.COMM_WORLD.Get_rank() == int(sys.argv[1]):
    os.kill(os.getpid(), signal.SIGSTOP)            # frozen: a node stuck in I/O, a debugger
with agreed(MPI.COMM_WORLD):
    pass
print("not reached by", MPI.COMM_WORLD.Get_rank(), flush=True)
"""


def test_timeout_setting_is_checked(monkeypatch):
    monkeypatch.delenv("HPCGNN_TIMEOUT", raising=False)
    assert watchdog.timeout_s() == watchdog.DEFAULT_TIMEOUT_S
    monkeypatch.setenv("HPCGNN_TIMEOUT", "12.5")
    assert watchdog.timeout_s() == 12.5
    for bad in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv("HPCGNN_TIMEOUT", bad)
        with pytest.raises(ValueError, match="HPCGNN_TIMEOUT"):
            watchdog.timeout_s()


@pytest.mark.timeout(60)
def test_peer_states_on_this_host(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        table = {0: ("server", 0, os.uname().nodename, os.getpid()), 1: ("trainer", 0, os.uname().nodename, child.pid),
                 2: ("trainer", 1, "another-host", child.pid)}
        monkeypatch.setattr(peers, "TABLE", table)
        assert peers.state(1) == "running" and peers.state(2) is None     # other hosts: not looked at
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(100):
            if peers.state(1) == "stopped":
                break
            time.sleep(0.05)
        assert peers.state(1) == "stopped"
        assert peers.describe(1) == f"rank 1 (trainer, node 0, host {os.uname().nodename}), whose process is " \
                                    "stopped (SIGSTOP?)"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert peers.state(1) == "gone" and 1 in peers.troubled()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.slow
def test_a_process_stopped_and_woken_knows_it_was_stopped(monkeypatch):
    """A rank frozen while the others ended the job says so when woken, instead of
    calling the rank that caught it gone."""
    from hpcgnn.comm import watchdog

    monkeypatch.setattr(watchdog, "_stopped_for", 0.0)     # put back for the tests after this one
    me = os.getpid()
    with watchdog.waiting("nothing"):
        assert watchdog.stopped_for() == 0.0 and watchdog.stopped_line() is None
        subprocess.run(["bash", "-c", f"(kill -STOP {me}; sleep {watchdog.STOPPED_S + 1}; kill -CONT {me}) &"])
        time.sleep(1.0)                           # stopped in here, then woken
    assert watchdog.stopped_for() > watchdog.STOPPED_S
    assert "was stopped for" in watchdog.stopped_line() and "the job ended meanwhile" in watchdog.stopped_line()


def test_lost_peer_errors_are_recognised():
    assert failure.lost_peer(RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]"))
    assert failure.lost_peer(RuntimeError("Timed out waiting 20000ms for recv operation to complete"))
    assert not failure.lost_peer(ValueError("shape mismatch"))


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_frozen_rank_ends_the_job_after_the_timeout_naming_it(mpirun):
    # without the watchdog this waits for ever (the launcher's timeout would raise here)
    res = mpirun(3, [sys.executable, "-c", SCRIPT, "2"], timeout=150, env={"HPCGNN_TIMEOUT": "5"})
    assert res.returncode != 0
    first = next(ln for ln in res.stderr.splitlines() if ln.startswith("hpcgnn:"))
    assert first.startswith("hpcgnn: rank 2 (trainer, node 0, host ") and "whose process is stopped" in first, \
        res.stderr
    assert "did not answer within 5 s" in first and "HPCGNN_TIMEOUT=5" in first


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A 3000-node graph in 2 partitions (made in this process)."""
    d = tmp_path_factory.mktemp("watchdog")
    generate_graph(str(d / "g.h5"), None, 3000, 8, 8, 4, 0, name="g")
    return partition_graph(str(d / "g.h5"), str(d / "parts"), 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig,role", [(signal.SIGSTOP, "server"), (signal.SIGKILL, "server"),
                                      (signal.SIGKILL, "sampler")],
                         ids=["frozen-server", "killed-server", "killed-sampler"])
@pytest.mark.slow
def test_a_server_frozen_or_killed_mid_training_is_named_first(parts, tmp_path, sig, role):
    """Trainers read the servers' rows through shared memory and never wait on them:
    the trainers' per-step watch names a server gone, or stopped past HPCGNN_TIMEOUT,
    and they write a last checkpoint together.  A sampler killed while its
    trainer waits for a batch is found by the wait, and the trainer makes the batch
    itself.  (Per-rank stderr files: see :func:`_stderr_to_files`.)"""
    n, layout, victim = (4, "servers=1,samplers=0,trainers=1", 2) if role == "server" else \
        (6, "servers=1,samplers=1,trainers=1", 1)
    trainers = (1, 3) if role == "server" else (2, 5)
    ranks_out, run = tmp_path / "out", tmp_path / "run"
    ranks_out.mkdir()
    cmd = ["mpirun", "--oversubscribe", "-n", str(n), sys.executable, "-m", "hpcgnn", "train", "--part-config", parts,
           "--layout", layout, "--ranks-per-node", str(n // 2), "--epochs", "100000",
           "--run-dir", str(run), "--progress", "off", "--eval-every", "0", "--timeout", "5"]
    # the server of node 1, the sampler of node 0, once training has started
    job, out = _kill_after_an_epoch(_stderr_to_files(cmd, ranks_out), str(run), victim, sig)
    assert job.returncode != 0 and '"kind": "final"' not in out
    errs = {r: (ranks_out / f"rank.{r}").read_text() for r in trainers if (ranks_out / f"rank.{r}").exists()}
    # each trainer's first line about a rank (after the start-up line) names the server
    firsts = [lines[0] for lines in map(_rank_lines, errs.values()) if lines]
    assert firsts, errs
    for first in firsts:
        assert f"rank {victim} ({role}, node {1 if role == 'server' else 0}, host " in first, errs
        if sig == signal.SIGSTOP:
            assert "whose process is stopped" in first and "has not run for 5 s (HPCGNN_TIMEOUT)" in first, errs
        else:
            assert "whose process is gone" in first, errs
    # the trainers saved what they held before ending (issue 39): --resume continues from it.
    # (A trainer whose sampler died made that sampler's batches itself until the step's check.)
    said = next((ln for e in errs.values() for ln in e.splitlines() if "checkpoint of step" in ln), errs)
    assert f"rank {victim} ({role}, " in said and "written: --resume continues from it" in said, errs
    saved = sorted((run / "checkpoints").glob("step-*.h5"))
    assert len(saved) == 1 and f"checkpoint of step {int(saved[0].stem.split('-')[1])} written" in said
    # written by both trainers together, as every periodic checkpoint is (whose --resume the
    # checkpoint tests prove): the step, both trainers' states, the model
    with h5py.File(saved[0], "r") as f:
        assert f.attrs["step"] == int(saved[0].stem.split("-")[1]) and "solo_of" not in f.attrs
        assert sorted(f["trainers"]) == ["0", "1"] and f["replicated"].size > 1000


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed-trainer", "frozen-trainer"])
@pytest.mark.slow
def test_a_trainer_killed_or_frozen_leaves_the_step_the_others_hold(parts, tmp_path, sig):
    """A trainer gone mid-training: the survivor's first line names it, and it writes
    the step it holds alone (no collective can include the dead trainer); --resume
    continues from it.  A frozen trainer, woken as the job ends, says it was stopped
    instead of calling the trainer that caught it gone.  (Per-rank output files:
    Open MPI may end the job before the merged output carried every line.)"""
    from conftest import clean_mpi_env

    ranks_out, run = tmp_path / "out", tmp_path / "run"
    ranks_out.mkdir()
    cmd = ["mpirun", "--oversubscribe", "-n", "4", sys.executable, "-m",
           "hpcgnn", "train", "--part-config", parts, "--layout", "servers=1,samplers=0,trainers=1",
           "--ranks-per-node", "2", "--epochs", "100000", "--run-dir", str(run), "--progress", "off",
           "--eval-every", "0", "--timeout", "5"]
    job, out = _kill_after_an_epoch(_stderr_to_files(cmd, ranks_out), str(run), 3, sig)  # the trainer of node 1
    assert job.returncode != 0 and '"kind": "final"' not in out
    err = (ranks_out / "rank.1").read_text()
    lines = [ln for ln in err.splitlines() if ln.startswith("hpcgnn: rank")]
    state = "whose process is gone" if sig == signal.SIGKILL else "whose process is stopped"
    assert lines and lines[0].startswith("hpcgnn: rank 3 (trainer, node 1, host ") and state in lines[0], err
    said = next((ln for ln in lines if "wrote the checkpoint of step" in ln), err)
    assert said.startswith("hpcgnn: rank 1 (trainer, node 0, host ") and "--resume continues from it" in said
    saved = sorted((run / "checkpoints").glob("step-*.h5"))
    assert len(saved) == 1 and f"checkpoint of step {int(saved[0].stem.split('-')[1])} alone" in said
    if sig == signal.SIGSTOP:          # woken by the launcher: no line blames rank 1, which caught it
        woke = (ranks_out / "rank.3").read_text()
        assert "rank 1 (trainer, node 0" not in woke and "whose process is gone" not in woke, woke
        return
    res = subprocess.run(cmd[:cmd.index("--epochs") + 1] + ["2"] + cmd[cmd.index("--epochs") + 2:]
                         + ["--resume"], env=clean_mpi_env(), capture_output=True, text=True, timeout=200)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"{saved[0].name} was written by rank 1 (trainer, node 0, host " in res.stderr + res.stdout
    assert "resumed from" in res.stdout and '"kind": "final"' in res.stdout


def _rank_lines(text: str) -> list:
    """The lines of ``text`` in which hpcgnn speaks of a rank."""
    return [ln for ln in text.splitlines() if ln.startswith("hpcgnn") and "rank " in ln]


def _stderr_to_files(cmd, where):
    """``cmd`` (an mpirun line) with each rank writing its stderr itself, to
    ``where/rank.N``.  Open MPI's forwarding (``--output-filename`` included) can
    drop the last lines of ranks it kills while tearing a job down: its launcher
    sleeps through the kill sequence without reading them, and once they are dead
    it may end before it has (1 of 3 runs here lost a trainer's line)."""
    i = cmd.index(sys.executable)
    return cmd[:i] + ["sh", "-c", f'exec "$@" 2>"{where}/rank.$OMPI_COMM_WORLD_RANK"', "sh"] + cmd[i:]


def _kill_after_an_epoch(cmd, tag: str, victim: int, sig, wait_s: float = 0.0):
    """Run ``cmd``; once its first epoch line is out (and ``wait_s`` later) send ``sig``
    to world rank ``victim`` (found by ``tag`` in its command line).  ``(job, output)``."""
    from conftest import clean_mpi_env

    job = subprocess.Popen(cmd, env=clean_mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in job.stdout:
            lines.append(line)
            if '"kind": "epoch"' in line:
                break
        time.sleep(wait_s)
        os.kill(_world_ranks(tag)[victim], sig)
        out, _ = job.communicate(timeout=200)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    return job, "".join(lines) + out


def _world_ranks(tag: str) -> dict:
    """World rank -> pid of the launched processes whose command line holds ``tag``."""
    ranks = {}
    for pid in subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split():
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(kv.split(b"=")[1])] = int(pid)
    return ranks


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_rank_killed_while_partitioning_is_named(tmp_path):
    """A rank of ``hpcgnn partition`` killed mid-run: the survivor's first line names
    it, by its command (only Open MPI's line, with no role, said so before), even
    when the launcher's SIGTERM reaches the survivor before its watchdog's next look."""
    from conftest import clean_mpi_env

    raw = str(tmp_path / "g.h5")
    generate_graph(raw, None, 100000, 10, 4, 4, 0)
    out = tmp_path / "parts"
    job = subprocess.Popen(["mpirun", "--oversubscribe", "-n", "2", sys.executable, "-m", "hpcgnn", "partition", raw,
                            "-o", str(out), "-k", "2"], env=clean_mpi_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(1200):                          # the partitioning has begun: its output folder exists
            if out.exists():
                break
            time.sleep(0.05)
        ranks = _world_ranks(raw)
        os.kill(ranks[1], signal.SIGKILL)
        for _ in range(1200):                          # reaped by the launcher, which then sends SIGTERM
            if not os.path.exists(f"/proc/{ranks[1]}"):
                break
            time.sleep(0.005)
        os.kill(ranks[0], signal.SIGTERM)              # ... sent here at once, as the fastest launcher would
        text, _ = job.communicate(timeout=200)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode != 0
    first = next((ln for ln in text.splitlines() if ln.startswith("hpcgnn")), text[-3000:])
    assert first.startswith("hpcgnn: rank 1 (hpcgnn partition, host ") and "whose process is gone" in first, text
    assert "(rank 0 (hpcgnn partition, host " in first and "was in hpcgnn partition" in first


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_server_killed_during_the_final_inference_is_named(parts, tmp_path):
    """Layer-wise inference reads rows through shared memory and never waits on the
    servers: it watches them as the training steps do, and a trainer done with its
    share of a layer names them from the layer's barrier.  (Each rank writes its own
    stderr: Open MPI's forwarding can lose the lines of ranks it kills.)"""
    ranks_out = tmp_path / "out"
    ranks_out.mkdir()
    # once a rank is gone, mpirun sends SIGCONT, SIGTERM and SIGKILL odls_base_sigkill_timeout
    # apart (1 s by default; the job then ends 2 x that after the kill): 3 s leaves a loaded
    # machine's trainers the time to see the server gone (a trainer waiting on the other one sees it
    # at SIGTERM), as 10 s did (here 5 of 5 runs named it from both trainers, in 10-13 s against 24)
    cmd = ["mpirun", "--oversubscribe", "--mca", "odls_base_sigkill_timeout", "3",
           "-n", "4", sys.executable, "-m", "hpcgnn", "train", "--part-config", parts,
           "--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2", "--epochs", "1",
           "--epoch-steps", "2", "--infer-batch-size", "1", "--run-dir", str(tmp_path / "run"), "--progress", "off",
           "--eval-every", "0"]
    # training is over: inference runs (3000 batches of 1 node per layer)
    job, out = _kill_after_an_epoch(_stderr_to_files(cmd, ranks_out), str(tmp_path / "run"), 2, signal.SIGKILL,
                                    wait_s=1.0)
    assert job.returncode != 0 and '"kind": "final"' not in out
    for r in (1, 3):    # both trainers name the server, from a batch or a collective (a layer's barrier)
        err = (ranks_out / f"rank.{r}").read_text()
        first = next((ln for ln in err.splitlines() if ln.startswith("hpcgnn")), err[-3000:])
        assert first.startswith("hpcgnn: rank 2 (server, node 1, host ") and "whose process is gone" in first, err
        me = f"(rank {r} (trainer, node {r // 2}, host "
        assert f"layer-wise inference stops in layer 0 {me}" in first or f"{me}" in first and \
            ") was waiting for the other ranks " in first, first


def test_a_link_slower_than_its_first_epoch_is_reported_once():
    from hpcgnn.comm.rma import readstats

    w = readstats.LinkWatch()
    fast = {"a -> b": {"mb": 50.0, "mb_per_s": 100.0, "slowest_s": 0.01, "reads": 30}}
    assert w.check(0, fast) == [] and w.check(1, fast) == []
    slow = {"a -> b": {"mb": 50.0, "mb_per_s": 20.0, "slowest_s": 0.4, "reads": 30}}
    (line,) = w.check(2, slow)
    assert "reads over a -> b ran at 20 MB/s in epoch 2, 5x slower than in epoch 0 (100 MB/s" in line
    assert w.check(3, slow) == []                                  # once per link
    few = {"c -> d": {"mb": 0.01, "mb_per_s": 0.1, "slowest_s": 0.1, "reads": 3}}
    assert w.check(0, few) == [] and w.check(1, few) == []         # too few reads to judge


@pytest.mark.timeout(60)
def test_a_wait_that_does_without_a_gone_rank_is_not_ended_for_it(monkeypatch):
    """A trainer waiting for a batch from its sampler finds a dead sampler itself and
    makes the batch (``gone_ok``): the watchdog must not end the job first (it raced
    the wait's own check under load); an ordinary wait on that rank is ended."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = os.uname().nodename
    monkeypatch.setattr(peers, "TABLE", {0: ("trainer", 0, host, os.getpid()), 1: ("sampler", 0, host, dead.pid),
                                         2: ("trainer", 0, host, os.getpid())})
    ended = []
    monkeypatch.setattr(watchdog, "_end_job", lambda *args, **kw: ended.append((args, kw)))
    assert peers.state(1) == "gone"
    with watchdog.waiting("a batch from sampler rank 1", (1,), gone_ok=True):
        time.sleep(4 * watchdog.TICK_S)
    assert ended == []
    with watchdog.waiting("a batch from sampler rank 1", (1,)):
        for _ in range(100):
            if ended:
                break
            time.sleep(watchdog.TICK_S / 4)
    assert ended and "rank 1 (sampler, node 0" in ended[0][1]["line"], ended


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "0", "inf"])
def test_a_bad_finish_timeout_is_named(monkeypatch, value):
    from hpcgnn.comm import failure

    monkeypatch.setenv("HPCGNN_FINISH_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"HPCGNN_FINISH_TIMEOUT='{value}': expected a positive number of seconds"):
        failure.finish_timeout_s()


def test_the_finish_timeout_falls_back_to_hpcgnn_timeout(monkeypatch):
    from hpcgnn.comm import failure

    monkeypatch.delenv("HPCGNN_FINISH_TIMEOUT", raising=False)
    monkeypatch.delenv("HPCGNN_TIMEOUT", raising=False)
    assert failure.finish_timeout_s() == failure.FINISH_TIMEOUT_S
    monkeypatch.setenv("HPCGNN_TIMEOUT", "42")
    assert failure.finish_timeout_s() == 42.0
    monkeypatch.setenv("HPCGNN_FINISH_TIMEOUT", "7.5")
    assert failure.finish_timeout_s() == 7.5
