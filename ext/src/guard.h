/* A watchdog thread that needs no GIL: while a phase of a command runs (hpcgnn
 * partition, generate...), it names a peer of this host whose process is gone, and
 * answers the launcher's SIGTERM, even while the main thread holds the GIL inside a
 * call that blocks on other ranks (h5py's collective open, read and close do).
 * Plain C and POSIX, no Python or MPI: the lines it writes are made by the caller. */
#ifndef HPCGNN_GUARD_H
#define HPCGNN_GUARD_H
#include <stdint.h>

/* Watch the processes pids[0..n) (this host's peers) every tick_s seconds and the
 * signal numbers written to wake_fd (the read end of Python's signal wake-up pipe,
 * -1: none): the first peer found gone (no process, or a zombie) makes the thread
 * write lines[i] (NUL-terminated) to stderr, wait linger_s and _exit(1); a SIGTERM
 * with no peer gone makes it _exit(128 + SIGTERM).  Where the thread saw a gap of
 * more than stopped_s between its looks (this process was stopped), it writes
 * stopped_head, the gap in seconds and stopped_tail instead of a peer's line.
 * The strings are copied.  Returns 0, -1 when already armed or out of memory,
 * -2 when the thread cannot start. */
int hg_guard_arm(int64_t n, const int64_t *pids, const char *const *lines, int wake_fd,
                 double tick_s, double stopped_s, double linger_s,
                 const char *stopped_head, const char *stopped_tail);

/* Stop watching: the thread ends at once and is joined; the process goes on. */
void hg_guard_disarm(void);

/* 1 for the first caller in the process, 0 for every later one: whoever ends the job
 * (this thread or Python's watchdog) claims it first, so one line is written. */
int hg_guard_claim(void);

#endif
