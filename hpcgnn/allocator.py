"""Keep freed memory in the process between training steps (glibc malloc).

Every step allocates the same few large tensors (a batch's features, each layer's
activations and their gradients: megabytes each) and frees them again.  By default
glibc hands such blocks back to the kernel (``munmap``, or trimming the heap top),
so the next step takes page faults and has the kernel zero the pages again: about
a sixth of a CPU step of the README's model was spent so.  :func:`keep_freed_memory`
asks malloc to serve blocks up to 32 MiB from its heap and never to trim it, so a
step reuses the previous step's pages.  The cost: the process keeps its peak heap
(what a training loop reaches every step anyway).  ``HPCGNN_KEEP_FREED_MEMORY=0``
turns it off.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20        # glibc's largest accepted value on 64-bit systems
TOP_PAD = 64 << 20

_done = None


def keep_freed_memory() -> bool:
    """Idempotent; True when glibc accepted the settings (False elsewhere: another
    libc or allocator, or ``HPCGNN_KEEP_FREED_MEMORY=0``)."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if os.environ.get("HPCGNN_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = all(mallopt(p, v) == 1 for p, v in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX),
                                             (M_TRIM_THRESHOLD, 2**31 - 1), (M_TOP_PAD, TOP_PAD)))
    _done = ok
    return ok
