"""Converters (OGB directory, edge lists, PyG) and validation of raw files."""
import gzip
import json
import os
import shutil
import tempfile
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import RawGraph, convert, validate_raw
from hpcgnn.datasets.convert import convert_edges, convert_ogb, from_pyg
from hpcgnn.errors import InputError

WORLD = MPI.COMM_WORLD
single = pytest.mark.skipif(WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")

EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 6], [6, 3], [0, 6], [2, 2]])
N = 7


@pytest.fixture
def shared_tmp():
    """A directory made by rank 0, the same on every rank, removed afterwards."""
    path = WORLD.bcast(tempfile.mkdtemp(prefix="hpcgnn-test-") if WORLD.Get_rank() == 0 else None, root=0)
    yield path
    WORLD.Barrier()
    if WORLD.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def small_blocks(monkeypatch):
    """Stream inputs a few bytes / rows at a time, so that blocks split files."""
    monkeypatch.setattr(convert, "BLOCK_BYTES", 7)
    monkeypatch.setattr(convert, "BLOCK_ROWS", 2)


def write_gz(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(r)) + "\n")


def make_ogb(root, name="ogbn_tiny"):
    """A tiny dataset in the layout the ogb package leaves after download."""
    d = os.path.join(root, name)
    feat = np.arange(N * 3, dtype=np.float32).reshape(N, 3) / 4
    write_gz(f"{d}/raw/edge.csv.gz", EDGES)
    write_gz(f"{d}/raw/num-node-list.csv.gz", [N])
    write_gz(f"{d}/raw/num-edge-list.csv.gz", [len(EDGES)])
    write_gz(f"{d}/raw/node-feat.csv.gz", feat)
    write_gz(f"{d}/raw/node-label.csv.gz", [[c] for c in (0, 0, 0, 1, 1, 1, 2)])
    write_gz(f"{d}/raw/edge-feat.csv.gz", np.arange(len(EDGES) * 2).reshape(-1, 2))
    write_gz(f"{d}/split/time/train.csv.gz", [0, 3, 4])
    write_gz(f"{d}/split/time/valid.csv.gz", [1, 5])
    write_gz(f"{d}/split/time/test.csv.gz", [2, 6])
    return d, feat


@single
def test_ogb_directory(tmp_path, small_blocks):
    d, feat = make_ogb(str(tmp_path))
    out = str(tmp_path / "tiny.h5")
    info = convert_ogb(d, out)
    assert info["num_nodes"] == N and info["num_edges"] == len(EDGES) and info["num_classes"] == 3
    v = validate_raw(out)
    assert v["graph_name"] == "ogbn_tiny" and v["edge_data"] == {"feat": ("float32", (9, 2))}
    with RawGraph(out) as g:
        src, dst = g.read_edges()
        assert np.array_equal(np.stack([src, dst], 1), EDGES)
        assert np.array_equal(g.read_node_data("feat"), feat)
        assert np.array_equal(g.read_node_data("label"), [0, 0, 0, 1, 1, 1, 2])
        assert np.flatnonzero(g.read_node_data("train_mask")).tolist() == [0, 3, 4]
        assert np.flatnonzero(g.read_node_data("val_mask")).tolist() == [1, 5]
        assert np.flatnonzero(g.read_node_data("test_mask")).tolist() == [2, 6]
    assert not os.path.exists(out + ".partial")


@single
def test_ogb_nan_labels_become_minus_one(tmp_path):
    d, _ = make_ogb(str(tmp_path))
    write_gz(f"{d}/raw/node-label.csv.gz", [[0], ["nan"], [1], [1], [0], ["nan"], [2]])
    out = str(tmp_path / "nan.h5")
    convert_ogb(d, out)
    with RawGraph(out) as g:
        assert g.read_node_data("label").tolist() == [0, -1, 1, 1, 0, -1, 2]


@single
@pytest.mark.parametrize("damage, field", [
    ("missing_edges", "edge.csv.gz"),
    ("bad_id", "edge.csv.gz"),
    ("row_count", "num-edge-list"),
    ("columns", "edge.csv.gz"),
    ("bad_split_id", "valid.csv.gz"),
    ("feat_rows", "node-feat"),
    ("fractional_label", "node-label"),
    ("negative_label", "node-label"),
    ("empty_labels", "node-label"),
    ("fractional_count", "num-node-list"),
    ("overlapping_splits", "test.csv.gz: node 5 is also in valid.csv.gz"),
])
def test_ogb_bad_input_names_the_file_and_leaves_no_output(tmp_path, damage, field):
    d, _ = make_ogb(str(tmp_path))
    if damage == "missing_edges":
        os.remove(f"{d}/raw/edge.csv.gz")
    elif damage == "bad_id":
        write_gz(f"{d}/raw/edge.csv.gz", np.vstack([EDGES[:-1], [[1, N]]]))
    elif damage == "row_count":
        write_gz(f"{d}/raw/num-edge-list.csv.gz", [len(EDGES) + 1])
    elif damage == "columns":
        write_gz(f"{d}/raw/edge.csv.gz", np.hstack([EDGES, EDGES]))
    elif damage == "bad_split_id":
        write_gz(f"{d}/split/time/valid.csv.gz", [1, 99])
    elif damage == "feat_rows":
        write_gz(f"{d}/raw/node-feat.csv.gz", np.zeros((N - 1, 3)))
    elif damage in ("fractional_label", "negative_label"):
        bad = 1.7 if damage == "fractional_label" else -5
        write_gz(f"{d}/raw/node-label.csv.gz", [[0], [bad]] + [[1]] * (N - 2))
    elif damage == "empty_labels":
        write_gz(f"{d}/raw/node-label.csv.gz", np.zeros((0, 1)))
    elif damage == "fractional_count":
        write_gz(f"{d}/raw/num-node-list.csv.gz", [N + 0.5])
    elif damage == "overlapping_splits":
        write_gz(f"{d}/split/time/test.csv.gz", [2, 5, 6])
    out = str(tmp_path / "out.h5")
    with pytest.raises(InputError) as err:
        convert_ogb(d, out)
    assert field in str(err.value)
    assert not os.path.exists(out) and not os.path.exists(out + ".partial")


@single
def test_cli_convert_ogb_and_edges(tmp_path, capsys):
    from hpcgnn.cli.main import main

    d, _ = make_ogb(str(tmp_path))
    out = str(tmp_path / "cli.h5")
    assert main(["convert", "ogb", d, out, "--split", "time", "--name", "tiny"]) == 0
    assert "7 nodes, 9 edges" in capsys.readouterr().out
    assert validate_raw(out)["graph_name"] == "tiny"
    npy = str(tmp_path / "e.npy")
    np.save(npy, EDGES)
    assert main(["convert", "edges", npy, out, "--num-nodes", "10", "--overwrite"]) == 0
    assert validate_raw(out)["num_nodes"] == 10


def edges_of(path):
    with RawGraph(path) as g:
        src, dst = g.read_edges()
        return g.num_nodes, np.stack([src, dst], 1)


@single
@pytest.mark.parametrize("layout", ["E2", "2E"])
def test_edges_npy(tmp_path, small_blocks, layout):
    src = str(tmp_path / "e.npy")
    np.save(src, (EDGES if layout == "E2" else EDGES.T).astype(np.int32))
    out = str(tmp_path / "e.h5")
    info = convert_edges(src, out)
    assert info == {"path": out, "num_nodes": N, "num_edges": len(EDGES), "num_classes": None}
    n, e = edges_of(out)
    assert n == N and np.array_equal(e, EDGES) and validate_raw(out)["node_data"] == {}


@single
def test_edges_csv_variants(tmp_path, small_blocks):
    # header, columns named in another order, an extra column
    p = tmp_path / "h.csv"
    p.write_text("weight,dst,src\n" + "".join(f"0.5,{d},{s}\n" for s, d in EDGES))
    out = str(tmp_path / "h.h5")
    convert_edges(str(p), out)
    assert np.array_equal(edges_of(out)[1], EDGES)
    convert_edges(str(p), out, src_col="dst", dst_col=2, overwrite=True)
    assert np.array_equal(edges_of(out)[1], EDGES[:, ::-1])
    # SNAP style: comments, tabs, gzip
    g = str(tmp_path / "snap.txt.gz")
    with gzip.open(g, "wt") as f:
        f.write("# Directed graph\n# FromNodeId\tToNodeId\n" + "".join(f"{s}\t{d}\n" for s, d in EDGES))
    convert_edges(g, out, num_nodes=12, overwrite=True)
    n, e = edges_of(out)
    assert n == 12 and np.array_equal(e, EDGES)
    # no header, a float weight column
    p.write_text("".join(f"{s},{d},0.25\n" for s, d in EDGES))
    convert_edges(str(p), out, overwrite=True)
    assert np.array_equal(edges_of(out)[1], EDGES)


@single
def test_edges_bad_input(tmp_path):
    out = str(tmp_path / "o.h5")
    npy = str(tmp_path / "e.npy")
    np.save(npy, EDGES)
    with pytest.raises(InputError, match=r"e\.npy: (src|dst): id 6 at row"):
        convert_edges(npy, out, num_nodes=6)
    np.save(npy, np.zeros((4, 3), dtype=np.int64))
    with pytest.raises(InputError, match=r"\[E, 2\]"):
        convert_edges(npy, out)
    csv = tmp_path / "e.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="'src'.*not found"):
        convert_edges(str(csv), out, src_col="src")
    csv.write_text("1,2\n3,x\n")
    with pytest.raises(InputError, match="e.csv"):
        convert_edges(str(csv), out)
    with pytest.raises(InputError, match="no such file"):
        convert_edges(str(tmp_path / "missing.csv"), out)
    assert not os.path.exists(out) and not os.path.exists(out + ".partial")


@single
def test_edges_parquet(tmp_path, small_blocks):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = str(tmp_path / "e.parquet")
    pq.write_table(pa.table({"u": EDGES[:, 0], "v": EDGES[:, 1], "w": np.ones(len(EDGES))}), p)
    out = str(tmp_path / "pq.h5")
    convert_edges(p, out)
    assert np.array_equal(edges_of(out)[1], EDGES)
    convert_edges(p, out, src_col="v", dst_col="u", overwrite=True)
    assert np.array_equal(edges_of(out)[1], EDGES[:, ::-1])
    with pytest.raises(InputError, match="'nope'"):
        convert_edges(p, out, src_col="nope", overwrite=True)


def pyg_data(plain=False):
    """A 50-node graph as a torch_geometric Data, or (``plain``) as a namespace of
    NumPy arrays with the same attributes (from_pyg accepts both; it avoids importing
    torch_geometric in every rank of the multi-rank runs)."""
    rng = np.random.default_rng(0)
    n, ar = 50, np.arange(50)
    arrays = dict(x=rng.standard_normal((n, 5)).astype(np.float32), y=rng.integers(0, 4, n),
                  edge_index=rng.integers(0, n, (2, 200)), edge_attr=rng.random((200, 2)).astype(np.float32),
                  train_mask=ar < 30, val_mask=(ar >= 30) & (ar < 40), test_mask=ar >= 40)
    if plain:
        return SimpleNamespace(num_nodes=n, **arrays)
    torch = pytest.importorskip("torch")
    from torch_geometric.data import Data

    return Data(**{k: torch.from_numpy(v) for k, v in arrays.items()})


def np_of(v):
    return v.numpy() if hasattr(v, "numpy") else v


def check_pyg_file(path, data):
    info = validate_raw(path)
    assert info["num_nodes"] == 50 and info["num_edges"] == 200 and info["num_classes"] == int(data.y.max()) + 1
    with RawGraph(path) as g:
        src, dst = g.read_edges()
        assert np.array_equal(np.stack([src, dst]), np_of(data.edge_index))
        assert np.array_equal(g.read_node_data("feat"), np_of(data.x))
        assert np.array_equal(g.read_node_data("label"), np_of(data.y))
        assert np.array_equal(g.read_node_data("val_mask"), np_of(data.val_mask))
        assert np.array_equal(g.read_edge_data("feat"), np_of(data.edge_attr))


@single
def test_from_pyg(tmp_path):
    data = pyg_data()
    out = str(tmp_path / "pyg.h5")
    from_pyg(data, out, name="toy")
    check_pyg_file(out, data)
    data.train_mask = data.train_mask[:-1]
    with pytest.raises(InputError, match=r"pyg\.h5: data\.train_mask: first dimension"):
        from_pyg(data, out, overwrite=True)
    from torch_geometric.data import HeteroData

    with pytest.raises(InputError, match="a HeteroData .* is not converted"):
        from_pyg(HeteroData(), out, overwrite=True)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_from_pyg_parallel(shared_tmp):
    data = pyg_data(plain=True)
    out = os.path.join(shared_tmp, "pyg.h5")
    from_pyg(data, out, comm=WORLD)
    validate_raw(out, WORLD)
    if WORLD.Get_rank() == 0:
        check_pyg_file(out, data)
    WORLD.Barrier()
    data.edge_index[1, -1] = 50  # owned by the last rank
    with pytest.raises(InputError, match=rf"edge_index: id 50 at row 199 .*\[rank {WORLD.Get_size() - 1}\]"):
        from_pyg(data, out, comm=WORLD, overwrite=True)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_converter_under_mpirun_errors_everywhere(shared_tmp):
    out = os.path.join(shared_tmp, "x.h5")
    with pytest.raises(InputError, match="no such directory"):
        convert_ogb(os.path.join(shared_tmp, "nothing"), out, comm=WORLD)
    d = WORLD.bcast(make_ogb(shared_tmp)[0] if WORLD.Get_rank() == 0 else None, root=0)
    info = convert_ogb(d, out, comm=WORLD)
    assert info["num_edges"] == len(EDGES)
    validate_raw(out, WORLD)


# ----------------------------------------------------------------- validation

def write_raw(path, **damage):
    """A valid 4-node raw file, then the given damage."""
    with h5py.File(path, "w") as f:
        f.attrs.update({"format": "hpcgnn-raw", "version": 1, "graph_name": "t", "num_nodes": 4,
                        "num_edges": 3, "num_classes": 2})
        f["edges/src"] = np.array([0, 1, 1], dtype=np.int64)
        f["edges/dst"] = np.array([1, 2, 3], dtype=np.int64)
        f["nodes/data/feat"] = np.zeros((4, 2), np.float32)
        f["nodes/data/label"] = np.array([0, 1, -1, 1])
        f["nodes/data/train_mask"] = np.array([1, 0, 1, 0], dtype=np.uint8)
        f["nodes/type"] = np.array([0, 0, 1, 1], dtype=np.int16)
        f["edges/type"] = np.array([0, 1, 1], dtype=np.int16)
        f.attrs["ntypes"] = json.dumps(["user", "item"])
        f.attrs["etypes"] = json.dumps([["user", "follows", "user"], ["user", "buys", "item"]])
        for key, val in damage.items():
            if key.startswith("attr_"):
                if val is None:
                    del f.attrs[key[5:]]
                else:
                    f.attrs[key[5:]] = val
            else:
                name = key.replace("__", "/")
                del f[name]
                if val is not None:
                    f[name] = val


@single
def test_validate_accepts_types_and_uint8_masks(tmp_path):
    p = str(tmp_path / "ok.h5")
    write_raw(p)
    info = validate_raw(p, check_features=True)
    assert info["ntypes"] == ["user", "item"] and len(info["etypes"]) == 2
    with RawGraph(p) as g:
        assert g.read_node_data("train_mask").dtype == np.bool_
        assert g.read_node_types().tolist() == [0, 0, 1, 1]


@single
@pytest.mark.parametrize("damage, expect", [
    ({"attr_format": "other"}, "attribute 'format'"),
    ({"attr_version": 2}, "attribute 'version'"),
    ({"attr_num_edges": None}, "attribute 'num_edges'"),
    ({"edges__dst": None}, "/edges/dst: missing"),
    ({"edges__dst": np.array([1, 2, 3], dtype=np.int32)}, "/edges/dst: must be int64"),
    ({"edges__src": np.array([0, 1], dtype=np.int64)}, "/edges/src: shape"),
    ({"edges__src": np.array([0, 4, 1], dtype=np.int64)}, "/edges/src: value 4 at row 1"),
    ({"nodes__data__feat": np.zeros((3, 2), np.float32)}, "/nodes/data/feat: shape"),
    ({"nodes__data__feat": np.full((4, 2), np.nan, np.float32)}, "not finite"),
    ({"nodes__data__label": np.array([0, 1, 2, 1])}, "/nodes/data/label: value 2"),
    ({"nodes__data__train_mask": np.array([0, 2, 1, 0], np.uint8)}, "train_mask: value 2"),
    ({"nodes__type": np.array([0, 0, 2, 1], np.int16)}, "/nodes/type: value 2"),
    ({"attr_etypes": None}, "attribute 'etypes'"),
    ({"attr_etypes": json.dumps([["user", "buys", "shop"], ["a", "b"]])}, "attribute 'etypes'"),
])
def test_validate_rejects(tmp_path, damage, expect):
    p = str(tmp_path / "bad.h5")
    write_raw(p, **damage)
    with pytest.raises(InputError) as err:
        validate_raw(p, check_features=True)
    assert expect in str(err.value) and p in str(err.value) and "[rank 0]" in str(err.value)


@single
def test_validate_missing_or_foreign_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        validate_raw(str(tmp_path / "none.h5"))
    p = tmp_path / "text.h5"
    p.write_text("hello")
    with pytest.raises(InputError, match="not an HDF5 file"):
        validate_raw(str(p))
