"""Stop requests: SIGUSR1 and SIGTERM are recorded while a rank works, and ignored
once its process is ending (a late one must not fail a finished job)."""
import os
import signal

from hpcgnn.comm import signals


def test_signals_are_recorded_then_ignored_at_exit():
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        signals.clear()
        signals.install()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.requested() and signals.received() == ["SIGUSR1"]
        signals._ignore_at_exit()      # what the exit hook does: the process now survives both
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.received() == ["SIGUSR1"]
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        signals.clear()
