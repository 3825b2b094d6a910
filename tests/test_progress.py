"""How serving ranks wait (hpcgnn.comm.progress): socket traffic seen, sleeps backed off."""
import os
import socket

import pytest

from hpcgnn.comm.progress import IdleBackoff, SocketTraffic

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


def test_missing_counters_mean_no_traffic(tmp_path):
    t = SocketTraffic(str(tmp_path / "absent"))
    assert not t.available and not t.moved()


def test_backoff_doubles_to_its_cap_and_resets_on_work():
    w = IdleBackoff(max_s=4e-5, min_s=1e-5, watch_sockets=False)
    seen = []
    for busy in (False, False, False, False, True, False):
        w(busy)
        seen.append(w.idle)
    assert seen == [1e-5, 2e-5, 4e-5, 4e-5, 0.0, 1e-5]
    assert w.polls_with_traffic == 0


@linux_io
def test_backoff_polls_on_while_bytes_move():
    w = IdleBackoff(max_s=1e-3, min_s=1e-5)
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
