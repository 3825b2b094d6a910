"""Past 2^31 on 1-4 ranks (issue #30): exchanges in rounds, ids past 2^31 through the
relabelling and the symmetric view, ParMETIS' limits agreed on every rank, and the
pipeline refusing a graph its ParMETIS cannot hold before ParMETIS is called."""
import os
import types

import numpy as np
import pytest

from hpcgnn import _ext
from hpcgnn.comm import alltoall, batches
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.partition import idx_limits, part_kway, partition_graph
from hpcgnn.partition import pipeline as pipeline_mod
from hpcgnn.partition.assign import symmetric_csr
from hpcgnn.partition.coarsen import coarsened_parts
from hpcgnn.partition.relabel import IdLayout, assign_new_ids, map_ids
from harness import make_raw, planted_graph

comm = MPI.COMM_WORLD
B31, B32 = 2**31, 2**32


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_allgather_blocks_in_rounds(monkeypatch, dtype):
    rank, size = comm.Get_rank(), comm.Get_size()
    blocks = [(np.arange(7 * r + 3) + r * (B32 if dtype == np.int64 else 1000)).astype(dtype) for r in range(size)]
    want = np.concatenate(blocks)
    for limit in (1 << 30, 24, 1):                  # one round; a few elements a round; one element a round
        monkeypatch.setattr(alltoall, "MAX_ROUND_BYTES", limit)
        for counts in (None, [len(b) for b in blocks]):
            got = alltoall.allgather_blocks(comm, blocks[rank], counts)
            assert got.dtype == dtype and np.array_equal(got, want)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_new_ids_past_2_31_are_found_by_their_owners():
    """Every rank holds 5 real nodes at the start of a block of 2^32 ids and reports
    2^31 more in partition 0 (never materialized): the new ids of its partition-1 nodes
    lie past R * 2^31, and map_ids (the query path: 8 * R * 2^32 bytes of table) finds
    them from any rank."""
    rank, size = comm.Get_rank(), comm.Get_size()
    bins = np.array([1, 0, 1, 1, 0], np.int64) if rank % 2 == 0 else np.array([0, 1, 1, 0, 1], np.int64)
    counts = np.bincount(bins, minlength=2)
    counts[0] += B31                                  # the virtual nodes, after the real ones
    layout = IdLayout(comm, counts)
    assert layout.start.tolist() == [0, int(layout.counts[:, 0].sum()), int(layout.counts.sum())]
    assert layout.start[1] > size * B31
    new_ids, _ = assign_new_ids(bins, layout)
    assert layout.rank_of(new_ids).tolist() == [rank] * 5
    assert layout.part_of(new_ids).tolist() == bins.tolist()
    vtxdist = np.arange(size + 1, dtype=np.int64) * B32
    mine = rank * B32 + np.arange(5, dtype=np.int64)
    every = comm.allgather((mine, new_ids))
    asked = np.concatenate([every[(rank + d) % size][0][::-1] for d in range(size)])
    want = np.concatenate([every[(rank + d) % size][1][::-1] for d in range(size)])
    assert np.array_equal(map_ids(comm, vtxdist, new_ids, asked), want)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_symmetric_view_of_ids_past_2_33():
    rank, size = comm.Get_rank(), comm.Get_size()
    base, n = 2**33 + 17, 60
    rng = np.random.default_rng(4)
    src, dst = base + rng.integers(0, n, 400), base + rng.integers(0, n, 400)
    vtxdist = base + np.array([n * r // size for r in range(size + 1)], np.int64)
    lo, hi = 400 * rank // size, 400 * (rank + 1) // size
    xadj, adjncy = symmetric_csr(comm, vtxdist, src[lo:hi], dst[lo:hi], chunk=16)
    pairs = {(int(u), int(v)) for u, v in zip(src, dst) if u != v}
    pairs |= {(v, u) for u, v in pairs}
    for i, row in enumerate(range(int(vtxdist[rank]), int(vtxdist[rank + 1]))):
        assert adjncy[xadj[i]:xadj[i + 1]].tolist() == sorted(v for u, v in pairs if u == row)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_limits_raise_alike_on_every_rank():
    size = comm.Get_size()
    vtxdist = np.array([r * 10**6 for r in range(size + 1)], np.int64)
    with pytest.raises(InputError, match=r"adjacency entries in all.*2147483647 \(2\^31-1\).*--coarsen lp"):
        idx_limits.check_sizes(comm, vtxdist, B31 // size + 1, "g.h5")      # sums past 2^31-1
    vtxdist = np.array([0] + [3 * 10**8 + r for r in range(size)], np.int64)      # rank 0 holds 3e8
    with pytest.raises(InputError, match=r"rank 0 holds 300000000 vertices.*run on at least 2 ranks"):
        idx_limits.check_sizes(comm, vtxdist, 0, "g.h5")
    vtxdist = np.array([r * (B31 // size + 1) for r in range(size + 1)], np.int64)  # 2^31 + vertices in all
    with pytest.raises(InputError, match=r"the graph has \d+ vertices"):
        idx_limits.check_sizes(comm, vtxdist, 0, "g.h5")


def _grid_block(w, h):
    """This rank's block of a ``w x h`` grid graph: ``(vtxdist, xadj, adjncy)``."""
    size, rank = comm.Get_size(), comm.Get_rank()
    n = w * h
    vtxdist = np.array([r * n // size for r in range(size + 1)], np.int64)
    xadj, adj = [0], []
    for v in range(vtxdist[rank], vtxdist[rank + 1]):
        x, y = v % w, v // w
        adj += [u for u, ok in ((v - 1, x > 0), (v + 1, x < w - 1), (v - w, y > 0), (v + w, y < h - 1)) if ok]
        xadj.append(len(adj))
    return vtxdist, np.array(xadj, np.int64), np.array(adj, np.int64)


def _no_parmetis(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("ParMETIS was called")

    monkeypatch.setattr(_ext, "parmetis_part_kway", boom)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_part_kway_refuses_before_parmetis_on_every_rank(monkeypatch):
    vtxdist, xadj, adj = _grid_block(8, 8)            # 224 adjacency entries
    _no_parmetis(monkeypatch)
    monkeypatch.setattr(idx_limits, "ENTRY_LIMIT", 223)
    with pytest.raises(InputError, match=r"part_kway: the graph has 224 adjacency entries in all.*at most 223"):
        part_kway(comm, vtxdist, xadj, adj, nparts=2)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_coarsest_graph_past_idx_t_names_another_fix(monkeypatch):
    vtxdist, xadj, adj = _grid_block(16, 16)
    _no_parmetis(monkeypatch)
    monkeypatch.setattr(idx_limits, "ENTRY_LIMIT", 1)
    with pytest.raises(InputError, match=r"part_kway: the graph has \d+ adjacency entries.*coarsest cluster graph "
                                         r"of --coarsen lp is still that large.*--method random"):
        coarsened_parts(comm, vtxdist, xadj, adj, [np.ones(len(xadj) - 1, np.int64)], 2, seed=1)


def _raw(shared_dir, n=3000):
    src, dst, _ = planted_graph(n, 8, 6, seed=2)
    return make_raw(comm, shared_dir, n, src, dst)


def _symmetric_entries(g):
    e = np.stack([g["src"], g["dst"]], axis=1)
    e = e[e[:, 0] != e[:, 1]]
    return 2 * len(np.unique(np.sort(e, axis=1), axis=0))


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_pipeline_refuses_a_symmetric_view_past_idx_t_unless_coarsened(monkeypatch, shared_dir):
    """--coarsen none on a graph whose symmetric view has more entries than ParMETIS'
    idx_t holds (here: a limit lowered to one less than this graph's) ends with the same
    error on every rank, naming the file, the limit and --coarsen lp, before ParMETIS is
    called and without a configuration; --coarsen lp partitions it (ParMETIS sees only
    the smaller cluster graph, and so does METIS)."""
    path, g = _raw(shared_dir)
    entries = _symmetric_entries(g)
    out = os.path.join(shared_dir, "out")
    monkeypatch.setattr(idx_limits, "ENTRY_LIMIT", entries - 1)
    real = _ext.parmetis_part_kway
    _no_parmetis(monkeypatch)
    with pytest.raises(InputError) as err:
        partition_graph(path, out, 2, comm=comm, coarsen="none")
    msg = str(err.value)
    assert msg.startswith(path) and f"the graph has {entries} adjacency entries in all" in msg
    assert f"at most {entries - 1}" in msg and "--coarsen lp" in msg
    assert not os.path.exists(os.path.join(out, "g.json"))
    seen, serial = [], _ext.metis_part_kway

    def spy(c, vtxdist, xadj, adjncy, *rest):
        seen.append(comm.allreduce(len(adjncy)) if c.Get_size() == comm.Get_size() else len(adjncy))
        return real(c, vtxdist, xadj, adjncy, *rest)

    def serial_spy(xadj, adjncy, *rest):       # the coarsest graph's METIS starts
        seen.append(len(adjncy))
        return serial(xadj, adjncy, *rest)

    monkeypatch.setattr(_ext, "parmetis_part_kway", spy)
    monkeypatch.setattr(_ext, "metis_part_kway", serial_spy)
    cfg = partition_graph(path, out, 2, comm=comm, coarsen="lp")
    seen = comm.allgather(seen)
    assert os.path.exists(cfg) and any(seen) and max(max(s, default=0) for s in seen) < entries - 1


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_pipeline_checks_the_vertex_count_before_reading_edges(monkeypatch, shared_dir):
    path, g = _raw(shared_dir, n=600)
    monkeypatch.setattr(idx_limits, "VERTEX_LIMIT", 599)

    def no_edges(self):
        raise AssertionError("the edges were read")

    monkeypatch.setattr(pipeline_mod.RawSource, "read_edges", no_edges)
    with pytest.raises(InputError, match=r"the graph has 600 vertices.*at most 599.*--coarsen lp"):
        partition_graph(path, os.path.join(shared_dir, "out"), 2, comm=comm, coarsen="none")


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_batch_frames_go_in_pieces(monkeypatch):
    """A batch array larger than one message (2 GiB; here 64 bytes) is sent as several
    and received whole."""
    rank = comm.Get_rank()
    monkeypatch.setattr(batches, "MAX_MESSAGE_BYTES", 64)
    ch = batches.BatchChannel(types.SimpleNamespace(world=comm, rank=rank))
    try:
        arrays = [np.arange(300, dtype=np.int64).reshape(100, 3) + B32, np.ones(5, np.float32),
                  np.zeros((0, 4), np.int64)]
        if rank == 0:
            reqs = ch.send_frame(1, 2, {"step": 7}, arrays)
            assert len(reqs) == 1 + 38 + 1
            MPI.Request.Waitall(reqs)
        elif rank == 1:
            header, got = ch.recv_frame(0, 2)
            assert header == {"step": 7}
            assert [a.shape for a in got] == [a.shape for a in arrays]
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got, arrays))
        comm.Barrier()
    finally:
        ch.free()
