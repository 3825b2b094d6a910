"""PyTorch Geometric's generated modules in a private directory, removed at exit.

PyG renders ``MessagePassing.propagate``/``edge_updater`` (and
``torch_geometric.nn.Sequential``'s ``forward``) from jinja templates into one ``.py``
file per layer class and imports it (``torch_geometric/template.py``:
``tempfile.NamedTemporaryFile(prefix=f"{module_name}_", suffix=".py", delete=False)``);
nothing removes them, so every run leaves files such as
``torch_geometric.nn.conv.sage_conv_SAGEConv_propagate_ab12cd34.py`` in the system
temporary directory.

:func:`use_private_tmpdir` (``hpcgnn.initialize`` calls it on trainer ranks) makes
that one call write into a directory of this process's own instead: made with
``mkdtemp`` (mode 0700) in the job's temporary directory (``tempfile.gettempdir()``:
``$TMPDIR``, else ``/tmp``) when PyG first writes a file, named
``hpcgnn-pyg-<host>-<pid>-`` plus mkdtemp's random suffix, and removed with its files when the process ends:
at exit, and when an uncaught exception ends the process through hpcgnn's failure
hook (which aborts the job without running exit handlers).  A process killed outright
(``SIGKILL``, the rest of a job torn down by ``MPI_Abort``) leaves its directory; the
next process on that host that makes one removes those of this user whose process is
gone.  Nothing else changes: PyG's files keep their names and contents and stay
there while the process lives (TorchScript and tracebacks read them); every other
use of ``tempfile`` in the process is untouched.

PyG is not imported for this (it takes seconds): when it is not loaded yet, an import
hook patches ``torch_geometric.template`` as it loads.
"""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
import threading

PREFIX = "hpcgnn-pyg-"
_TEMPLATE = "torch_geometric.template"
_lock = threading.Lock()
_dir: tuple[int, str] | None = None         # (pid that made it, path)
_hooks_installed = False


def _stem() -> str:
    host = socket.gethostname().replace(os.sep, "_") or "host"
    return f"{PREFIX}{host}-"


def private_dir(create: bool = True) -> str | None:
    """This process's directory for PyG's generated modules (made on first use)."""
    global _dir
    with _lock:
        if _dir is not None and _dir[0] == os.getpid() and os.path.isdir(_dir[1]):
            return _dir[1]
        if not create:
            return None
        base = tempfile.gettempdir()
        _sweep(base)
        path = tempfile.mkdtemp(prefix=f"{_stem()}{os.getpid()}-", dir=base)
        _dir = (os.getpid(), path)
        _install_exit_hooks()
        return path


def cleanup() -> None:
    """Remove this process's directory and its files (idempotent)."""
    global _dir
    with _lock:
        d, _dir = _dir, None
    if d is not None and d[0] == os.getpid():
        shutil.rmtree(d[1], ignore_errors=True)


def _sweep(base: str) -> None:
    """Remove directories left in ``base`` by processes of this user on this host that
    are gone (killed before their exit handlers ran)."""
    stem = _stem()
    try:
        names = [n for n in os.listdir(base) if n.startswith(stem)]
    except OSError:
        return
    for name in names:
        pid = name[len(stem):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid != os.getuid() or not os.path.isdir(path) or os.path.islink(path):
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:         # alive (another user's pid), or not ours to look at
            continue


def _install_exit_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(cleanup)
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        # the process ends after an uncaught exception (hpcgnn's hook aborts the job,
        # skipping exit handlers); an interactive session goes on: keep the files
        if not hasattr(sys, "ps1"):
            cleanup()
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    previous_thread = threading.excepthook
    if getattr(previous_thread, "__module__", "") == "hpcgnn.comm.failure":
        def thread_excepthook(args):
            if args.exc_type is not SystemExit:     # hpcgnn's hook aborts the job on it
                cleanup()
            previous_thread(args)

        threading.excepthook = thread_excepthook


class _Tempfile:
    """``tempfile`` as ``torch_geometric.template`` sees it: the same module, except that
    ``NamedTemporaryFile`` writes into :func:`private_dir` unless told a directory."""

    _hpcgnn = True

    def __getattr__(self, name):
        return getattr(tempfile, name)

    @staticmethod
    def NamedTemporaryFile(*args, **kwargs):
        if len(args) < 7 and kwargs.get("dir") is None:
            try:
                kwargs["dir"] = private_dir()
            except OSError:         # no private directory: PyG's default place, as before
                kwargs.pop("dir", None)
        return tempfile.NamedTemporaryFile(*args, **kwargs)


def _patch(module) -> bool:
    current = getattr(module, "tempfile", None)
    if getattr(current, "_hpcgnn", False):
        return True
    if current is not tempfile:     # a PyG that writes its modules some other way: leave it
        return False
    module.tempfile = _Tempfile()
    return True


class _PatchingLoader:
    """Wraps the loader of ``torch_geometric.template``: patch it once executed."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _patch(module)


class _ImportHook:
    """A meta path finder that only wraps the loader of ``torch_geometric.template``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TEMPLATE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None

    def invalidate_caches(self):
        pass


def use_private_tmpdir() -> None:
    """Send PyG's generated modules of this process to :func:`private_dir` (idempotent;
    cheap: imports nothing).  Call it before the first PyG layer is built.
    ``HPCGNN_PYG_TMPDIR=0``: PyG writes where it always does."""
    if os.environ.get("HPCGNN_PYG_TMPDIR", "1").strip() == "0":
        return
    module = sys.modules.get(_TEMPLATE)
    if module is not None:
        _patch(module)
        return
    if not any(isinstance(f, _ImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportHook())
