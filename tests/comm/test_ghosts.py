"""hpcgnn.comm.ghosts: a rank's remote neighbours, its adjacency as table indices and
back, and the exchange of the ghosts' values (collective; any number of ranks)."""
import numpy as np
import pytest

from hpcgnn import _ext
from hpcgnn.comm.ghosts import Ghosts
from hpcgnn.comm.mpi import MPI


@pytest.fixture
def block():
    """This rank's block of a random graph: ``(comm, rank, size, vtxdist, adjncy)``."""
    comm = MPI.COMM_WORLD
    rank, size, per = comm.Get_rank(), comm.Get_size(), 40
    vtxdist = np.arange(size + 1, dtype=np.int64) * per
    adjncy = np.random.default_rng(rank).integers(0, per * size, 300).astype(np.int64)
    return comm, rank, size, vtxdist, adjncy


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_rewrite_round_trips_and_values_arrive(block):
    comm, rank, size, vtxdist, adjncy = block
    lo, hi = int(vtxdist[rank]), int(vtxdist[rank + 1])
    orig = adjncy.copy()
    gh = Ghosts(comm, vtxdist, adjncy)
    remote = np.unique(orig[(orig < lo) | (orig >= hi)])
    assert np.array_equal(gh.ids, remote) and gh.size == (hi - lo) + len(remote)
    gh.to_local(adjncy)
    assert adjncy.min() >= 0 and adjncy.max() < gh.size
    table = np.concatenate([np.arange(lo, hi), remote])       # table index -> global id
    assert np.array_equal(table[adjncy], orig)
    # every rank's value of vertex v is 3v + 1: the ghosts get their owners' values
    got = gh.values(3 * np.arange(lo, hi, dtype=np.int64) + 1)
    assert np.array_equal(got, 3 * remote + 1)
    gh.to_global(adjncy)
    assert np.array_equal(adjncy, orig)
    gh.drop_ids()
    assert gh.size == (hi - lo) + len(remote)
    assert np.array_equal(gh.values(np.arange(lo, hi) * 2), remote * 2)
    with pytest.raises(RuntimeError, match="dropped"):
        gh.to_global(adjncy)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_only_the_changed_values_travel(block):
    comm, rank, size, vtxdist, adjncy = block
    lo, hi = int(vtxdist[rank]), int(vtxdist[rank + 1])
    gh = Ghosts(comm, vtxdist, adjncy)
    changed = np.arange(lo, hi) % 3 == 0
    idx, vals = gh.changed_values(5 * np.arange(lo, hi, dtype=np.int64), changed)
    flagged = gh.ids % 3 == 0                                   # the ghosts whose owners changed them
    assert np.array_equal(np.sort(idx), np.flatnonzero(flagged))
    assert np.array_equal(vals, 5 * gh.ids[idx])
    idx, vals = gh.changed_values(np.arange(lo, hi), np.zeros(hi - lo, dtype=bool))
    assert len(idx) == 0 and len(vals) == 0


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_an_id_outside_the_graph_ends_every_rank(block):
    comm, rank, size, vtxdist, adjncy = block
    if rank == size - 1:
        adjncy[5] = int(vtxdist[-1]) + 3
    with pytest.raises(ValueError, match=rf"outside the graph's ids .*rank {size - 1}"):
        Ghosts(comm, vtxdist, adjncy)


def test_ids_past_two_to_the_31():
    """A block far past 2^31 with ghosts below it: the compiled rewrite keeps int64
    ids and indices (the kernels directly: a bitmap over 2^31 ids would take 0.5 GB)."""
    base = (1 << 31) + 5
    lo, hi = base, base + 10
    adjncy = np.array([base, 70, base + 9, 3, 70], dtype=np.int64)
    orig = adjncy.copy()
    bits = np.zeros(2, dtype=np.uint64)                 # covers ids [0, 128): the ghosts
    assert _ext.ghost_mark(adjncy, lo, hi, 128, bits) == 0   # own ids past N are skipped, not bad
    before = np.empty(2, dtype=np.int64)
    assert _ext.ghost_prefix(bits, before) == 2
    _ext.ghost_local(adjncy, lo, hi, bits, before)
    assert adjncy.tolist() == [0, 11, 9, 10, 11]         # own: v - lo; ghosts 3, 70 -> n + 0, n + 1
    _ext.ghost_global(adjncy, lo, hi - lo, np.array([3, 70], dtype=np.int64))
    assert np.array_equal(adjncy, orig)
