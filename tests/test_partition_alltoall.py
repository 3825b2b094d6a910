"""The exchange helpers of hpcgnn.comm.alltoall (collective; any number of ranks)."""
import numpy as np
import pytest

from hpcgnn.comm import alltoall
from hpcgnn.comm.mpi import MPI


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
