"""The synthetic generator: content, statistics, learnability, rank-count independence."""
import json
import os
import shutil
import tempfile

import h5py
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import RawGraph, generate_graph, slice_bounds, validate_raw
from hpcgnn.datasets.synthetic import SyntheticModel, SyntheticSpec
from hpcgnn.errors import InputError

WORLD = MPI.COMM_WORLD
single = pytest.mark.skipif(WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")


def dump(path):
    """Every dataset and root attribute of an HDF5 file."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        out["@attrs"] = {k: str(v) for k, v in f.attrs.items()}
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if key == "@attrs":
            assert a[key] == b[key]
        else:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


@pytest.fixture
def shared_tmp():
    """A directory made by rank 0, the same on every rank, removed afterwards.  (Not
    pytest's tmp_path: with 4 ranks, each rank's pytest prunes old basetemps, which
    may be another rank's current one.)"""
    path = WORLD.bcast(tempfile.mkdtemp(prefix="hpcgnn-test-") if WORLD.Get_rank() == 0 else None, root=0)
    yield path
    WORLD.Barrier()
    if WORLD.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)


def test_slice_bounds_cover_and_balance():
    for n in (0, 1, 7, 100, 101):
        for size in (1, 2, 3, 4, 7):
            bounds = [slice_bounds(n, r, size) for r in range(size)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(bounds[r][1] == bounds[r + 1][0] for r in range(size - 1))
            lens = [hi - lo for lo, hi in bounds]
            assert max(lens) - min(lens) <= 1
    with pytest.raises(ValueError):
        slice_bounds(10, 3, 3)


def test_affine_class_map_is_a_bijection():
    spec = SyntheticSpec(num_nodes=1000, avg_degree=3, feat_dim=4, num_classes=7, seed=5)
    m = SyntheticModel(spec)
    ids = np.arange(1000)
    pos = (m.a * ids.astype(np.uint64) + m.b) % m.n
    assert np.array_equal(np.sort(pos.astype(np.int64)), ids)
    assert np.array_equal(m.ids_at(pos.astype(np.int64)), ids)
    cls = m.classes(ids)
    assert np.array_equal(np.bincount(cls), np.diff(m.class_lo))


@pytest.fixture(scope="module")
def graph20k(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("gen") / "g.h5")
    generate_graph(path, None, 20000, 10, 32, 16, seed=1, chunk_nodes=4096, edge_feat=True)
    return path


@single
def test_generated_content(graph20k):
    info = validate_raw(graph20k)
    assert info["num_nodes"] == 20000 and info["num_classes"] == 16
    assert info["node_data"] == {"feat": ("float32", (20000, 32)), "label": ("int64", (20000,)),
                                 "train_mask": ("bool", (20000,)), "val_mask": ("bool", (20000,)),
                                 "test_mask": ("bool", (20000,))}
    e = info["num_edges"]
    assert info["edge_data"] == {"weight": ("float32", (e,))}
    assert abs(e / 20000 - 10) < 0.5
    with RawGraph(graph20k) as g:
        assert g.graph_name == "synthetic"
        src, dst = g.read_edges()
        label = g.read_node_data("label")
        masks = [g.read_node_data(m) for m in ("train_mask", "val_mask", "test_mask")]
        weight = g.read_edge_data("weight")
    assert src.dtype == dst.dtype == np.int64
    assert 0 <= src.min() and src.max() < 20000 and 0 <= dst.min() and dst.max() < 20000
    assert np.all(np.diff(src) >= 0)  # written chunk by chunk, grouped by source
    assert set(np.unique(label)) == set(range(16))
    assert np.all(weight > 0) and np.all(weight <= 1)
    stacked = np.stack(masks).astype(int)
    assert stacked.sum(axis=0).max() == 1  # disjoint
    for m, want in zip(masks, (0.6, 0.2, 0.2)):
        assert abs(m.mean() - want) < 0.02
    out_deg, in_deg = np.bincount(src, minlength=20000), np.bincount(dst, minlength=20000)
    assert out_deg.max() > 20 * out_deg.mean() and in_deg.max() > 20 * in_deg.mean()
    assert abs((label[src] == label[dst]).mean() - 0.5) < 0.03


@single
@pytest.mark.parametrize("homophily", [0.0, 0.8])
def test_homophily_setting(tmp_path, homophily):
    path = str(tmp_path / "h.h5")
    generate_graph(path, None, 5000, 8, 4, 10, seed=2, homophily=homophily, chunk_nodes=1024)
    with RawGraph(path) as g:
        src, dst = g.read_edges()
        label = g.read_node_data("label")
    assert abs((label[src] == label[dst]).mean() - homophily) < 0.03


@single
def test_self_loops_give_every_node_an_in_edge(tmp_path):
    """--self-loops: the same edges and one v -> v per node (DGL's add_self_loop), so
    GraphConv/GATConv find no node without in-edges."""
    plain, looped = str(tmp_path / "p.h5"), str(tmp_path / "l.h5")
    generate_graph(plain, None, 3000, 4, 4, 4, seed=1, chunk_nodes=1024, edge_feat=True)
    generate_graph(looped, None, 3000, 4, 4, 4, seed=1, chunk_nodes=1024, edge_feat=True, self_loops=True)
    with RawGraph(plain) as g, RawGraph(looped) as h:
        (s0, d0), (s1, d1) = g.read_edges(), h.read_edges()
        assert h.num_edges == g.num_edges + 3000
    assert np.bincount(d0, minlength=3000).min() == 0          # the plain graph has such nodes
    assert np.bincount(d1, minlength=3000).min() >= 1
    loops = s1 == d1
    assert loops.sum() - (s0 == d0).sum() == 3000
    keep = np.ones(len(s1), bool)                              # without one loop per node: the plain edges
    keep[np.flatnonzero(loops)[np.unique(s1[loops], return_index=True)[1]]] = False
    assert sorted(zip(s1[keep], d1[keep])) == sorted(zip(s0, d0))
    validate_raw(looped)


def _linear_accuracy(z, y, train, test, num_classes):
    z = np.hstack([z, np.ones((len(z), 1))])
    a = z[train]
    w = np.linalg.solve(a.T @ a + 1e-2 * np.eye(z.shape[1]), a.T @ np.eye(num_classes)[y[train]])
    return float((np.argmax(z[test] @ w, axis=1) == y[test]).mean())


@single
def test_neighbours_make_labels_learnable(graph20k):
    """A linear model on features alone reaches ~45-50%; on features averaged with the
    1-hop neighbourhood (one mean-aggregation layer) it is clearly better."""
    with RawGraph(graph20k) as g:
        src, dst = g.read_edges()
        x = g.read_node_data("feat").astype(np.float64)
        y = g.read_node_data("label")
        train, test = g.read_node_data("train_mask"), g.read_node_data("test_mask")
    n = len(y)
    agg = x.copy()
    np.add.at(agg, src, x[dst])
    np.add.at(agg, dst, x[src])
    deg = 1 + np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    mlp = _linear_accuracy(x, y, train, test, 16)
    gnn = _linear_accuracy(agg / deg[:, None], y, train, test, 16)
    assert 0.40 < mlp < 0.56, mlp
    assert gnn > mlp + 0.10, (mlp, gnn)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_parallel_generation_matches_one_rank(shared_tmp):
    """``hpcgnn generate`` at the run's rank count (the CLI in this process, every
    rank) writes the file one rank writes; its JSON summary counts every rank's peak
    memory."""
    from hpcgnn.cli.main import main
    from hpcgnn.testing import run_job

    rank = WORLD.Get_rank()
    path = os.path.join(shared_tmp, "par.h5")
    job = run_job(main, ["generate", path, "--num-nodes", "3000", "--avg-degree", "5", "--feat-dim", "6",
                         "--num-classes", "4", "--seed", "11", "--chunk-nodes", "512", "--edge-feat", "--json"])
    assert job.returncode == 0, job.stdout + job.stderr
    info = json.loads(job.stdout.strip().splitlines()[-1])
    assert info["num_nodes"] == 3000 and info["ranks"] == WORLD.Get_size()
    assert len(info["peak_rss_bytes_per_rank"]) == WORLD.Get_size()
    assert info["peak_rss_bytes_sum"] == sum(info["peak_rss_bytes_per_rank"])
    validate_raw(path, WORLD)
    if rank == 0:
        ref = os.path.join(shared_tmp, "ref.h5")
        generate_graph(ref, MPI.COMM_SELF, 3000, 5, 6, 4, seed=11, chunk_nodes=512, edge_feat=True)
        assert_same(dump(ref), dump(path))
    WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_bad_arguments_and_existing_output_fail_on_every_rank(shared_tmp):
    path = os.path.join(shared_tmp, "bad.h5")
    with pytest.raises(InputError, match="num_classes"):
        generate_graph(path, WORLD, 100, 3, 4, 0, seed=1)
    generate_graph(path, WORLD, 100, 3, 4, 2, seed=1)
    with pytest.raises(InputError, match="exists"):
        generate_graph(path, WORLD, 100, 3, 4, 2, seed=1)
    generate_graph(path, WORLD, 100, 3, 4, 2, seed=1, overwrite=True)
    assert not os.path.exists(path + ".partial")


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_validate_reports_bad_id_from_the_rank_that_owns_it(shared_tmp):
    path = os.path.join(shared_tmp, "badid.h5")
    generate_graph(path, WORLD, 400, 4, 2, 2, seed=3, chunk_nodes=64)
    size = WORLD.Get_size()
    if WORLD.Get_rank() == 0:
        with h5py.File(path, "r+") as f:
            e = f["edges/dst"].shape[0]
            f["edges/dst"][e - 1] = 400  # last row: owned by the last rank
    WORLD.Barrier()
    with pytest.raises(InputError) as err:
        validate_raw(path, WORLD)
    msg = str(err.value)
    assert path in msg and "/edges/dst" in msg and f"[rank {size - 1}]" in msg and "400" in msg


@single
def test_bad_arguments_name_the_argument(tmp_path):
    path = str(tmp_path / "x.h5")
    for kwargs, field in (({"num_nodes": 0}, "num_nodes"), ({"feat_dim": 0}, "feat_dim"),
                          ({"homophily": 1.5}, "homophily"), ({"train_frac": 0.9}, "frac"),
                          ({"seed": -1}, "seed")):
        args = dict(num_nodes=100, avg_degree=3, feat_dim=4, num_classes=3, seed=1)
        args.update(kwargs)
        with pytest.raises(InputError, match=field):
            generate_graph(path, None, **args)
    assert not os.path.exists(path)


@single
def test_cli_generate(tmp_path, capsys):
    from hpcgnn.cli.main import main

    out = str(tmp_path / "cli.h5")
    assert main(["generate", out, "--num-nodes", "300", "--avg-degree", "4", "--feat-dim", "3",
                 "--num-classes", "3", "--seed", "1", "--name", "tiny", "--edge-feat"]) == 0
    assert "300 nodes" in capsys.readouterr().out
    info = validate_raw(out)
    assert info["graph_name"] == "tiny" and "weight" in info["edge_data"]
