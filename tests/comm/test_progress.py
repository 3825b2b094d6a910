"""How serving ranks wait (hpcgnn.comm.progress): socket traffic seen, sleeps backed off
and ended by bytes arriving."""
import os
import socket
import threading

import pytest

from hpcgnn.comm.progress import IdleBackoff, SocketTraffic, SocketWait

linux_io = pytest.mark.skipif(not SocketTraffic().available, reason="no /proc/self/io here")


def quiet(t, tries=100):
    """True once a call sees no bytes moved (another thread of the test process could
    do I/O at any moment; without our own I/O the counters settle at once)."""
    return any(not t.moved() for _ in range(tries))


@linux_io
def test_socket_traffic_is_seen_and_its_own_reads_are_not():
    t = SocketTraffic()
    assert quiet(t) and not t.moved()             # reading the counters is not traffic
    a, b = socket.socketpair()
    try:
        os.write(a.fileno(), b"x" * 4096)          # write/read, as MPI's TCP transport does
        assert t.moved()
        assert quiet(t)
        assert os.read(b.fileno(), 8192)
        assert t.moved()
        assert quiet(t)
    finally:
        a.close(), b.close(), t.close()
    assert not t.moved()                          # closed: never traffic


def test_socket_traffic_reads_the_counters_in_either_order(tmp_path):
    for text in (b"rchar: 7\nwchar: 5\nsyscr: 1\n", b"syscr: 1\nwchar: 5\nrchar: 7\n"):
        f = tmp_path / "io"
        f.write_bytes(text)
        t = SocketTraffic(str(f))
        assert t.available and t._total() + t._own == 12      # rchar + wchar, its own reads apart
        t.close()


def test_missing_counters_mean_no_traffic(tmp_path):
    t = SocketTraffic(str(tmp_path / "absent"))
    assert not t.available and not t.moved()


def test_backoff_doubles_to_its_cap_and_resets_on_work():
    w = IdleBackoff(max_s=4e-5, min_s=1e-5, watch_sockets=False, linger_s=0.0)
    seen = []
    for busy in (False, False, False, False, True, False):
        w(busy)
        seen.append(w.idle)
    assert seen == [1e-5, 2e-5, 4e-5, 4e-5, 0.0, 1e-5]
    assert w.polls_with_traffic == 0


@linux_io
def test_backoff_polls_on_while_bytes_move():
    w = IdleBackoff(max_s=1e-3, min_s=1e-5, linger_s=0.0)
    for _ in range(100):                          # until two quiet polls in a row
        w(False)
        if w.idle == 2e-5:
            break
    assert w.idle == 2e-5
    a, b = socket.socketpair()
    try:
        before = w.polls_with_traffic
        os.write(a.fileno(), b"y" * 100)
        w(False)                                  # nothing to do, but bytes moved: no sleep
        assert w.idle == 0.0 and w.polls_with_traffic == before + 1
        for _ in range(100):
            w(False)
            if w.idle > 0:
                break
        assert w.idle == 1e-5                     # quiet again: back to the shortest sleep
    finally:
        a.close(), b.close(), w.close()


def test_backoff_lingers_after_work_without_sleeping():
    w = IdleBackoff(max_s=1e-3, min_s=1e-5, watch_sockets=False, linger_s=60.0)
    w(True)
    for _ in range(5):                            # within the linger: no sleep, no backoff
        w(False)
        assert w.idle == 0.0
    w._linger_until = 0.0                         # the linger over: back off again
    w(False)
    assert w.idle == 1e-5


linux_fds = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="no /proc/self/fd here")


@linux_fds
def test_socket_wait_ends_when_bytes_arrive():
    a, b = socket.socketpair()
    w = SocketWait(rescan_s=0.0)
    try:
        timer = threading.Timer(0.05, lambda: a.send(b"request"))
        timer.start()
        assert w.sleep(60.0)                      # woken by the bytes, not the timeout
        assert w.wakeups == 1 and b.fileno() in w.sockets
        timer.join()
    finally:
        a.close(), b.close()


@linux_fds
def test_socket_wait_ignores_a_socket_nobody_reads():
    a, b = socket.socketpair()
    w = SocketWait(rescan_s=60.0)
    try:
        a.send(b"x")
        assert w.sleep(1e-3)                      # readable: ends the sleep
        w.activity()                              # the caller moved bytes: a real wake-up
        assert w.sleep(1e-3) and b.fileno() in w.sockets
        assert not w.sleep(1e-3)                  # still readable, nothing moved: left out
        assert b.fileno() not in w.sockets and w.wakeups == 2
        b.recv(16)
        w._scanned = float("-inf")                # the next scan takes it back
        assert not w.sleep(1e-3) and b.fileno() in w.sockets
    finally:
        a.close(), b.close()


def test_socket_wait_without_proc_sleeps_plainly(tmp_path):
    w = SocketWait(fd_dir=str(tmp_path / "absent"))
    assert not w.sleep(1e-4) and w.sockets == [] and w.wakeups == 0
