"""The streaming partition check (``hpcgnn verify --raw``, hpcgnn.partition.check) in
one process: a clean partition passes, and each kind of damage — an edge replaced
(one dropped, one repeated), a node feature row changed, an original id repeated,
a half-precision value off by one unit — fails naming the dataset and the partition.
tests/partition/test_check_stream_mpi.py runs it at 2 and 3 ranks."""
import argparse
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from hpcgnn.cli.verify import run
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.partition import partition_graph
from hpcgnn.partition.check import check_partition_stream
from hpcgnn.partition.digest import Tally, hash_ids, hash_rows, sums_by
from harness import planted_graph, write_raw

SELF = MPI.COMM_SELF


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """A raw graph (typed, with edge data) and its partitions: float32, bf16 and fp16 features."""
    d = tmp_path_factory.mktemp("check")
    src, dst, _ = planted_graph(2000, 6, 4, seed=3)
    raw = str(d / "raw.h5")
    write_raw(raw, 2000, src, dst, types=True, feat_dim=6)
    out = {"raw": raw}
    for name, kw in (("f32", {}), ("bf16", {"feat_dtype": "bf16"}), ("out", {"edge_dir": "out", "num_hops": 2, "feat_dtype": "fp16"})):
        out[name] = partition_graph(raw, str(d / name), 3, comm=SELF, return_mapping=True, seed=2, **kw)
    out["nomap"] = partition_graph(raw, str(d / "nomap"), 2, comm=SELF, seed=2)
    return out


def _copy(cfg, tmp_path):
    """A copy of a partitioned graph to damage."""
    dst = str(tmp_path / "copy")
    shutil.copytree(os.path.dirname(cfg), dst)
    return os.path.join(dst, os.path.basename(cfg)), os.path.join(dst, "g.h5")


def _fails(graphs, cfg, *needles):
    with pytest.raises(InputError) as e:
        check_partition_stream(graphs["raw"], cfg, SELF, chunk_rows=700)
    msg = str(e.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["f32", "bf16", "out"])
def test_a_clean_partition_passes(graphs, name):
    for chunk in (700, 23) if name == "out" else (700,):    # several chunks; some splitting a node's edges
        got = check_partition_stream(graphs["raw"], graphs[name], SELF, chunk_rows=chunk)
    assert got["ok"] and got["num_edges"] == 2000 * 6 // 2 and got["num_parts"] == 3
    assert {"edges", "orig_eid", "node/feat", "node_type", "edge_type", "edge/e2"} <= set(got["fields"])
    assert got["half_precision"] == {"f32": {}, "bf16": {"node/feat": "bfloat16"}, "out": {"node/feat": "float16"}}[name]


@pytest.mark.timeout(60)
def test_an_edge_replaced_is_found(graphs, tmp_path):
    cfg, h5 = _copy(graphs["f32"], tmp_path)
    with h5py.File(h5, "r+") as f:
        d = f["part1/csr/indices"]
        j = int(np.flatnonzero(d[:-1] != d[1:])[0])
        d[j] = d[j + 1]                  # edge j dropped, the other endpoint of edge j + 1 repeated
    _fails(graphs, cfg, "g.h5: dataset /part1/csr/indices (partition 1)", "an edge is missing, repeated")


@pytest.mark.timeout(60)
def test_a_changed_feature_row_is_found(graphs, tmp_path):
    cfg, h5 = _copy(graphs["f32"], tmp_path)
    with h5py.File(h5, "r+") as f:
        f["part2/node/feat"][5, 3] += 1e-3
    msg = _fails(graphs, cfg, "/part2/node/feat (partition 2) differs from", "/nodes/data/feat")
    assert "also" not in msg


@pytest.mark.timeout(60)
def test_a_repeated_original_id_is_found(graphs, tmp_path):
    cfg, h5 = _copy(graphs["f32"], tmp_path)
    with h5py.File(h5, "r+") as f:
        f["part2/orig_nid"][7] = f["part0/orig_nid"][3]
    _fails(graphs, cfg, "/orig_nid", "is stored by partitions 0 and 2: every node must have one owner")
    with h5py.File(h5, "r+") as f:
        f["part2/orig_nid"][7] = 2000
    _fails(graphs, cfg, "/part2/orig_nid (partition 2): value 2000 at row 7 is not a node id")


@pytest.mark.timeout(60)
def test_a_wrong_bf16_value_is_found(graphs, tmp_path):
    cfg, h5 = _copy(graphs["bf16"], tmp_path)
    with h5py.File(h5, "r+") as f:
        d = f["part0/node/feat"]
        assert d.dtype == np.uint16
        d[4, 2] = d[4, 2] + 1                   # one unit in the last place
    _fails(graphs, cfg, "/part0/node/feat (partition 0)", "rounded to bfloat16")


@pytest.mark.timeout(60)
def test_edge_data_types_and_csr_are_checked(graphs, tmp_path):
    cfg, h5 = _copy(graphs["out"], tmp_path)
    with h5py.File(h5, "r+") as f:
        f["part1/edge/w"][3] = -1.0
    _fails(graphs, cfg, "/part1/edge/w (partition 1) differs from", "under the mapping orig_eid")
    cfg, h5 = _copy(graphs["f32"], tmp_path / "b")
    with h5py.File(h5, "r+") as f:
        f["part0/orig_eid"][0:2] = f["part0/orig_eid"][0:2][::-1]    # two edges' original ids swapped
    _fails(graphs, cfg, "/part0/orig_eid (partition 0): the original edge ids do not name the raw rows")
    with h5py.File(h5, "r+") as f:
        f["part0/csr/indptr"][2] = 10 ** 9
    _fails(graphs, cfg, "/part0/csr/indptr (partition 0): decreases at row 3")


@pytest.mark.timeout(60)
def test_without_the_mapping_it_says_what_is_missing(graphs, tmp_path):
    _fails(graphs, graphs["nomap"], "without --return-mapping", "partition again with --return-mapping")
    other = str(tmp_path / "other.h5")
    src, dst, _ = planted_graph(2000, 4, 4, seed=9)
    write_raw(other, 2000, src, dst, types=True, feat_dim=6)
    with pytest.raises(InputError, match="attribute 'num_edges' is 4000, but .* has 6000"):
        check_partition_stream(other, graphs["f32"], SELF)


@pytest.mark.timeout(60)
def test_the_verify_command_runs_it(graphs, tmp_path, capsys):
    assert run(argparse.Namespace(config=graphs["bf16"], raw=graphs["raw"], json=True, chunk_rows=900)) == 0
    s = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert s["ok"] and s["raw_check"]["ok"] and s["raw_check"]["half_precision"] == {"node/feat": "bfloat16"}
    assert len(s["peak_rss_bytes_per_rank"]) == 1 and s["raw_check"]["seconds"] >= 0 and "edges_s" in s["raw_check"]
    cfg, h5 = _copy(graphs["f32"], tmp_path)
    with h5py.File(h5, "r+") as f:
        f["part1/node/label"][0] += 1
    assert run(argparse.Namespace(config=cfg, raw=graphs["raw"], json=False)) == 1
    out = capsys.readouterr()
    s = json.loads(out.out.splitlines()[-1])
    assert not s["ok"] and s["problems"] == 2 and "/part1/node/label (partition 1) differs" in s["raw_problem"]
    assert "hpcgnn verify: error (rank 0/1):" in out.err and "peak_rss_bytes_per_rank" not in s


@pytest.mark.timeout(30)
def test_digests_are_order_independent_and_exact():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 1 << 40, 5000), rng.integers(0, 1 << 40, 5000)
    rows = rng.standard_normal((5000, 3)).astype(np.float32)
    h = hash_rows(hash_ids("x", a, b), rows)
    perm = rng.permutation(5000)
    assert h[perm].sum(dtype=np.uint64) == hash_rows(hash_ids("x", a[perm], b[perm]), rows[perm]).sum(dtype=np.uint64)
    assert len(np.unique(h)) == 5000 and not np.array_equal(h, hash_rows(hash_ids("y", a, b), rows))
    parts = rng.integers(0, 4, 5000)
    want = [sum(int(v) for v in h[parts == p]) % (1 << 64) for p in range(4)]
    assert sums_by(parts, h, 4).tolist() == want
    t = Tally(["x"], 4)
    t.add(Tally.RAW, "x", parts, h)
    for p in range(4):
        t.add(Tally.PART, "x", p, h[parts == p])
    t.reduce(SELF)
    assert t.mismatches() == []
    t.add(Tally.PART, "x", 2, h[:1])
    assert t.mismatches() == [("x", 2, int((parts == 2).sum()), int((parts == 2).sum()) + 1)]
