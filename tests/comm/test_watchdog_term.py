"""The watchdog's answer, in a phase, to a peer gone and to the SIGTERM with which a
launcher (or ``scancel``) ends the job, in a plain process whose peer table is filled
by hand: no mpirun launch.  The main thread sleeps inside the phase, as it would sit
inside a long MPI call, or holds the GIL while it sleeps, as it does inside h5py's
collective calls (which wait for the other ranks without releasing it)."""
import signal
import subprocess
import sys
import time

import pytest

# rank 1 is a process that already ended ("gone") or this process itself ("alive")
PEERS = """
import ctypes, os, signal, socket, subprocess, sys, threading, time
import numpy as np
from hpcgnn.comm import peers, signals, watchdog
from hpcgnn.comm.mpi import MPI
MPI.COMM_WORLD.Get_rank()
ended = subprocess.Popen([sys.executable, "-c", "pass"])
ended.wait()
host = socket.gethostname()
peer = ended.pid if sys.argv[1] == "gone" else os.getpid()
"""
SCRIPT = PEERS + """
peers.TABLE.update({0: ("hpcgnn partition", "-", host, os.getpid()), 1: ("hpcgnn partition", "-", host, peer)})
with watchdog.watching("hpcgnn partition"):
    print("in the phase", flush=True)
    time.sleep(0.1)
    if sys.argv[3] == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(3):
        if sys.argv[2] == "gil":
            ctypes.PyDLL(None).sleep(20)     # PyDLL keeps the GIL through the call
        else:
            time.sleep(20)
print("the phase went on")
"""


def _run(peer: str, holds: str = "py", term: str = "term") -> subprocess.CompletedProcess:
    from conftest import clean_mpi_env

    env = clean_mpi_env({"HPCGNN_TIMEOUT": "600"})
    return subprocess.run([sys.executable, "-c", SCRIPT, peer, holds, term], env=env, capture_output=True,
                          text=True, timeout=120)


def _names_rank_1(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 1, done.stderr
    line = done.stderr.splitlines()[0]
    assert line.startswith("hpcgnn: rank 1 (hpcgnn partition, host ") and "whose process is gone" in line, line
    assert "(rank 0 (hpcgnn partition, host " in line and "was in hpcgnn partition); ending the job" in line
    assert len([ln for ln in done.stderr.splitlines() if ln.startswith("hpcgnn:")]) == 1, done.stderr
    assert "the phase went on" not in done.stdout


@pytest.mark.timeout(150)
@pytest.mark.parametrize("holds", ["py", "gil"])
def test_sigterm_in_a_phase_names_a_peer_already_gone(holds):
    """The launcher's SIGTERM wakes the watchdog at once: the gone peer is named, once."""
    _names_rank_1(_run("gone", holds))


@pytest.mark.timeout(150)
def test_a_peer_gone_is_named_while_the_main_thread_holds_the_gil():
    """No SIGTERM comes (srun may wait): the compiled thread's next look names the peer
    although the main thread never lets go of the GIL (Python's watchdog thread could
    not run: this went unnamed while h5py waited in a collective open)."""
    _names_rank_1(_run("gone", "gil", "quiet"))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("holds", ["py", "gil"])
def test_sigterm_in_a_phase_with_every_peer_alive_ends_as_its_default(holds):
    """``scancel``: no peer is gone, so the rank ends at once, with SIGTERM's status and no line."""
    done = _run("alive", holds)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "hpcgnn:" not in done.stderr and "the phase went on" not in done.stdout


def test_after_the_phase_sigterm_is_at_its_default_again():
    """The phase gives SIGTERM and the wake-up descriptor back, and a second phase arms again."""
    from hpcgnn.comm import watchdog

    for _ in range(2):
        with watchdog.watching("hpcgnn partition"):
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.set_wakeup_fd(-1) == -1


@pytest.mark.timeout(150)
def test_sigterm_after_a_suspend_with_every_peer_alive_ends_as_its_default():
    """``scontrol suspend`` (SIGSTOP), resume, then ``scancel``: no peer is gone, so the
    rank ends with SIGTERM's status and says nothing (not that it was stopped while the
    job ended: the job had not ended)."""
    from conftest import clean_mpi_env

    job = subprocess.Popen([sys.executable, "-c", SCRIPT, "alive", "py", "quiet"], env=clean_mpi_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "in the phase"
        job.send_signal(signal.SIGSTOP)
        time.sleep(6)                   # past STOPPED_S between two of the thread's looks
        job.send_signal(signal.SIGCONT)
        time.sleep(1)                   # a look after the gap
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 128 + signal.SIGTERM, err
    assert "hpcgnn:" not in err and "the phase went on" not in out


# a trainer at a collective whose other member (rank 0, this process) is alive but
# elsewhere, while a server of this host (rank 1) is gone or alive: the launcher's
# SIGTERM comes while the main thread is inside MPI, where Python runs no handler
WAIT = PEERS + """
peers.TABLE.update({0: ("trainer", 0, host, os.getpid()), 1: ("server", 1, host, peer)})
signals.install()
with watchdog.waiting("the other trainers at a barrier", among=(0,)):
    print("waiting", flush=True)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()     # once inside MPI
    if sys.argv[1] == "gone":
        MPI.COMM_SELF.Recv(np.zeros(1), source=0, tag=7)     # never sent: only the watchdog ends this
    time.sleep(3)
print("the wait went on", signals.received())
"""


@pytest.mark.timeout(150)
def test_sigterm_in_a_wait_names_a_gone_rank_of_this_host():
    """mpirun sends SIGTERM once a rank is gone (SIGKILL follows): a rank waiting for
    another that is alive (a trainer at a barrier while the other ends the job) names
    the gone rank instead of dying unnamed, even from inside an MPI call."""
    from conftest import clean_mpi_env

    done = subprocess.run([sys.executable, "-c", WAIT, "gone"], env=clean_mpi_env({"HPCGNN_TIMEOUT": "600"}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    line = done.stderr.splitlines()[0]
    assert line.startswith("hpcgnn: rank 1 (server, node 1, host ") and "whose process is gone" in line, line
    assert "(rank 0 (trainer, node 0, host " in line and "was waiting for the other trainers at a barrier); " \
        "ending the job" in line, line


@pytest.mark.timeout(150)
def test_sigterm_in_a_wait_with_every_rank_alive_is_a_stop_request():
    """``scancel``: nobody is gone, so SIGTERM is only recorded (the trainers stop at a step)."""
    from conftest import clean_mpi_env

    done = subprocess.run([sys.executable, "-c", WAIT, "alive"], env=clean_mpi_env({"HPCGNN_TIMEOUT": "600"}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "hpcgnn:" not in done.stderr, done.stderr
    assert "the wait went on ['SIGTERM']" in done.stdout
