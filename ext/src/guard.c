/* See guard.h. */
#define _GNU_SOURCE
#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int claimed = 0;
static pthread_t thread;
static int armed = 0;             /* a thread watches (arm and disarm: the caller's one thread) */
static int stop_pipe[2] = {-1, -1};   /* a byte written here ends the thread at once */

typedef struct {
    int64_t n;
    int64_t *pids;
    char **lines;
    int wake_fd;
    double tick_s, stopped_s, linger_s;
    char *head, *tail;
} guard_t;

int hg_guard_claim(void) {
    int expected = 0;
    return atomic_compare_exchange_strong(&claimed, &expected, 1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nap(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* 1 when process pid is gone or a zombie (what hpcgnn.comm.peers.state calls gone). */
static int gone(int64_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0)
        return 1;
    buf[k] = 0;
    char *paren = strrchr(buf, ')');
    if (paren == NULL || paren[1] == 0 || paren[2] == 0)
        return 1;
    return paren[2] == 'Z' || paren[2] == 'X';
}

static void say(const char *s) {
    size_t left = strlen(s);
    while (left > 0) {
        ssize_t k = write(2, s, left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        s += k;
        left -= (size_t)k;
    }
}

/* Ends the process (this thread claimed the job's end) or, when Python's watchdog
 * claimed it first, waits for that to end it. */
static void end(guard_t *g, const char *line, double gap) {
    if (!hg_guard_claim()) {
        for (;;)
            nap(1.0);
    }
    if (gap > g->stopped_s) {
        char secs[32];
        snprintf(secs, sizeof secs, "%.0f", gap);
        say(g->head);
        say(secs);
        say(g->tail);
    } else {
        say(line);
    }
    nap(g->linger_s);     /* let the launcher forward the line before it tears the job down */
    _exit(1);
}

static void free_guard(guard_t *g) {
    if (g == NULL)
        return;
    for (int64_t i = 0; g->lines != NULL && i < g->n; i++)
        free(g->lines[i]);
    free(g->lines);
    free(g->pids);
    free(g->head);
    free(g->tail);
    free(g);
}

static void *watch(void *arg) {
    guard_t *g = (guard_t *)arg;
    double last = now_s(), gap = 0.0;
    for (;;) {
        int term = 0;
        struct pollfd p[2] = {{stop_pipe[0], POLLIN, 0}, {g->wake_fd, POLLIN, 0}};
        if (poll(p, g->wake_fd >= 0 ? 2 : 1, (int)(g->tick_s * 1000)) > 0) {
            if (p[0].revents)
                break;
            if (p[1].revents) {
                unsigned char sig[64];
                ssize_t k = read(g->wake_fd, sig, sizeof sig);
                for (ssize_t i = 0; i < k; i++)
                    term |= sig[i] == SIGTERM;
            }
        }
        double t = now_s();
        if (t - last > gap)
            gap = t - last;
        last = t;
        for (int64_t i = 0; i < g->n; i++)
            if (gone(g->pids[i]))
                end(g, g->lines[i], gap);
        if (term && hg_guard_claim())     /* no peer gone: scancel (also after a suspend) */
            _exit(128 + SIGTERM);
    }
    free_guard(g);
    return NULL;
}

static char *copy(const char *s) {
    return strdup(s != NULL ? s : "");
}

int hg_guard_arm(int64_t n, const int64_t *pids, const char *const *lines, int wake_fd,
                 double tick_s, double stopped_s, double linger_s,
                 const char *stopped_head, const char *stopped_tail) {
    if (armed || pipe2(stop_pipe, O_CLOEXEC) != 0)
        return -1;
    guard_t *g = calloc(1, sizeof *g);
    if (g == NULL) {
        hg_guard_disarm();
        return -1;
    }
    g->n = n;
    g->wake_fd = wake_fd;
    g->tick_s = tick_s;
    g->stopped_s = stopped_s;
    g->linger_s = linger_s;
    g->pids = malloc((size_t)(n > 0 ? n : 1) * sizeof *g->pids);
    g->lines = calloc((size_t)(n > 0 ? n : 1), sizeof *g->lines);
    g->head = copy(stopped_head);
    g->tail = copy(stopped_tail);
    int ok = g->pids != NULL && g->lines != NULL && g->head != NULL && g->tail != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        g->pids[i] = pids[i];
        g->lines[i] = copy(lines[i]);
        ok = g->lines[i] != NULL;
    }
    if (!ok || pthread_create(&thread, NULL, watch, g) != 0) {
        free_guard(g);
        hg_guard_disarm();
        return ok ? -2 : -1;
    }
    armed = 1;
    return 0;
}

void hg_guard_disarm(void) {
    if (armed) {
        ssize_t k;
        do
            k = write(stop_pipe[1], "x", 1);
        while (k < 0 && errno == EINTR);
        pthread_join(thread, NULL);
        armed = 0;
    }
    for (int i = 0; i < 2; i++)
        if (stop_pipe[i] >= 0) {
            close(stop_pipe[i]);
            stop_pipe[i] = -1;
        }
}
