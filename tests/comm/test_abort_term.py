"""A rank ending the job (``failure.abort_job``) dies at the launcher's SIGTERM even
while its main thread waits in C, as it does in ``MPI_Abort``: hpcgnn's Python handler
(a stop request) would never run there, and the rank would linger until SIGKILL.  A
plain process each: the wait in C is a libc sleep, SIGTERM is sent by the process
itself where ``abort_job`` would call ``MPI_Abort``."""
import os
import signal
import subprocess
import sys

import pytest

SCRIPT = """
import ctypes, os, signal, sys, threading
from hpcgnn.comm import failure, signals
libc = ctypes.CDLL(None)
if sys.argv[1] == "user":        # HPCGNN_SIGNALS=0 and the user's own handler: left alone
    signal.signal(signal.SIGTERM, lambda *a: print("user handler", flush=True))
else:
    signals.install()            # hpcgnn's: SIGTERM is a stop request
real_exit = os._exit

def exit_later(code):            # where abort_job calls MPI_Abort: the launcher's SIGTERM comes
    os.kill(os.getpid(), signal.SIGTERM)
    libc.sleep(5)                # ... while the rank waits in C
    print("outlived SIGTERM", flush=True)
    real_exit(code)

os._exit = exit_later
args = (ValueError, ValueError("boom"), None)
if sys.argv[1] == "thread":      # a thread's uncaught exception; the main thread waits in C
    threading.Thread(target=failure.abort_job, args=args).start()
    libc.sleep(30)
    print("main thread outlived SIGTERM", flush=True)
    real_exit(3)
failure.abort_job(*args)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["main", "thread", "user"])
def test_sigterm_ends_a_rank_that_is_ending_the_job(where):
    env = dict(os.environ, HPCGNN_SIGNALS="0") if where == "user" else None
    res = subprocess.run([sys.executable, "-c", SCRIPT, where], capture_output=True, text=True, timeout=100,
                         env=env)
    assert "ValueError: boom" in res.stderr, res.stderr     # the failure line came first
    if where == "user":
        assert "user handler" in res.stdout and "outlived SIGTERM" in res.stdout, (res.stdout, res.stderr)
        assert res.returncode == 1, (res.returncode, res.stderr)
    else:
        assert "outlived" not in res.stdout, (res.stdout, res.stderr)
        assert res.returncode == -signal.SIGTERM, (res.returncode, res.stdout, res.stderr)
