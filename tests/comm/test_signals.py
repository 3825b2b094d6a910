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
        signal.set_wakeup_fd(-1)        # install() gave the watchdog the wake-up descriptor


def test_the_process_hooks_have_off_switches(monkeypatch):
    """HPCGNN_SIGNALS=0 leaves a signal's action, HPCGNN_EXCEPTHOOK=0 Python's hooks,
    HPCGNN_PYG_TMPDIR=0 PyG's temporary files (docs/environment.md)."""
    import sys

    from hpcgnn import pyg_tmp
    from hpcgnn.comm import failure

    before = signal.getsignal(signal.SIGUSR2)
    monkeypatch.setenv("HPCGNN_SIGNALS", "0")
    signals.install((signal.SIGUSR2,))
    assert signal.getsignal(signal.SIGUSR2) is before

    def mine(*a):
        pass
    monkeypatch.setattr(failure, "_installed", False)
    monkeypatch.setattr(sys, "excepthook", mine)
    monkeypatch.setenv("HPCGNN_EXCEPTHOOK", "0")
    failure.install()
    assert sys.excepthook is mine and not failure._installed

    monkeypatch.setenv("HPCGNN_PYG_TMPDIR", "0")
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, pyg_tmp._ImportHook)])
    monkeypatch.delitem(sys.modules, pyg_tmp._TEMPLATE, raising=False)
    pyg_tmp.use_private_tmpdir()
    assert not any(isinstance(f, pyg_tmp._ImportHook) for f in sys.meta_path)
