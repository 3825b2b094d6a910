"""Ids, counts, offsets and sizes past 2^31 (issue #30, "Past 2^31"), without 2^31 of
anything in memory: the helpers and kernels on int64 ids above 2^31 and 2^32, byte
offsets past 2^32, and ParMETIS' 32-bit limits on synthesized sizes (one process;
the collective parts: tests/partition/test_large_ids_mpi.py)."""
import numpy as np
import pytest

from hpcgnn import _ext
from hpcgnn.comm.rma import rowchecks as rs
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.io.checksum import fletcher_partial
from hpcgnn.partition import idx_limits, metis_part_kway, part_kway
from hpcgnn.partition.assign import owner_of, random_parts, symmetric_csr
from hpcgnn.partition.balance import _quota
from hpcgnn.partition.coarsen import contract, lp_clusters
from hpcgnn.partition.edges import LocalEdges
from hpcgnn.partition.relabel import IdLayout, assign_new_ids, map_ids
from hpcgnn.partition.verify import Checksum, fletcher

B31, B32 = 2**31, 2**32
SELF = MPI.COMM_SELF


# -- ids: owners, layouts, relabelling -----------------------------------------------

@pytest.mark.timeout(30)
def test_owner_of_past_2_32():
    bounds = np.array([0, B32, B32 + 5, 2**40], np.int64)
    ids = np.array([0, B32 - 1, B32, B32 + 4, B32 + 5, 2**40 - 1], np.int64)
    assert owner_of(bounds, ids).tolist() == [0, 0, 1, 1, 2, 2]
    assert rs.owner_of(ids, bounds).tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.timeout(30)
def test_id_layout_and_new_ids_past_2_31():
    # counts as a rank would report them for 2^31 + 5 nodes in part 0 (none held here)
    layout = IdLayout(SELF, np.array([B31 + 5, 3, B32], np.int64))
    assert layout.start.tolist() == [0, B31 + 5, B31 + 8, B31 + 8 + B32]
    assert layout.total == B31 + 8 + B32 and layout.part_size(2) == B32
    probe = np.array([B31 + 4, B31 + 5, B31 + 7, B31 + 8, B31 + 7 + B32], np.int64)
    assert layout.part_of(probe).tolist() == [0, 1, 1, 2, 2]
    assert layout.rank_of(probe).tolist() == [0] * 5
    assert layout.type_ranges(0)[2] == [B31 + 8, B31 + 8 + B32]
    new, order = assign_new_ids(np.array([1, 2, 1, 2, 2], np.int64), layout)
    assert new.dtype == np.int64
    assert new.tolist() == [B31 + 5, B31 + 8, B31 + 6, B31 + 9, B31 + 10]
    assert order.tolist() == [0, 2, 1, 3, 4]


@pytest.mark.timeout(30)
def test_map_ids_by_query_past_2_33():
    vtxdist = np.array([2**33, 2**33 + 6], np.int64)     # 8 * 2^33 bytes: the query path, not a table
    new_ids = np.arange(6, dtype=np.int64) + B32 + 7
    got = map_ids(SELF, vtxdist, new_ids, np.array([2**33 + 5, 2**33, 2**33 + 5, 2**33 + 2], np.int64))
    assert got.tolist() == [B32 + 12, B32 + 7, B32 + 12, B32 + 9]


@pytest.mark.timeout(30)
def test_random_parts_hash_all_64_bits():
    ids = 5 + np.arange(8, dtype=np.int64) * B32       # equal in their low 32 bits
    p = random_parts(ids, 1000, seed=3)
    assert p.min() >= 0 and p.max() < 1000 and len(set(p.tolist())) > 1
    assert np.array_equal(p, random_parts(ids, 1000, seed=3))


@pytest.mark.timeout(30)
def test_edges_order_when_bin_times_ids_passes_int64():
    """Typed bins over 2^60 ids: (bin, owner) no longer fits one int64 key, and the
    edges are still ordered by bin, then owner endpoint, then original id."""
    nodes = IdLayout(SELF, np.array([2**60, 3, 2**60, 2**59], np.int64), types=2)    # 2 parts x 2 node types
    bs = nodes.bin_start
    own = np.array([bs[2] + 1, bs[0] + 3, bs[2] + 1, bs[1], bs[3] + 5, bs[0] + 3, bs[0]], np.int64)
    other = np.arange(7, dtype=np.int64) + B32
    edges = LocalEdges(SELF, nodes, [own.copy(), other.copy()], 2**40, {})
    order = np.lexsort((np.arange(7), own, owner_of(bs, own)))
    assert edges.own.tolist() == own[order].tolist() and edges.other.tolist() == other[order].tolist()
    assert edges.orig_eid.tolist() == (2**40 + order).tolist()
    assert edges.bseg.tolist() == [0, 3, 4, 6, 7]


@pytest.mark.timeout(30)
def test_rebalancing_quota_of_billions():
    assert _quota(4_000_000_000, np.array([3_000_000_000, 3_000_000_000, 0])).tolist() == \
        [2_000_000_000, 2_000_000_000, 0]


# -- the symmetric view and the CSR builder ------------------------------------------

@pytest.mark.timeout(30)
def test_csr_fill_and_dedup_with_rows_past_2_31_and_columns_past_2_32():
    row0 = B31 + 100
    rows = np.array([row0 + 2, row0, row0 + 2, row0 + 1, row0 + 2], np.int64)
    cols = np.array([2**40, B32 + 1, B32 + 1, 7, 2**40], np.int64)
    xadj = np.array([0, 1, 2, 5], np.int64)
    pos, adj = xadj[:-1].copy(), np.zeros(5, np.int64)
    _ext.csr_fill(rows, cols, row0, pos, xadj[1:], adj)
    assert adj.tolist() == [B32 + 1, 7, 2**40, B32 + 1, 2**40]
    assert _ext.csr_sort_dedup(xadj, adj) == 4
    assert xadj.tolist() == [0, 1, 2, 4] and adj[:4].tolist() == [B32 + 1, 7, B32 + 1, 2**40]
    with pytest.raises(ValueError, match="outside the block"):   # a row id 2^32 away is not wrapped in
        _ext.csr_fill(np.array([row0 + B32], np.int64), cols[:1], row0, xadj[:-1].copy(), xadj[1:], adj)


@pytest.mark.timeout(30)
def test_symmetric_csr_of_ids_past_2_33():
    base = 2**33
    vtxdist = np.array([base, base + 6], np.int64)
    src = base + np.array([0, 1, 1, 2, 5, 3, 3], np.int64)
    dst = base + np.array([1, 0, 1, 5, 2, 4, 0], np.int64)   # a repeat (both ways), a loop
    xadj, adjncy = symmetric_csr(SELF, vtxdist, src, dst, chunk=2)
    want = {0: [1, 3], 1: [0], 2: [5], 3: [0, 4], 4: [3], 5: [2]}
    assert xadj.tolist() == np.cumsum([0] + [len(want[v]) for v in range(6)]).tolist()
    assert adjncy.tolist() == [base + u for v in range(6) for u in want[v]]


# -- label propagation --------------------------------------------------------------

def _two_cliques(k, base):
    xadj, adj = [0], []
    for v in range(2 * k):
        c = v // k
        adj += [base + u for u in range(c * k, c * k + k) if u != v] + ([base + k] if v == 0 else [])
        adj += [base] if v == k else []
        xadj.append(len(adj))
    return np.array(xadj, np.int64), np.array(adj, np.int64)


@pytest.mark.timeout(30)
def test_lp_cluster_with_a_block_starting_past_2_33():
    k = 8
    w = np.ones(2 * k, np.int64)
    x0, a0 = _two_cliques(k, 0)
    xb, ab = _two_cliques(k, 2**33 + 11)
    n0, lab0 = _ext.lp_cluster(x0, a0, 0, w, k, 10, 5)
    nb, labb = _ext.lp_cluster(xb, ab, 2**33 + 11, w, k, 10, 5)
    assert (n0, lab0.tolist()) == (nb, labb.tolist())
    assert not set(labb[:k]) & set(labb[k:])


@pytest.mark.timeout(30)
def test_coarsening_refuses_int32_overflows_with_the_fix():
    vtxdist = np.array([0, B31], np.int64)                 # one rank's block past the kernel's int32 labels
    with pytest.raises(InputError, match=r"at most 2147483646 \(2\^31-2\) per rank: run on at least 2 ranks"):
        lp_clusters(SELF, vtxdist, np.zeros(1, np.int64), np.zeros(0, np.int64), np.ones(0, np.int64), 2, 0,
                    total=B31)
    with pytest.raises(InputError, match=r"2147483648 clusters.*--method random"):
        contract(SELF, np.array([0, 2], np.int64), np.array([0, 0, 0], np.int64), np.zeros(0, np.int64),
                 np.array([0, 1], np.int64), np.array([0, B31], np.int64), [np.ones(2, np.int64)])


# -- the sampler -------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_sample_ranges_with_edge_ids_past_2_40():
    rows = np.array([[2**40, 2**40 + 10], [2**33 - 3, 2**33 + 3], [B31 + 1, B31 + 1]], np.int64)
    eids, counts = _ext.sample_ranges(rows.reshape(-1), 4, False, 7)
    assert counts.tolist() == [4, 4, 0]
    a, b = eids[:4], eids[4:]
    assert len(set(a.tolist())) == 4 and a.min() >= 2**40 and a.max() < 2**40 + 10
    assert len(set(b.tolist())) == 4 and b.min() >= 2**33 - 3 and b.max() < 2**33 + 3
    e, c = _ext.sample_ranges(rows.reshape(-1), 5, True, 9)
    assert c.tolist() == [5, 5, 0] and e[:5].min() >= 2**40 and e[5:].max() < 2**33 + 3
    e, c = _ext.sample_ranges(rows.reshape(-1), -1, False, 1)
    assert e.tolist() == list(range(2**40, 2**40 + 10)) + list(range(2**33 - 3, 2**33 + 3))
    w = np.zeros(16)
    w[[2, 5, 11, 12]] = [1.0, 3.0, 2.0, 0.5]                # positive: 2 of the first range, 2 of the second
    e, c = _ext.sample_ranges(rows.reshape(-1), 3, False, 11, weights=w)
    assert c.tolist() == [2, 2, 0]
    assert sorted(e.tolist()) == sorted([2**40 + 2, 2**40 + 5, 2**33 - 3 + 1, 2**33 - 3 + 2])


@pytest.mark.timeout(30)
def test_relabel_tells_apart_ids_equal_in_their_low_32_bits():
    ids = np.array([5, 5 + B32, 5 + 2**33, 5, 5 + B32, 2**62 + 5], np.int64)
    nodes, local = _ext.relabel(ids[:2].copy(), ids[2:].copy())
    assert nodes.tolist() == [5, 5 + B32, 5 + 2**33, 2**62 + 5]
    assert local.tolist() == [2, 0, 1, 3]


# -- row gathers and one-sided transfers -----------------------------------------------

@pytest.mark.timeout(30)
def test_gather_ranges_with_row_ids_past_2_33():
    table = np.arange(24, dtype=np.float32).reshape(8, 3)            # rows 2^33 .. 2^33+7
    bounds = np.array([0, 2**33, 2**33 + 8, 2**34], np.int64)
    bases = np.array([0, table.ctypes.data, 0], dtype=np.uintp)
    ids = np.array([2**33 + 7, 2**33, 5, 2**34 - 1, 2**33 + 3], np.int64)
    out = np.zeros((5, 3), np.float32)
    range_of = np.empty(5, np.int32)
    assert _ext.gather_ranges(bases, bounds, ids, out, range_of) == 2
    assert range_of.tolist() == [-1, -1, 0, 2, -1]
    assert out[[0, 1, 4]].tolist() == table[[7, 0, 3]].tolist()
    cache_ids = np.array([5, 2**34 - 1], np.int64)
    cache_rows = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    assert _ext.gather_ranges(bases, bounds, ids, out, range_of, cache_ids, cache_rows) == 0
    assert range_of.tolist() == [-1, -1, -2, -2, -1] and out[[2, 3]].tolist() == cache_rows.tolist()


@pytest.mark.timeout(30)
def test_row_addresses_and_route_by_range_compute_byte_offsets_in_64_bits():
    bounds = np.array([0, 2**33, 2**34], np.int64)
    bases = np.array([0, 1 << 40], dtype=np.uintp)                    # addresses only, never read
    ids = np.array([2**33 + 2**12, 7], np.int64)
    addr, range_of = np.zeros(2, np.uintp), np.empty(2, np.int32)
    assert _ext.row_addresses(bases, bounds, 1 << 20, ids, addr, range_of) == 1
    assert int(addr[0]) == (1 << 40) + (1 << 32) and range_of.tolist() == [-1, 0]
    bounds = np.array([0, B32, 2**34], np.int64)
    ids = np.array([2**33, 5, 2**34 - 1], np.int64)
    pos, disps, counts = _ext.route_by_range(bounds, np.array([1, 0], np.uint8), ids,
                                             np.array([0, B31], np.int64), 4096)
    assert pos.tolist() == [0, 2] and counts.tolist() == [0, 2]
    assert disps.tolist() == [(2**33 - B32 + B31) * 4096, (2**34 - 1 - B32 + B31) * 4096]


@pytest.mark.timeout(30)
def test_hindexed_datatype_with_displacements_past_2_32():
    from hpcgnn.comm.rma.datatypes import blocks_type

    dt = blocks_type(MPI.BYTE, 8, np.array([0, 2**33, 2**35], np.int64))
    try:
        assert dt.Get_size() == 24
        assert dt.Get_extent() == (0, 2**35 + 8)
    finally:
        dt.Free()


# -- checksums at byte offsets past 2^32 -----------------------------------------------

def _direct(arr, off):
    b = [int(x) for x in np.ascontiguousarray(arr).view(np.uint8)]
    return sum(b) % 2**64, sum((off + j + 1) * x for j, x in enumerate(b)) % 2**64


@pytest.mark.timeout(30)
@pytest.mark.parametrize("off", [2**33 + 3, 2**62 + 12345])
def test_checksums_at_byte_offsets_past_2_32(off):
    arr = (np.arange(1000, dtype=np.int64) * 7919) ^ (np.arange(1000, dtype=np.int64) << 40)
    want = _direct(arr, off)
    assert fletcher_partial(arr, off) == want
    assert fletcher(arr, off) == want
    s1a, s2a = fletcher_partial(arr[:300], off)                 # slices add up, wherever they start
    s1b, s2b = fletcher_partial(arr[300:], off + 300 * 8)
    assert ((s1a + s1b) % 2**64, (s2a + s2b) % 2**64) == want
    c = Checksum()
    c.nbytes = off
    c.add(arr)
    assert (c.s1, c.s2) == want


# -- ParMETIS' 32-bit idx_t -----------------------------------------------------------

@pytest.mark.timeout(30)
def test_size_problem_names_each_limit():
    assert idx_limits.IDX_MAX == 2**31 - 1                   # Debian's ParMETIS; the tests below assume it
    text, ranks = idx_limits.size_problem([0, B31], [0])
    assert "2147483648 vertices" in text and "at most 2147483646" in text and ranks == 0
    text, ranks = idx_limits.size_problem([0, 10**8, 2 * 10**8], [1_500_000_000, 700_000_000])
    assert "2200000000 adjacency entries in all" in text and "2147483647 (2^31-1)" in text and ranks == 0
    text, ranks = idx_limits.size_problem([0, 3 * 10**8], [10])
    assert "rank 0 holds 300000000 vertices" in text and "214748364 per rank" in text and ranks == 2
    text, ranks = idx_limits.size_problem([0, 5, 10], [3, 1_200_000_000])
    assert "rank 1 holds 1200000000 adjacency entries" in text and "1073741823 per rank" in text and ranks == 2
    assert idx_limits.size_problem([0, 10**8, 2 * 10**8], [10**9, 10**9]) is None


@pytest.mark.timeout(30)
def test_check_sizes_raises_with_the_fix():
    with pytest.raises(InputError, match=r"g\.h5: the graph has 3000000000 adjacency entries.*--coarsen lp"):
        idx_limits.check_sizes(SELF, np.array([0, 10**6]), 3_000_000_000, "g.h5")
    with pytest.raises(InputError, match=r"holds 300000000 vertices.*: run on at least 2 ranks, or coarsen"):
        idx_limits.check_sizes(SELF, np.array([0, 3 * 10**8]), 0, "g.h5")
    idx_limits.check_sizes(SELF, np.array([0, 10**6]), 10**9, "g.h5")     # fits: no error


@pytest.mark.timeout(30)
def test_fit_weights_scales_only_columns_past_the_limit():
    ok = np.array([[1, 5], [2, 0]], np.int64)
    assert idx_limits.fit_weights(SELF, ok) is ok or np.array_equal(idx_limits.fit_weights(SELF, ok), ok)
    w = np.array([[3_000_000_000, 1], [1, 2], [0, 3], [1_500_000_000, 4]], np.int64)
    got = idx_limits.fit_weights(SELF, w)
    assert got.sum(axis=0)[0] <= idx_limits.WEIGHT_LIMIT
    assert got[:, 1].tolist() == [1, 2, 3, 4]                   # a column that fits is left alone
    assert got[2, 0] == 0 and got[1, 0] >= 1                    # zeros stay, positives stay positive
    assert abs(got[0, 0] / got[3, 0] - 2.0) < 1e-6
    one = idx_limits.fit_weights(SELF, np.full(3, 2**40, np.int64))
    assert one.shape == (3,) and int(one.sum()) <= idx_limits.WEIGHT_LIMIT and len(set(one.tolist())) == 1


def _ring(n):
    xadj = np.arange(0, 2 * n + 1, 2, dtype=np.int64)
    adj = np.stack([(np.arange(n) - 1) % n, (np.arange(n) + 1) % n], axis=1).reshape(-1).astype(np.int64)
    return xadj, adj


@pytest.mark.timeout(30)
def test_part_kway_refuses_what_idx_t_cannot_hold_before_calling_parmetis(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("ParMETIS was called")

    xadj, adj = _ring(40)
    monkeypatch.setattr(_ext, "parmetis_part_kway", boom)
    monkeypatch.setattr(_ext, "metis_part_kway", boom)
    monkeypatch.setattr(idx_limits, "ENTRY_LIMIT", 79)                # the ring has 80 entries
    with pytest.raises(InputError, match=r"part_kway: the graph has 80 adjacency entries in all.*at most 79"):
        part_kway(SELF, np.array([0, 40]), xadj, adj, nparts=2)
    with pytest.raises(InputError, match=r"metis_part_kway: the graph has 80 adjacency entries"):
        metis_part_kway(xadj, adj, nparts=2)
    assert part_kway(SELF, np.array([0, 40]), xadj, adj, nparts=1).tolist() == [0] * 40   # no ParMETIS: fine


@pytest.mark.timeout(30)
def test_part_kway_scales_weight_sums_past_idx_t(monkeypatch):
    real = _ext.parmetis_part_kway
    seen = {}

    def spy(comm, vtxdist, xadj, adjncy, vwgt, adjwgt, *rest):
        seen["vwgt"], seen["adjwgt"] = vwgt.copy(), adjwgt.copy()
        return real(comm, vtxdist, xadj, adjncy, vwgt, adjwgt, *rest)

    xadj, adj = _ring(40)
    monkeypatch.setattr(_ext, "parmetis_part_kway", spy)
    monkeypatch.setattr(idx_limits, "WEIGHT_LIMIT", 1000)
    vw = np.stack([np.full(40, 100), np.arange(40) % 2], axis=1).reshape(-1)    # sums 4000 and 20
    part = part_kway(SELF, np.array([0, 40]), xadj, adj, vwgt=vw, ncon=2, nparts=2, adjwgt=np.full(80, 50))
    v = seen["vwgt"].reshape(40, 2)
    assert v[:, 0].sum() <= 1000 and len(set(v[:, 0].tolist())) == 1 and v[:, 1].tolist() == vw[1::2].tolist()
    assert seen["adjwgt"].sum() <= 1000 and seen["adjwgt"].min() >= 1
    assert np.bincount(part, minlength=2).max() <= 21
