"""Multi-host behaviour on real isolated hosts: a test bed of Linux namespaces
(tests/hosts.py, docs/testbed.md), each host with its own hostname, network address,
/dev/shm and /tmp, and ``mpirun`` starting an ``orted`` in each through Open MPI's rsh
launcher.  Unlike the rest of the suite (virtual nodes on one host), ranks here group
into nodes by their real host name (no ``--ranks-per-node``), cross hosts over TCP
only, and the network between them can fail.

Needs root, ``ip`` (iproute2), ``nsenter``/``unshare`` (util-linux); skipped with the
reason elsewhere.  Run alone: ``python -m pytest tests/e2e/test_multihost.py``.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

import hosts as testbed

pytestmark = pytest.mark.slow
PY = sys.executable
CO_LOCATED = "servers=1,samplers=0,trainers=1"
# a batch depends only on the settings, so every layout and every placement trains bitwise the
# same model
COMMON = ["--epochs", "2", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3", "--progress", "off",
          "--feature-rows", "refs", "--cache-bytes", "100000", "--seed", "3"]
# Open MPI notices a host it can no longer reach through TCP keepalive on its
# out-of-band connections: 5 s idle + 3 probes 2 s apart (defaults: 300 s + 9 x 20 s).
# It must notice before HPCGNN_TIMEOUT: once a rank has ended the job, mpirun waits for
# the unreachable host's orted to confirm (the keepalive no longer runs while that
# message is unacknowledged), up to Linux's TCP retransmission limit (~15 min).
KEEPALIVE = (("oob_tcp_keepalive_time", "5"), ("oob_tcp_keepalive_intvl", "2"), ("oob_tcp_keepalive_probes", "3"))


bed = testbed.fixture(3)      # 3 hosts (the separate-mode test uses them all), built once


def _ok(res):
    assert res.returncode == 0, f"exit {res.returncode}\n--- stdout\n{res.stdout[-4000:]}\n--- stderr\n{res.stderr[-4000:]}"
    return res


def _reports(stdout, tag="report "):
    """The JSON objects printed after ``tag`` (two ranks' lines may share a line)."""
    dec, out, i = json.JSONDecoder(), [], 0
    while (i := stdout.find(tag, i)) >= 0:
        obj, end = dec.raw_decode(stdout, i + len(tag))
        out.append(obj)
        i = end
    return out


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


def _train(bed, cfg, run_dir, *extra, hosts=(0, 1), layout=CO_LOCATED, env=None, timeout=170):
    argv = [PY, "-m", "hpcgnn", "train", "--part-config", cfg, "--run-dir", run_dir, "--layout", layout,
            *COMMON, *extra]
    return bed.mpirun(argv, per_host=2, hosts=list(hosts), env=env, timeout=timeout)


@pytest.fixture(scope="module")
def graph(bed):
    """A 3000-node graph generated and partitioned (2 parts, ParMETIS) by a job of one
    rank on each of two hosts, into the shared directory: parallel HDF5 from two hosts."""
    d = bed.shared
    generate = ["generate", f"{d}/g.h5", "--num-nodes", "3000", "--avg-degree", "8", "--feat-dim", "8",
                "--num-classes", "4", "--seed", "5", "--name", "g"]
    partition = ["partition", f"{d}/g.h5", "-o", f"{d}/parts", "-k", "2"]
    # both commands in one job (hpcgnn's CLI as a library: one launch instead of two)
    both = f"import sys; from hpcgnn.cli.main import main; sys.exit(main({generate!r}) or main({partition!r}))"
    res = _ok(bed.mpirun([PY, "-c", both], hosts=[0, 1]))
    return f"{d}/parts/g.json", res.stdout


@pytest.fixture(scope="module")
def resumed(bed, graph):
    """Co-located training across two hosts, cut at step 20 (a checkpoint) and resumed
    by a second job whose data link to host 1 has 50 ms of delay: a job requeued onto a
    slow network.  Its model is the reference of the separate-mode test."""
    cfg, _ = graph
    run = f"{bed.shared}/resume"
    cut = _ok(_train(bed, cfg, run, "--checkpoint-every", "10", "--max-steps", "20"))
    how = bed.delay(1, 50)
    try:
        t0 = time.monotonic()
        back = _train(bed, cfg, run, "--resume", env={"HPCGNN_TIMEOUT": "20"}, timeout=240)
        took = time.monotonic() - t0
    finally:
        bed.undelay(1)
    return SimpleNamespace(cut=cut, back=back, run=run, delay=how, took=took)


# --------------------------------------------------------------------------- the bed itself

#: one job of two ranks on each of the 3 hosts: first what MPI sees (mpi4py alone), then
#: hpcgnn's roles by host name and a table read and written across hosts
BED_JOB = r"""
import json, os, socket
import numpy as np
import hpcgnn.comm                  # first: it sets MPI's thread level
from hpcgnn.comm.mpi import MPI
from hpcgnn.comm.progress import serve_until
from hpcgnn.comm.rma.rowstore import RowStore

c = MPI.COMM_WORLD
probe = "/dev/shm/hpcgnn-multihost-probe"
if c.Get_rank() == 0:
    open(probe, "w").close()
c.Barrier()
node = c.Split_type(MPI.COMM_TYPE_SHARED)
rep = dict(rank=c.Get_rank(), host=socket.gethostname(), processor=MPI.Get_processor_name(),
           sees_probe=os.path.exists(probe), node_size=node.Get_size(), tmp=sorted(os.listdir("/tmp")),
           addr=socket.gethostbyname(socket.gethostname()), sum=c.allreduce(c.Get_rank()))
c.Barrier()
if c.Get_rank() == 0:
    os.unlink(probe)
print("smoke " + json.dumps(rep), flush=True)

ctx = hpcgnn.comm.initialize(layout="servers=1,samplers=0,trainers=1")     # nodes: real hosts
N, D = 4000, 8
st = RowStore.create(ctx, "feat", [0, 1500, 3000, N], (D,), np.float32)   # owners: the servers
full = np.arange(N * D, dtype=np.float32).reshape(N, D)
lo, hi = st.local_range
st.local_rows[:] = full[lo:hi]
st.barrier()
rep = dict(rank=ctx.rank, role=ctx.role, node=ctx.host_id, host=socket.gethostname(),
           shm=sorted(os.listdir("/dev/shm")))
if ctx.is_trainer:
    tc = ctx.trainer_comm
    ids = np.random.default_rng(ctx.rank).integers(0, N, 5000)
    rep["gather"] = bool(np.array_equal(st.gather(ids), full[ids]))
    rep["routes"] = {str(k): v for k, v in st.routes().items()}
    tc.Barrier()
    mine = np.arange(tc.Get_rank(), N, tc.Get_size())
    st.scatter(mine, -full[mine])
    tc.Barrier()
    st.accumulate(np.arange(N), np.ones((N, D), np.float32))
    tc.Barrier()
    rep["writes"] = bool(np.array_equal(st.gather(np.arange(N)), -full + tc.Get_size()))
done = ctx.world.Ibarrier()
if ctx.is_trainer:
    done.Wait()
else:
    serve_until(done)
print("report " + json.dumps(rep), flush=True)
ctx.finalize()
"""


@pytest.fixture(scope="module")
def bed_job(bed):
    return _ok(bed.mpirun([PY, "-c", BED_JOB], per_host=2, timeout=120))


@pytest.mark.timeout(300, method="signal")
def test_hosts_have_their_own_name_address_shm_and_tmp(bed, bed_job):
    """Two ranks on each of 3 hosts: 3 host names, MPI sees 3 nodes, a file in host
    0's /dev/shm is not in the others' (nor in the machine's), each /tmp holds only
    its own Open MPI session directory."""
    reps = sorted(_reports(bed_job.stdout, "smoke "), key=lambda r: r["rank"])
    hosts = [h.name for h in bed.hosts for _ in range(2)]
    assert [r["host"] for r in reps] == hosts, bed_job.stdout
    assert [r["processor"] for r in reps] == hosts
    assert [r["addr"] for r in reps] == [h.data_addr for h in bed.hosts for _ in range(2)]  # private /etc/hosts
    assert [r["sees_probe"] for r in reps] == [True, True, False, False, False, False]  # /dev/shm is per host
    assert all(r["node_size"] == 2 for r in reps)                       # MPI's nodes are the hosts
    assert all(r["sum"] == 15 for r in reps)
    for r in reps:      # Open MPI's session directory is in the host's own /tmp, and only its own
        assert [t for t in r["tmp"] if t.startswith("ompi.")] == [f"ompi.{r['host']}.0"], r
    assert not os.path.exists("/dev/shm/hpcgnn-multihost-probe")        # nor in the machine's


@pytest.mark.timeout(300, method="signal")
def test_roles_by_hostname_and_one_sided_reads_across_hosts(bed_job):
    """Nodes are the real hosts (no ranks_per_node); a table owned by the servers is
    read in place on the own host ('direct') and by TCP one-sided reads from the
    others ('rma'), written with Put and Accumulate across hosts."""
    reps = {r["rank"]: r for r in _reports(bed_job.stdout)}
    assert sorted(reps) == list(range(6)), bed_job.stdout
    assert [(reps[r]["role"], reps[r]["node"], reps[r]["host"]) for r in range(6)] == [
        (role, h, f"hpcgnn-h{h}") for h in range(3) for role in ("server", "trainer")]
    assert reps[1]["routes"] == {"0": "direct", "2": "rma", "4": "rma"}
    assert reps[3]["routes"] == {"0": "rma", "2": "direct", "4": "rma"}
    assert all(reps[r]["gather"] and reps[r]["writes"] for r in (1, 3, 5)), reps
    # each host's shared-memory segments are its own (named by its host, in its /dev/shm)
    for r in range(6):
        assert reps[r]["shm"] and all(reps[r]["host"] in f for f in reps[r]["shm"] if "vader" in f), reps[r]
    assert not set(reps[0]["shm"]) & set(reps[2]["shm"]) and not set(reps[2]["shm"]) & set(reps[4]["shm"])


# --------------------------------------------------------------------------- hpcgnn across hosts

@pytest.mark.timeout(300, method="signal")
def test_generate_and_partition_across_hosts(graph):
    cfg, out = graph
    with open(cfg) as f:
        meta = json.load(f)
    assert "3000 nodes" in out and "into 2 parts" in out and meta["num_nodes"] == 3000, (out, meta)


@pytest.mark.timeout(480, method="signal")
def test_checkpoint_and_resume_across_hosts(resumed):
    """Two hosts of [server, trainer], nodes by host name: the run stops at step 20
    with a checkpoint, and a second job resumes it there and finishes."""
    cut, back, run = resumed.cut, _ok(resumed.back), resumed.run
    assert "stopped at step 20 (max_steps=20)" in cut.stdout, cut.stdout
    assert "step-20.h5" in os.listdir(f"{run}/checkpoints")
    assert "2 trainer(s)" in back.stdout and "resumed from" in back.stdout and "at step 20" in back.stdout
    acc = _final(back.stdout)["test_acc"]
    assert acc > 0.5, back.stdout                    # 4 classes; ~0.61 after 2 epochs
    assert back.stdout.strip().splitlines()[-1] == f"test accuracy: {acc:.4f}"
    with open(f"{run}/log.jsonl") as f:
        assert [json.loads(ln)["epoch"] for ln in f if '"kind": "epoch"' in ln] == [0, 1]


def _epochs(stdout):
    return [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "epoch"')]


@pytest.mark.timeout(480, method="signal")
def test_50ms_delay_on_one_link_the_job_goes_on(resumed):
    """The resumed job ran with 50 ms more on every data frame towards host 1 (tc
    netem, or the bed's user-space delay line where the kernel has no netem): it
    finished, no watchdog fired (HPCGNN_TIMEOUT=20), and its steps were slower."""
    back = _ok(resumed.back)
    assert "hpcgnn: " not in back.stderr, back.stderr[-3000:]
    before, after = _epochs(resumed.cut.stdout), _epochs(back.stdout)
    assert [e["epoch"] for e in before] == [0] and [e["epoch"] for e in after] == [1], back.stdout
    # epoch 1 ran its last 10 steps under the delay, epoch 0 all 15 without
    print(f"delay by {resumed.delay}: resumed job {resumed.took:.1f} s; epoch 0 {before[0]['epoch_s']:.2f} s "
          f"(no delay), epoch 1 {after[0]['epoch_s']:.2f} s (10 steps delayed)")
    assert after[0]["epoch_s"] > before[0]["epoch_s"] + 0.5, (before, after)


def _same_model(a, b):
    import torch

    ma, mb = torch.load(a), torch.load(b)
    return ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


@pytest.mark.timeout(480, method="signal")
def test_separate_mode_across_three_hosts(bed, graph, resumed):
    """Server-client layout on real hosts: hosts 0 and 1 hold [server, sampler], host 2
    both trainers, which get every batch over TCP; bitwise the model trained co-located
    (and cut and resumed), so the same accuracy.  The same script, no code change: the
    co-located trainers read their feature rows in place (``--feature-rows refs``), the
    sampler ranks send copies, and the cache (on trainers, on sampler ranks) reports
    its hits in both."""
    cfg, _ = graph
    run = f"{bed.shared}/separate"
    res = _ok(_train(bed, cfg, run, hosts=(0, 1, 2), layout="server_nodes=2,servers=1,samplers=1,trainers=2",
                     timeout=240))
    assert "loader mode samplers" in res.stdout and "2 trainer(s)" in res.stdout
    assert "features copy" in res.stdout and "features refs" in resumed.cut.stdout, resumed.cut.stdout
    assert _same_model(f"{run}/model.pt", f"{resumed.run}/model.pt")
    assert _final(res.stdout)["test_acc"] == _final(resumed.back.stdout)["test_acc"]
    for rows in (_epochs(res.stdout), _epochs(resumed.cut.stdout) + _epochs(resumed.back.stdout)):
        assert len(rows) == 2 and all(0 < r["cache_hit_rate"] <= 1 for r in rows), rows


# --------------------------------------------------------------------------- network faults

class _Job:
    """An mpirun whose output lines are collected, with their times, as they come."""

    def __init__(self, bed, argv, **kw):
        self.bed = bed
        self.p = bed.popen(argv, **kw)
        self.lines = []              # (monotonic time, stream, line)
        self._threads = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                         for s, n in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for t in self._threads:
            t.start()

    def _read(self, stream, name):
        for line in stream:
            self.lines.append((time.monotonic(), name, line.rstrip("\n")))

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, _, line in list(self.lines):
                if re.search(pattern, line):
                    return t
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        return None

    def text(self, stream=None):
        return "\n".join(line for _, s, line in list(self.lines) if stream in (None, s))


def _pull_cable(bed, graph, net, mca, bound=60, timeout_s=20):
    """Train across hosts 0 and 1 (HPCGNN_TIMEOUT ``timeout_s``), pull host 1's cable on ``net``
    during epoch 1, and wait up to ``bound`` seconds for the job to end.  Returns
    (seconds from the fault to the end or None, exit code, the lines after the fault)."""
    cfg, _ = graph
    argv = [PY, "-m", "hpcgnn", "train", "--part-config", cfg, "--run-dir", f"{bed.shared}/cable-{net}",
            "--layout", CO_LOCATED, *COMMON[2:], "--epochs", "100000", "--eval-every", "0"]
    job = _Job(bed, argv, per_host=2, hosts=[0, 1], env={"HPCGNN_TIMEOUT": str(timeout_s)}, mca=mca)
    try:
        started = job.wait_for(r'^\{"kind": "epoch", "epoch": 0', 150)
        assert started, f"training did not start\n{job.text()[-4000:]}"
        time.sleep(0.1)                                    # inside epoch 1
        bed.link_down(1, net)
        down = time.monotonic()
        try:
            job.p.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            pass
        ended = time.monotonic() - down if job.p.poll() is not None else None
    finally:
        bed.link_up(1)
        bed.stop(job.p)
        for t in job._threads:
            t.join(5)
    lines = [(t - down, ln) for t, _, ln in list(job.lines) if t >= down and ln.strip() and "[c10d]" not in ln]
    after = [ln for _, ln in lines]
    print(f"{net} link down: job ended after {ended} s, exit {job.p.returncode}; lines after the fault:\n"
          + "\n".join(f"{t:6.1f} s  {ln}" for t, ln in lines[:30]))
    return ended, job.p.returncode, after


@pytest.mark.timeout(400, method="signal")
def test_100ms_delay_on_one_link_is_reported_within_an_epoch(bed, graph):
    """Host 1's data link gets 100 ms of delay once epoch 0 is over: by the end of the
    first epoch that runs under it, one warning per slowed link (host pair) against its
    epoch 0 rate is logged, and every epoch row carries the per-link read rates (issue
    39).  Three epochs: on a busy machine epoch 1's five steps can end before the delay
    is in place (CI once saw epoch 1's slowest read at 6 ms); epoch 2 then runs under it."""
    cfg, _ = graph
    argv = [PY, "-m", "hpcgnn", "train", "--part-config", cfg, "--run-dir", f"{bed.shared}/slowlink",
            "--layout", CO_LOCATED, *COMMON[2:], "--epochs", "3", "--eval-every", "0",
            "--epoch-steps", "5"]      # 5 steps of 100 ms round trips make the point (15 took ~20 s)
    job = _Job(bed, argv, per_host=2, hosts=[0, 1], env={"HPCGNN_TIMEOUT": "60"})
    try:
        assert job.wait_for(r'^\{"kind": "epoch", "epoch": 0', 150), job.text()[-4000:]
        bed.delay(1, 100)
        try:
            job.p.wait(timeout=300)
        finally:
            bed.undelay(1)
    finally:
        bed.stop(job.p)
        for t in job._threads:
            t.join(5)
    assert job.p.returncode == 0, job.text()[-4000:]
    rows = [json.loads(ln) for ln in job.text("out").splitlines() if ln.startswith('{"kind": "epoch"')]
    assert len(rows) == 3 and all(r["remote_reads"] and r["slowest_read_s"] > 0 for r in rows), rows
    # a round trip to or from host 1 crosses its delayed link: one line per slowed link, each once
    warned = [ln for ln in job.text("err").splitlines() if "slower than in epoch 0" in ln]
    assert 1 <= len(warned) <= 2 and len(set(warned)) == len(warned), job.text("err")[-3000:]
    assert all(bed[1].name in ln and ln.startswith("hpcgnn: reads over ") for ln in warned), warned
    assert max(r["slowest_read_s"] for r in rows[1:]) >= 0.1, rows[1:]


@pytest.mark.timeout(400, method="signal")
def test_data_link_down_mid_epoch_the_watchdog_ends_the_job(bed, graph):
    """Host 1's data cable pulled during an epoch (MPI and torch.distributed traffic
    stop; mpirun still reaches every orted over the management network): hpcgnn ends
    the job within the bound (HPCGNN_TIMEOUT=5 bounds its waits), with a line naming
    a rank and its host."""
    ended, rc, after = _pull_cable(bed, graph, "data", mca=(), timeout_s=5)
    named = [ln for ln in after if ln.startswith("hpcgnn: ")]
    if ended is None and not named:
        pytest.xfail("watchdog not yet implemented: no hpcgnn line and the job still ran 60 s after host 1's "
                     "data link went down")
    assert ended is not None, f"hpcgnn named the fault but the job did not end within 60 s: {named}"
    assert rc != 0
    # Which line comes first depends on which wait times out first: the watchdog's
    # (host 0's ranks name the rank on host 1 that did not answer, host 1's say the one
    # they wait for is on another host) or torch.distributed's (a trainer names itself
    # and says another rank cannot be reached).  Each names a rank and its host.
    assert named and all(re.match(r"hpcgnn: rank \d+", ln) for ln in named), after
    assert any(re.search(rf"host ({bed[0].name}|{bed[1].name})\b", ln) for ln in named), named


@pytest.mark.timeout(400, method="signal")
def test_host_unreachable_mid_epoch_the_launcher_ends_the_job(bed, graph):
    """Both of host 1's cables pulled during an epoch: mpirun loses its orted there,
    notices it through TCP keepalive (KEEPALIVE) before hpcgnn's watchdog would fire,
    and ends the job within the bound, naming the lost host (by the address it was
    given, as hpcgnn does not get to say anything)."""
    ended, rc, after = _pull_cable(bed, graph, "all", mca=KEEPALIVE)
    text = "\n".join(after)
    if ended is None:
        pytest.xfail(f"Open MPI did not notice the lost host: the job still ran 60 s after host 1 became "
                     f"unreachable; lines after the fault: {after[:6]}")
    assert rc != 0
    assert "lost communication with a remote daemon" in text and f"on node {bed[1].addr}" in text, text


@pytest.mark.timeout(400, method="signal")
def test_a_server_frozen_on_another_host_is_caught_and_the_step_saved(bed, graph):
    """Host 1's server frozen (SIGSTOP) during an epoch: host 0's trainer reads its rows
    over the network, host 1's trainer through shared memory.  The job ends naming the
    server (by the trainer of its host after HPCGNN_TIMEOUT stopped, or when its
    allreduce or a read waited that long: each counts from the freeze), and a trainer writes the step it
    holds, which --resume continues from (issue 39)."""
    cfg, _ = graph
    run = f"{bed.shared}/frozen-server"
    argv = [PY, "-m", "hpcgnn", "train", "--part-config", cfg, "--run-dir", run, "--layout", CO_LOCATED,
            *COMMON[2:], "--epochs", "100000", "--eval-every", "0"]
    job = _Job(bed, argv, per_host=2, hosts=[0, 1], env={"HPCGNN_TIMEOUT": "5"})
    try:
        assert job.wait_for(r'^\{"kind": "epoch", "epoch": 0', 150), job.text()[-4000:]
        server = _rank_pid(run, 2)                    # ranks 0, 1 on host 0; rank 2 is host 1's server
        os.kill(server, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            job.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pass
        ended = time.monotonic() - frozen if job.p.poll() is not None else None
    finally:
        try:
            os.kill(server, signal.SIGCONT)
        except (OSError, UnboundLocalError):
            pass
        bed.stop(job.p)
        for t in job._threads:
            t.join(5)
    named = [ln for ln in job.text("err").splitlines() if ln.startswith("hpcgnn: rank")]
    print(f"frozen server: the job ended {ended} s after the freeze (HPCGNN_TIMEOUT=5)\n" + "\n".join(named[:6]))
    assert ended is not None and job.p.returncode != 0, job.text()[-4000:]
    assert named and named[0].startswith(f"hpcgnn: rank 2 (server, node 1, host {bed[1].name})"), named
    # the bound: the watchdog's "5 s", or torch.distributed's timeout (set from HPCGNN_TIMEOUT) on the
    # host-mate trainer, whose allreduce waited on the trainer reading from the frozen server
    assert "5 s" in named[0] or "5000ms" in named[0], named
    assert any("checkpoint of step" in ln and "--resume continues from it" in ln for ln in named), named
    res = _train(bed, cfg, run, "--resume", "--epochs", "1")
    assert res.returncode == 0 and "resumed from" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def _rank_pid(run_dir: str, rank: int) -> int:
    """The pid of world rank ``rank`` of the job whose command line holds ``run_dir``
    (the bed's hosts share this host's process ids)."""
    for pid in subprocess.run(["pgrep", "-f", run_dir], capture_output=True, text=True).stdout.split():
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no rank {rank} of {run_dir} found")
