"""The MAG-like heterogeneous generator: types, relations, node data, learnability,
rank-count independence, and validate_raw's type checks."""
import json
import os

import h5py
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import RawGraph, generate_hetero_graph, validate_raw
from hpcgnn.datasets.synthetic_hetero import ETYPES, NTYPES, type_counts
from hpcgnn.errors import InputError

WORLD = MPI.COMM_WORLD
single = pytest.mark.skipif(WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")
N, C = 3000, 8


def dump(path):
    """Every dataset with its attributes, and the root attributes, of an HDF5 file."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[()]
            out[name + "@attrs"] = {k: str(v) for k, v in obj.attrs.items()}

    with h5py.File(path, "r") as f:
        f.visititems(visit)
        out["@attrs"] = {k: str(v) for k, v in f.attrs.items()}
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if key.endswith("@attrs"):
            assert a[key] == b[key], key
        else:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hetero") / "mag.h5")
    info = generate_hetero_graph(path, None, N, 8, 16, C, seed=3, chunk_nodes=512)
    with RawGraph(path) as g:
        src, dst = g.read_edges()
        data = {k: g.read_node_data(k) for k in g.node_data_names()}
        arrays = dict(src=src, dst=dst, etype=g.read_edge_types(), ntype=g.read_node_types(), **data)
    return path, info, arrays


@single
@pytest.mark.timeout(120)
def test_types_blocked_and_validated(mag):
    path, info, a = mag
    v = validate_raw(path, check_features=True, check_endpoint_types=True)
    assert v["ntypes"] == NTYPES and v["etypes"] == ETYPES and info["etypes"] == ETYPES
    assert v["node_data_ntypes"] == {k: ["paper"] for k in ("feat", "label", "train_mask", "val_mask", "test_mask")}
    counts = type_counts(N)
    assert counts == (1200, 1440, 60, 300)
    assert info["nodes_per_type"] == dict(zip(NTYPES, counts))
    assert a["ntype"].dtype == np.int16
    assert np.array_equal(a["ntype"], np.repeat(np.arange(4), counts))  # blocked, in NTYPES order
    assert np.array_equal(np.bincount(a["etype"], minlength=7), list(info["edges_per_type"].values()))
    assert list(info["edges_per_type"]) == [t[1] for t in ETYPES]
    assert abs(info["edges_per_type"]["cites"] / counts[0] - 8) < 1.0
    assert 1 <= info["edges_per_type"]["writes"] / counts[0] <= 6
    assert info["edges_per_type"]["affiliated_with"] == counts[1]
    with h5py.File(path, "r") as f:
        assert json.loads(f.attrs["ntypes"]) == NTYPES and json.loads(f.attrs["etypes"]) == ETYPES
        assert f.attrs["graph_name"] == "mag" and f.attrs["num_classes"] == C


@single
@pytest.mark.timeout(120)
def test_edge_endpoints_and_reverse_relations(mag):
    _, _, a = mag
    src, dst, et, nt = a["src"], a["dst"], a["etype"], a["ntype"]
    for t, (s, _, d) in enumerate(ETYPES):
        m = et == t
        assert m.any(), ETYPES[t]
        assert np.all(nt[src[m]] == NTYPES.index(s)) and np.all(nt[dst[m]] == NTYPES.index(d)), ETYPES[t]
    for fwd, rev in ((1, 2), (3, 4), (5, 6)):
        f, r = et == fwd, et == rev
        pairs_f = np.sort(src[f] * N + dst[f])
        pairs_r = np.sort(dst[r] * N + src[r])
        assert np.array_equal(pairs_f, pairs_r), (ETYPES[fwd], ETYPES[rev])
    # every paper has an author and a field, every author an institution
    papers, authors = np.flatnonzero(nt == 0), np.flatnonzero(nt == 1)
    assert np.all(np.bincount(dst[et == 1], minlength=N)[papers] >= 1)
    assert np.all(np.bincount(src[et == 5], minlength=N)[papers] >= 1)
    assert np.all(np.bincount(src[et == 3], minlength=N)[authors] == 1)


@single
@pytest.mark.timeout(120)
def test_node_data_on_papers_only(mag):
    _, _, a = mag
    paper = a["ntype"] == 0
    assert a["feat"].dtype == np.float32 and a["label"].dtype == np.int64
    assert np.all(a["feat"][~paper] == 0) and np.all(np.abs(a["feat"][paper]).sum(axis=1) > 0)
    assert np.all(a["label"][~paper] == -1)
    assert set(np.unique(a["label"][paper])) == set(range(C))
    masks = np.stack([a[m] for m in ("train_mask", "val_mask", "test_mask")])
    assert masks.dtype == np.bool_
    assert not masks[:, ~paper].any()
    assert masks.sum(axis=0).max() == 1
    for m, want in zip(masks, (0.6, 0.2, 0.2)):
        assert abs(m[paper].mean() - want) < 0.05


def _linear_accuracy(z, y, train, test):
    z = np.hstack([z, np.ones((len(z), 1))])
    a = z[train]
    w = np.linalg.solve(a.T @ a + 1e-2 * np.eye(z.shape[1]), a.T @ np.eye(C)[y[train]])
    return float((np.argmax(z[test] @ w, axis=1) == y[test]).mean())


def _mean_over(src, dst, x, n):
    """Per node, the mean of ``x`` over its in-neighbours ``src -> node`` (0 without)."""
    out = np.zeros((n, x.shape[1]))
    np.add.at(out, dst, x[src])
    return out / np.maximum(np.bincount(dst, minlength=n), 1)[:, None]


@single
@pytest.mark.timeout(120)
def test_paper_labels_learnable_from_neighbours(mag):
    """Paper features alone: a linear model reaches ~40%.  Adding the mean features of
    cited/citing papers and of the papers of the paper's authors and fields (what a
    2-layer heterogeneous GNN sees) is far better."""
    _, _, a = mag
    src, dst, et = a["src"], a["dst"], a["etype"]
    x, y = a["feat"].astype(np.float64), a["label"]
    cites = et == 0
    h_cite = _mean_over(np.concatenate([src[cites], dst[cites]]), np.concatenate([dst[cites], src[cites]]), x, N)
    paths = {}
    for down, up in ((2, 1), (5, 6)):  # paper -> author -> paper, paper -> field -> paper
        mid = _mean_over(src[et == down], dst[et == down], x, N)
        paths[down] = _mean_over(src[et == up], dst[et == up], mid, N)
    p = np.flatnonzero(a["ntype"] == 0)
    train, test = a["train_mask"][p], a["test_mask"][p]
    alone = _linear_accuracy(x[p], y[p], train, test)
    neigh = _linear_accuracy(np.hstack([x, h_cite, paths[2], paths[5]])[p], y[p], train, test)
    assert 0.25 < alone < 0.60, alone
    assert neigh > alone + 0.25, (alone, neigh)


@single
@pytest.mark.timeout(120)
def test_validate_rejects_wrong_endpoint_type_and_dataset_ntypes(tmp_path):
    path = str(tmp_path / "bad.h5")
    info = generate_hetero_graph(path, None, 500, 3, 4, 3, seed=1, chunk_nodes=128)
    papers = info["nodes_per_type"]["paper"]
    with h5py.File(path, "r+") as f:
        row = int(np.flatnonzero(f["edges/type"][:] == 0)[0])
        f["edges/dst"][row] = papers  # the first author: a cites edge must end at a paper
    validate_raw(path, check_endpoint_types=False)  # the endpoint check can be turned off
    with pytest.raises(InputError) as err:
        validate_raw(path, check_endpoint_types=True)
    msg = str(err.value)
    assert path in msg and "/edges/dst" in msg and f"row {row}" in msg and "cites" in msg
    with h5py.File(path, "r+") as f:
        f["edges/dst"][row] = 0
        f["nodes/data/label"].attrs["ntypes"] = json.dumps(["paper", "venue"])
    with pytest.raises(InputError, match=r"/nodes/data/label.*venue"):
        validate_raw(path)


@single
@pytest.mark.timeout(120)
def test_bad_arguments(tmp_path):
    path = str(tmp_path / "x.h5")
    with pytest.raises(InputError, match="num_nodes"):
        generate_hetero_graph(path, None, 3, 2, 4, 1, seed=1)
    with pytest.raises(InputError, match="num_classes"):
        generate_hetero_graph(path, None, 100, 2, 4, 41, seed=1)  # 40 papers
    assert not os.path.exists(path)
    info = generate_hetero_graph(path, None, 4, 2, 4, 1, seed=1)  # one node of each type
    assert info["nodes_per_type"] == {"paper": 1, "author": 1, "institution": 1, "field": 1}
    validate_raw(path, check_endpoint_types=True)


@single
@pytest.mark.timeout(120)
def test_cli_hetero_names_the_graph(tmp_path, capsys):
    from hpcgnn.cli.main import main

    argv = ["--num-nodes", "2000", "--avg-degree", "5", "--feat-dim", "8", "--num-classes", "5",
            "--seed", "7", "--chunk-nodes", "300", "--hetero"]
    ref = str(tmp_path / "r1.h5")
    assert main(["generate", ref] + argv) == 0
    out = capsys.readouterr().out
    assert "2000 nodes" in out and "edges per type" in out
    with h5py.File(ref, "r") as f:
        assert f.attrs["graph_name"] == "mag"
    named = str(tmp_path / "named.h5")
    assert main(["generate", named, "--name", "tiny"] + argv) == 0
    assert validate_raw(named)["graph_name"] == "tiny"


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_parallel_hetero_matches_one_rank(shared_tmp):
    """``hpcgnn generate --hetero`` at the run's rank count (the CLI in this process,
    every rank) writes the file one rank writes."""
    from hpcgnn.cli.main import main
    from hpcgnn.testing import run_job

    path = os.path.join(shared_tmp, "par.h5")
    job = run_job(main, ["generate", path, "--hetero", "--num-nodes", "2500", "--avg-degree", "6", "--feat-dim",
                         "6", "--num-classes", "4", "--seed", "11", "--chunk-nodes", "400", "--json"])
    assert job.returncode == 0, job.stdout + job.stderr
    info = json.loads(job.stdout.strip().splitlines()[-1])
    assert info["ranks"] == WORLD.Get_size()
    assert validate_raw(path, WORLD, check_endpoint_types=True)["ntypes"] == NTYPES
    if WORLD.Get_rank() == 0:
        ref = os.path.join(shared_tmp, "ref.h5")
        ref_info = generate_hetero_graph(ref, MPI.COMM_SELF, 2500, 6, 6, 4, seed=11, chunk_nodes=400)
        assert ref_info["edges_per_type"] == info["edges_per_type"]
        assert_same(dump(ref), dump(path))
    WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_parallel_validate_names_rank_of_bad_endpoint(shared_tmp):
    path = os.path.join(shared_tmp, "badtype.h5")
    info = generate_hetero_graph(path, WORLD, 600, 3, 2, 2, seed=5, chunk_nodes=100)
    size, e = WORLD.Get_size(), info["num_edges"]
    if WORLD.Get_rank() == 0:
        with h5py.File(path, "r+") as f:
            t = int(f["edges/type"][e - 1])  # last row: owned by the last rank
            # node 0 is a paper, node `papers` the first author
            f["edges/dst"][e - 1] = 0 if ETYPES[t][2] != "paper" else info["nodes_per_type"]["paper"]
    WORLD.Barrier()
    with pytest.raises(InputError) as err:
        validate_raw(path, WORLD, check_endpoint_types=True)
    msg = str(err.value)
    assert path in msg and "/edges/dst" in msg and f"[rank {size - 1}]" in msg


@single
@pytest.mark.timeout(120)
def test_endpoint_check_with_interleaved_types(tmp_path):
    """Types need not be blocked: mixed types are looked up in the whole /nodes/type."""
    path, n = str(tmp_path / "mixed.h5"), 400
    ntype = np.arange(n, dtype=np.int16) % 2            # user, item, user, item, ...
    src = np.arange(0, n, 2, dtype=np.int64)           # users
    dst = src + 1                                      # items
    with h5py.File(path, "w") as f:
        f.attrs.update(format="hpcgnn-raw", version=1, graph_name="m", num_nodes=n, num_edges=len(src),
                       ntypes=json.dumps(["user", "item"]), etypes=json.dumps([["user", "buys", "item"]]))
        f["edges/src"], f["edges/dst"] = src, dst
        f["edges/type"] = np.zeros(len(src), np.int16)
        f["nodes/type"] = ntype
    validate_raw(path, check_endpoint_types=True)
    with h5py.File(path, "r+") as f:
        f["edges/src"][7] = 15  # an item
    with pytest.raises(InputError, match=r"/edges/src: node 15 at row 7 has type 1 \('item'\)"):
        validate_raw(path, check_endpoint_types=True)
