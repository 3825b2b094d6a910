"""The exchange helpers of hpcgnn.comm.alltoall (collective; any number of ranks)."""
import numpy as np
import pytest

from hpcgnn.comm import alltoall
from hpcgnn.comm.mpi import MPI
from hpcgnn.partition.assign import symmetric_csr


def _rows(rank, n):
    rng = np.random.default_rng(rank)
    ids = rank * 1000 + np.arange(n, dtype=np.int64)
    feats = rng.standard_normal((n, 3)).astype(np.float32)
    return ids, feats


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("small_rounds", [False, True])
def test_alltoallv_moves_rows_to_their_destination(monkeypatch, small_rounds):
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if small_rounds:  # force many rounds: a few rows per round
        monkeypatch.setattr(alltoall, "MAX_ROUND_BYTES", 40)
    n = 50 + 7 * rank
    ids, feats = _rows(rank, n)
    dest = (ids * 7 + 3) % size
    (got_ids, got_feats), counts = alltoall.alltoallv(comm, dest, ids, feats, return_counts=True)
    # Oracle: rebuild every rank's rows and keep those sent here, by source rank, in order.
    want_ids, want_feats, want_counts = [], [], []
    for r in range(size):
        i, f = _rows(r, 50 + 7 * r)
        keep = (i * 7 + 3) % size == rank
        want_ids.append(i[keep])
        want_feats.append(f[keep])
        want_counts.append(int(keep.sum()))
    assert np.array_equal(got_ids, np.concatenate(want_ids))
    assert np.array_equal(got_feats, np.concatenate(want_feats))
    assert counts.tolist() == want_counts


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_query_answers_in_key_order():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(10 + rank)
    keys = rng.integers(0, 100 * size, 300)
    owner = keys // 100
    ans, ans2 = alltoall.query(comm, owner, keys, lambda k: (k * 2 + rank * 0, np.full(len(k), rank)))
    assert np.array_equal(ans, keys * 2)
    assert np.array_equal(ans2, owner)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_scans_and_gathers():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    v = np.array([rank, 1, 2 * rank])
    assert alltoall.exscan_sum(comm, v).tolist() == [sum(range(rank)), rank, 2 * sum(range(rank))]
    assert alltoall.allgather_rows(comm, v).tolist() == [[r, 1, 2 * r] for r in range(size)]
    assert alltoall.allreduce_sum(comm, v).tolist() == [sum(range(size)), size, 2 * sum(range(size))]


def test_alltoallv_rejects_bad_destination():
    with pytest.raises(ValueError):
        alltoall.group_by_dest(np.array([0, 5]), 2)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("known_counts", [False, True])
def test_allgather_blocks_concatenates_in_rank_order(known_counts):
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    lengths = [(3 * r + 1) % 4 for r in range(size)]          # uneven, rank 2 holds none
    local = (100 * rank + np.arange(lengths[rank])).astype(np.int32)
    got = alltoall.allgather_blocks(comm, local, lengths if known_counts else None)
    want = np.concatenate([(100 * r + np.arange(lengths[r])) for r in range(size)]).astype(np.int32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_symmetric_csr_in_chunks_is_the_symmetric_loop_free_graph(chunk):
    """The view built chunk by chunk (ranks with different numbers of chunks) equals the
    sorted unique (u, v), (v, u) pairs without loops, per row of this rank's block."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 40
    vtxdist = np.array([n * r // size for r in range(size + 1)], dtype=np.int64)

    def edges(r):                       # rank r's raw edges: loops and repeats included
        g = np.random.default_rng(100 + r)
        m = 10 + 17 * r
        return g.integers(0, n, m).astype(np.int64), g.integers(0, n, m).astype(np.int64)

    xadj, adjncy = symmetric_csr(comm, vtxdist, *edges(rank), chunk=chunk)
    pairs = set()
    for r in range(size):
        for u, v in zip(*edges(r)):
            if u != v:
                pairs |= {(int(u), int(v)), (int(v), int(u))}
    lo, hi = int(vtxdist[rank]), int(vtxdist[rank + 1])
    for i, u in enumerate(range(lo, hi)):
        assert adjncy[xadj[i]:xadj[i + 1]].tolist() == sorted(v for a, v in pairs if a == u)
    assert xadj[-1] == len(adjncy)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_alltoallv_consume_empties_the_list_and_matches_alltoallv():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ids, feats = _rows(rank, 30 + rank)
    want = alltoall.alltoallv(comm, ids % size, ids, feats)
    arrays = [ids.copy(), feats.copy()]
    got = alltoall.alltoallv_consume(comm, arrays, lambda a: a % size)
    assert arrays == []
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
