"""The watchdog's answer to the SIGTERM with which a launcher (or ``scancel``) ends a
phase, in a plain process whose peer table is filled by hand: no mpirun launch."""
import signal
import subprocess
import sys

import pytest

# rank 1 is a process that already ended ("gone") or this process itself ("alive");
# the main thread sleeps inside the phase, as it would sit inside a long MPI call
SCRIPT = """
import os, signal, socket, subprocess, sys, time
from hpcgnn.comm import peers, watchdog
from hpcgnn.comm.mpi import MPI
MPI.COMM_WORLD.Get_rank()
ended = subprocess.Popen([sys.executable, "-c", "pass"])
ended.wait()
host = socket.gethostname()
peer = ended.pid if sys.argv[1] == "gone" else os.getpid()
peers.TABLE.update({0: ("hpcgnn partition", "-", host, os.getpid()), 1: ("hpcgnn partition", "-", host, peer)})
with watchdog.watching("hpcgnn partition"):
    time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
print("the phase went on")
"""


def _run(peer: str) -> subprocess.CompletedProcess:
    from conftest import clean_mpi_env

    env = clean_mpi_env({"HPCGNN_TIMEOUT": "600"})
    return subprocess.run([sys.executable, "-c", SCRIPT, peer], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.timeout(150)
def test_sigterm_in_a_phase_names_a_peer_already_gone():
    """The launcher's SIGTERM wakes the watchdog at once: the gone peer is named."""
    done = _run("gone")
    assert done.returncode == 1, done.stderr
    line = done.stderr.splitlines()[0]
    assert line.startswith("hpcgnn: rank 1 (hpcgnn partition, host ") and "whose process is gone" in line, line
    assert "(rank 0 (hpcgnn partition, host " in line and "was in hpcgnn partition); ending the job" in line
    assert "the phase went on" not in done.stdout


@pytest.mark.timeout(150)
def test_sigterm_in_a_phase_with_every_peer_alive_ends_as_its_default():
    """``scancel``: no peer is gone, so the rank ends at once, with SIGTERM's status and no line."""
    done = _run("alive")
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "hpcgnn:" not in done.stderr and "the phase went on" not in done.stdout
