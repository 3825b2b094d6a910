"""Ask the kernel for transparent huge pages under a window's rows.

Random row reads from a table of hundreds of MB miss the TLB on almost every row
with 4 KB pages; 2 MB pages make those misses rare (measured: a 10k-row gather from
an 800 MB table is ~25% slower from 4 KB-page memory than from the huge-page memory
an in-process tensor gets).  A window's memory comes from MPI, so nobody asks for
huge pages unless we do: ``madvise(MADV_HUGEPAGE)`` before the first touch.

Effective where the kernel allows it: private memory when
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` or ``always``;
node-shared memory (tmpfs) only when ``.../shmem_enabled`` is ``advise``,
``within_size``, ``always`` or ``force`` (often ``never``: ask the administrators).  Otherwise
the advice is ignored and nothing changes.  ``HPCGNN_HUGEPAGES=0`` turns it off.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

MADV_HUGEPAGE = 14
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_libc = None


def _disabled() -> bool:
    return os.environ.get("HPCGNN_HUGEPAGES", "1") == "0"


def advise(mem: np.ndarray) -> bool:
    """``madvise(MADV_HUGEPAGE)`` on the whole pages inside ``mem``'s buffer; True
    when the kernel accepted the advice (it may still use small pages)."""
    global _libc
    if _disabled() or mem.nbytes < (2 << 20):
        return False
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc.madvise.restype = ctypes.c_int
        lo = -(-mem.ctypes.data // _PAGE) * _PAGE
        hi = (mem.ctypes.data + mem.nbytes) // _PAGE * _PAGE
        return hi > lo and _libc.madvise(lo, hi - lo, MADV_HUGEPAGE) == 0
    except (OSError, AttributeError):      # no libc madvise (not Linux): nothing to do
        return False


def _setting(name: str) -> str:
    try:
        with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as fh:
            text = fh.read()
    except OSError:
        return "unknown"
    return text[text.index("[") + 1:text.index("]")] if "[" in text else text.strip()


def status() -> tuple[bool, str, str]:
    """For ``hpcgnn doctor``: (both kinds of window memory can get huge pages,
    what the kernel says, what to ask for)."""
    anon, shmem = _setting("enabled"), _setting("shmem_enabled")
    off = _disabled()
    ok = not off and anon in ("madvise", "always") and shmem in ("advise", "within_size", "always", "force")
    detail = f"transparent_hugepage enabled={anon}, shmem_enabled={shmem}" + (", HPCGNN_HUGEPAGES=0" if off else "")
    if off:
        fix = "unset HPCGNN_HUGEPAGES to let window memory use huge pages"
    elif anon not in ("madvise", "always"):
        fix = ("window memory uses 4 KB pages (row gathers ~25% slower on 10k-row batches); ask for "
               "/sys/kernel/mm/transparent_hugepage/enabled=madvise and shmem_enabled=advise (root) - optional")
    else:
        fix = ("row gathers from node-shared windows use 4 KB pages (~25% slower on 10k-row batches); "
               "ask for /sys/kernel/mm/transparent_hugepage/shmem_enabled=advise (root) - optional")
    return ok, detail, fix
