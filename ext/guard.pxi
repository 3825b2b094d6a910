# A watchdog thread without the GIL (ext/src/guard.c): hpcgnn.comm.watchdog arms it
# for a command's phase, so a gone peer is named and the launcher's SIGTERM answered
# even while the main thread holds the GIL in a call blocked on other ranks.
# Independent.
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free

cdef extern from "guard.h" nogil:
    int hg_guard_arm(int64_t n, const int64_t *pids, const char *const *lines, int wake_fd,
                     double tick_s, double stopped_s, double linger_s,
                     const char *stopped_head, const char *stopped_tail)
    void hg_guard_disarm()
    int hg_guard_claim()


def guard_arm(pids, lines, int wake_fd, double tick_s, double stopped_s, double linger_s,
              bytes stopped_head, bytes stopped_tail):
    """Start the thread watching ``pids`` (``lines[i]``, bytes, is written when
    ``pids[i]`` is gone) and the signal numbers read from ``wake_fd`` (-1: none)."""
    cdef Py_ssize_t n = len(pids), i
    if len(lines) != n:
        raise ValueError("guard_arm: one line per pid")
    keep = [bytes(x) for x in lines]
    cdef int64_t *c_pids = <int64_t *> malloc(max(n, 1) * sizeof(int64_t))
    cdef const char **c_lines = <const char **> malloc(max(n, 1) * sizeof(char *))
    cdef int rc
    if c_pids == NULL or c_lines == NULL:
        free(c_pids)
        free(c_lines)
        raise MemoryError("guard_arm: out of memory")
    for i in range(n):
        c_pids[i] = int(pids[i])
        c_lines[i] = keep[i]
    rc = hg_guard_arm(n, c_pids, c_lines, wake_fd, tick_s, stopped_s, linger_s, stopped_head, stopped_tail)
    free(c_pids)
    free(c_lines)
    if rc == -2:
        raise OSError("guard_arm: the watchdog thread could not start")
    if rc < 0:
        raise RuntimeError("guard_arm: already armed, or out of memory")


def guard_disarm():
    """End the thread (joined before this returns)."""
    with nogil:
        hg_guard_disarm()


def guard_claim():
    """True for the first caller in the process: it ends the job and writes its line."""
    return bool(hg_guard_claim())
