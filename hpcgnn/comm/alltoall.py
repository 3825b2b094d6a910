"""All-to-all exchanges of numpy arrays, scans and owner queries.

The partitioning pipeline moves rows (edges, ids, feature rows) to the rank that
owns them.  The helpers here take "destination of each row" and hand back "rows
received", so callers speak of rows and owners, not of counts, displacements and
datatypes.

* :func:`alltoallv` moves the rows of several arrays together (same destination per
  row).  Rows arrive grouped by source rank, in the order the source sent them.
  Large exchanges are split into rounds so that no MPI count or displacement
  exceeds 32 bits.
* :func:`alltoallv_grouped` does the same for rows already grouped by destination
  (the counts known: e.g. a fixed exchange repeated, :class:`~hpcgnn.comm.ghosts.Ghosts`).
* :func:`query` sends keys to their owners, which answer with one row per key; the
  answers come back in the order of the keys.
* :func:`exscan_sum`, :func:`allgather_rows`: small collectives on integer vectors;
  :func:`allgather_blocks`: every rank's block of a distributed vector, on every rank.

Every function here is collective over ``comm``.
"""
from __future__ import annotations

import numpy as np

from .. import _ext
from .mpi import MPI

#: Largest number of bytes a rank sends or receives in one round of :func:`alltoallv`.
#: (Counts are passed as multiples of one row's bytes; keeping a round below 2 GiB keeps
#: every count and displacement within MPI's int.)
MAX_ROUND_BYTES = (1 << 31) - (1 << 20)


def _split(counts: np.ndarray, rounds: int, k: int) -> np.ndarray:
    """Rows of round ``k`` per destination when ``counts`` rows go out in ``rounds``."""
    return counts * (k + 1) // rounds - counts * k // rounds


def group_by_dest(dest: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent: (stable order that groups rows by destination, rows per destination)."""
    dest = np.ascontiguousarray(dest, dtype=np.int64)
    counts = np.bincount(dest, minlength=size).astype(np.int64)
    if len(counts) > size:
        raise ValueError(f"alltoallv: destination {int(dest.max())} outside the {size} ranks")
    # stable; a counting sort streams once where an argsort of int64 compares
    order = _ext.counting_order(dest, 0, size) if size <= 1 << 12 else np.argsort(dest, kind="stable")
    return order, counts


def exchange_counts(comm, send_counts: np.ndarray) -> np.ndarray:
    """Collective: rows this rank receives from each rank, given rows it sends to each."""
    send = np.ascontiguousarray(send_counts, dtype=np.int64)
    recv = np.empty_like(send)
    comm.Alltoall(send, recv)
    return recv


def alltoallv_grouped(comm, buf: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray) -> np.ndarray:
    """Collective: exchange rows already grouped by destination (row = first axis):
    ``send_counts[r]`` rows to rank ``r``, ``recv_counts[r]`` from it."""
    tail = buf.shape[1:]
    row_bytes = int(np.prod(tail, dtype=np.int64)) * buf.dtype.itemsize
    out = np.empty((int(recv_counts.sum()),) + tail, dtype=buf.dtype)
    if row_bytes == 0:
        return out
    local_bytes = max(int(send_counts.sum()), int(recv_counts.sum())) * row_bytes
    most = np.array([local_bytes], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)    # (mpi4py's pickled allreduce holds the GIL while it waits)
    rounds = max(1, -(-int(most[0]) // MAX_ROUND_BYTES))
    sbytes = buf.reshape(-1).view(np.uint8) if buf.size else np.empty(0, np.uint8)
    rbytes = out.reshape(-1).view(np.uint8) if out.size else np.empty(0, np.uint8)
    soff = np.concatenate([[0], np.cumsum(send_counts)])
    roff = np.concatenate([[0], np.cumsum(recv_counts)])
    rowtype = MPI.BYTE.Create_contiguous(row_bytes).Commit()
    try:
        if rounds == 1:
            comm.Alltoallv([sbytes, (send_counts.astype(np.int32), soff[:-1].astype(np.int32)), rowtype],
                           [rbytes, (recv_counts.astype(np.int32), roff[:-1].astype(np.int32)), rowtype])
            return out
        for k in range(rounds):
            s_lo = soff[:-1] + send_counts * k // rounds
            s_n = _split(send_counts, rounds, k)
            r_lo = roff[:-1] + recv_counts * k // rounds
            r_n = _split(recv_counts, rounds, k)
            # Pack this round contiguously (one slice per destination).
            s_pack = np.concatenate([sbytes[a * row_bytes:(a + n) * row_bytes] for a, n in zip(s_lo, s_n)])
            r_pack = np.empty(int(r_n.sum()) * row_bytes, dtype=np.uint8)
            s_disp = np.concatenate([[0], np.cumsum(s_n)[:-1]])
            r_disp = np.concatenate([[0], np.cumsum(r_n)[:-1]])
            comm.Alltoallv([s_pack, (s_n.astype(np.int32), s_disp.astype(np.int32)), rowtype],
                           [r_pack, (r_n.astype(np.int32), r_disp.astype(np.int32)), rowtype])
            pos = 0
            for a, n in zip(r_lo, r_n):
                rbytes[a * row_bytes:(a + n) * row_bytes] = r_pack[pos:pos + n * row_bytes]
                pos += n * row_bytes
    finally:
        rowtype.Free()
    return out


def alltoallv(comm, dest, *arrays: np.ndarray, return_counts: bool = False):
    """Collective: send row ``i`` of every array in ``arrays`` to rank ``dest[i]``.

    All arrays have ``len(dest)`` rows (any trailing shape, any fixed-size dtype, the
    same on every rank, an empty array's too: rows are received as this rank's dtype).
    Returns the received arrays (same dtypes and trailing shapes), rows grouped by
    source rank in rank order, each group in the sender's order; with
    ``return_counts`` also the number of rows received from each rank.
    """
    size = comm.Get_size()
    order, send_counts = group_by_dest(dest, size)
    recv_counts = exchange_counts(comm, send_counts)
    out = []
    for a in arrays:
        a = np.asarray(a)
        if len(a) != len(order):
            raise ValueError(f"alltoallv: array has {len(a)} rows, dest has {len(order)}")
        out.append(alltoallv_grouped(comm, np.ascontiguousarray(a[order]), send_counts, recv_counts))
    if return_counts:
        return out, recv_counts
    return out


def alltoallv_consume(comm, arrays: list, dest_of) -> list:
    """Collective: :func:`alltoallv` of the arrays in the list ``arrays``, sent to ranks
    ``dest_of(arrays[0])``, taking them out of the list (it ends empty): each array's
    memory goes once it is sent, so the exchange holds one extra send copy at a time
    instead of the inputs, their sorted copies and the outputs together."""
    size = comm.Get_size()
    order, send_counts = group_by_dest(dest_of(arrays[0]), size)
    recv_counts = exchange_counts(comm, send_counts)
    out = []
    while arrays:
        a = np.asarray(arrays.pop(0))
        if len(a) != len(order):
            raise ValueError(f"alltoallv: array has {len(a)} rows, dest has {len(order)}")
        buf = np.ascontiguousarray(a[order])
        del a
        out.append(alltoallv_grouped(comm, buf, send_counts, recv_counts))
        del buf
    return out


def query(comm, owner, keys: np.ndarray, respond):
    """Collective: ask the owner of each key for an answer row; answers in key order.

    ``owner[i]`` is the rank owning ``keys[i]``.  Each rank calls ``respond(keys)``
    on the keys it received (a 1-D array) and returns one row per key (an array, or a
    tuple of arrays).  Returns the answers, aligned with ``keys``, as an array or a
    tuple of arrays, matching what ``respond`` returns.
    """
    size = comm.Get_size()
    keys = np.asarray(keys)
    order, send_counts = group_by_dest(owner, size)
    recv_counts = exchange_counts(comm, send_counts)
    got = alltoallv_grouped(comm, np.ascontiguousarray(keys[order]), send_counts, recv_counts)
    answer = respond(got)
    single = not isinstance(answer, tuple)
    answers = (answer,) if single else answer
    results = []
    for ans in answers:
        ans = np.asarray(ans)
        back = alltoallv_grouped(comm, np.ascontiguousarray(ans), recv_counts, send_counts)
        res = np.empty_like(back)
        res[order] = back
        results.append(res)
    return results[0] if single else tuple(results)


def exscan_sum(comm, values) -> np.ndarray:
    """Collective: element-wise sum of ``values`` over the ranks below this one (int64)."""
    v = np.ascontiguousarray(values, dtype=np.int64)
    out = np.zeros_like(v)
    if comm.Get_size() > 1:
        comm.Exscan(v, out, op=MPI.SUM)
        if comm.Get_rank() == 0:
            out[...] = 0
    return out


def allgather_rows(comm, values) -> np.ndarray:
    """Collective: stack every rank's int64 vector ``values`` (same length) into [size, len]."""
    v = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    out = np.empty((comm.Get_size(), len(v)), dtype=np.int64)
    comm.Allgather(v, out)
    return out


def allgather_blocks(comm, local, counts=None) -> np.ndarray:
    """Collective: every rank's 1-D ``local`` concatenated in rank order, on every rank
    (same dtype).  ``counts``: each rank's length when the caller knows them all
    (e.g. from a vertex distribution); otherwise they are all-gathered first.  A
    result of more than ``MAX_ROUND_BYTES`` is gathered in rounds (a slice of every
    block each), so that no MPI count or displacement exceeds 32 bits."""
    local = np.ascontiguousarray(local).reshape(-1)
    counts = np.array(comm.allgather(len(local)) if counts is None else counts, dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    out = np.empty(int(counts.sum()), dtype=local.dtype)
    rounds = max(1, -(-len(out) * local.dtype.itemsize // MAX_ROUND_BYTES))
    if rounds == 1:
        comm.Allgatherv(local, [out, (counts.tolist(), displs.tolist())])
        return out
    mine = comm.Get_rank()
    for k in range(rounds):
        first = counts * k // rounds                      # where each block's slice of this round starts
        n = _split(counts, rounds, k)
        pos = np.concatenate([[0], np.cumsum(n)[:-1]])
        pack = np.empty(int(n.sum()), dtype=local.dtype)
        comm.Allgatherv(local[first[mine]:first[mine] + n[mine]], [pack, (n.tolist(), pos.tolist())])
        for r in range(len(counts)):
            at = displs[r] + first[r]
            out[at:at + n[r]] = pack[pos[r]:pos[r] + n[r]]
    return out


def allreduce_sum(comm, values) -> np.ndarray:
    """Collective: element-wise int64 sum of ``values`` over all ranks."""
    v = np.ascontiguousarray(values, dtype=np.int64)
    out = np.empty_like(v)
    comm.Allreduce(v, out, op=MPI.SUM)
    return out


__all__ = ["alltoallv", "query", "exscan_sum", "allgather_rows", "allgather_blocks", "allreduce_sum", "group_by_dest",
           "exchange_counts", "MAX_ROUND_BYTES"]
