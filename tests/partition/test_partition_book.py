"""Pure logic of the partitioning pipeline (single process): the partition book,
checksums by slices, the random assignment and the relabelling rule."""
import numpy as np
import pytest
import torch

from hpcgnn.graph import PartitionPolicy, RangePartitionBook
from hpcgnn.io.checksum import checksum_hex, fletcher_partial
from hpcgnn.partition.assign import random_parts

CONF = {"graph_name": "g", "num_parts": 3, "node_map": {"_N": [[0, 4], [4, 4], [4, 10]]},
        "edge_map": {"_E": [[0, 7], [7, 9], [9, 20]]}}


def test_partition_book_lookups():
    b = RangePartitionBook(CONF, 2)
    assert b.num_partitions() == 3 and b.partid == 2 and b.num_nodes == 10 and b.num_edges == 20
    assert b.nid2partid([0, 3, 4, 9]).tolist() == [0, 0, 2, 2]  # partition 1 is empty
    assert b.eid2partid([0, 6, 7, 8, 9, 19]).tolist() == [0, 0, 1, 1, 2, 2]
    assert b.partid2nids(2).tolist() == list(range(4, 10)) and b.partid2nids(1).numel() == 0
    assert b.partid2eids(1).tolist() == [7, 8]
    assert b.nid2localnid([4, 9], 2).tolist() == [0, 5]
    assert [m["num_nodes"] for m in b.metadata()] == [4, 0, 6]
    assert b.node_ranges.shape == (3, 2) and b.ntypes == ["_N"] and b.etypes == ["_E"]
    with pytest.raises(ValueError):
        b.nid2partid([10])
    with pytest.raises(ValueError):
        RangePartitionBook(CONF, 3)
    # DGL's conventions: torch in, torch out; partid2nids gives a tensor; type arguments;
    # the canonical triple of an untyped graph names its one edge type
    got = b.nid2partid(torch.tensor([0, 9]))
    assert isinstance(got, torch.Tensor) and got.tolist() == [0, 2]
    assert isinstance(b.nid2partid(np.array([0])), np.ndarray)
    assert torch.sum(b.nid2partid(b.partid2nids(b.partid)) == b.partid) == 6
    assert b.nid2partid(torch.tensor([4]), "_N").tolist() == [2] and b.eid2partid([8], "_E").tolist() == [1]
    assert b.partid2nids(2, "_N").tolist() == list(range(4, 10)) and b.partid2eids(1, ("_N", "_E", "_N")).tolist() == [7, 8]
    assert b.etype_id(("_N", "_E", "_N")) == 0 and b.num_edges_of(("_N", "_E", "_N")) == 20
    assert PartitionPolicy("edge~_N:_E:_N", b).policy_str == "edge:_E"
    t, per = b.map_to_per_ntype(torch.tensor([5]))
    assert isinstance(per, torch.Tensor) and per.tolist() == [5]
    with pytest.raises(ValueError, match="partition 3"):
        b.partid2nids(3)
    bad = dict(CONF, node_map={"_N": [[0, 4], [5, 10], [10, 10]]})
    with pytest.raises(ValueError, match="contiguous"):
        RangePartitionBook(bad, 0)


@pytest.mark.parametrize("dtype,tail", [(np.float32, (3,)), (np.int64, ()), (np.bool_, ()), (np.int16, (5,))])
def test_checksum_adds_up_over_any_slicing(dtype, tail):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((101,) + tail) * 100).astype(dtype)
    whole = fletcher_partial(a, 0)
    row_bytes = a[0:1].nbytes
    for cuts in ([0, 101], [0, 1, 50, 101], [0, 33, 34, 99, 101]):
        s1 = s2 = 0
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            p1, p2 = fletcher_partial(a[lo:hi], lo * row_bytes)
            s1, s2 = (s1 + p1) % 2 ** 64, (s2 + p2) % 2 ** 64
        assert (s1, s2) == whole
    # Order-aware: swapping two different rows changes the checksum.
    b = a.copy()
    b[[0, 1]] = b[[1, 0]]
    if not np.array_equal(a[0], a[1]):
        assert fletcher_partial(b, 0) != whole
    # Definition (docs/format.md): over bytes b_j, s1 = sum b_j, s2 = sum (j+1) b_j.
    raw = np.frombuffer(np.ascontiguousarray(a).tobytes(), dtype=np.uint8).astype(object)
    assert whole == (int(raw.sum()) % 2 ** 64, int(sum((j + 1) * int(x) for j, x in enumerate(raw))) % 2 ** 64)
    assert len(checksum_hex(*whole)) == 32


def test_random_parts_depend_only_on_id_seed_and_parts():
    ids = np.arange(10000, dtype=np.int64)
    p = random_parts(ids, 7, seed=3)
    assert p.min() == 0 and p.max() == 6
    assert np.array_equal(np.concatenate([random_parts(ids[:123], 7, 3), random_parts(ids[123:], 7, 3)]), p)
    assert not np.array_equal(random_parts(ids, 7, seed=4), p)
    counts = np.bincount(p)
    assert counts.min() > 0.9 * 10000 / 7


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("dense", [True, False])
def test_map_ids_both_paths(monkeypatch, dense):
    """Old -> new ids through the all-gathered table and through the owners' answers."""
    from hpcgnn.comm.mpi import MPI
    from hpcgnn.partition import relabel

    comm = MPI.COMM_WORLD
    R, r = comm.Get_size(), comm.Get_rank()
    N = 5000
    perm = np.random.default_rng(7).permutation(N).astype(np.int64)   # new id of each old id
    vtxdist = np.array([N * i // R for i in range(R + 1)], dtype=np.int64)
    monkeypatch.setattr(relabel, "DENSE_MAP_BYTES", 8 * N if dense else 0)
    orig = np.random.default_rng(r).integers(0, N, 3000 + 17 * r).astype(np.int64)
    got = relabel.map_ids(comm, vtxdist, perm[vtxdist[r]:vtxdist[r + 1]], orig)
    np.testing.assert_array_equal(got, perm[orig])
