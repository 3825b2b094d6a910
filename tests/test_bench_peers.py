"""The partition benchmark's serial peers (bench/raw_csr.py, metis_baseline.py,
kaminpar_baseline.py): the graph they get is the raw graph's symmetric CSR, and the
file KaMinPar reads is that CSR (issue 42's quality peer)."""
import os

import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph

BENCH = os.path.join(os.path.dirname(__file__), os.pardir, "bench")
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="single-process test (runs in the 1-rank pass)")


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(BENCH)


def test_the_symmetric_csr_of_a_raw_graph(bench, tmp_path):
    from raw_csr import cut_and_balance, read_symmetric_csr

    raw = str(tmp_path / "g.h5")
    generate_graph(raw, None, 3000, 6, 4, 3, seed=2)
    g, times = read_symmetric_csr(raw)
    n, xadj, adj = g["n"], g["xadj"], g["adj"]
    rows = np.repeat(np.arange(n), np.diff(xadj))
    pairs = set(zip(rows.tolist(), adj.tolist()))
    keep = g["src"] != g["dst"]
    want = set(zip(g["src"][keep].tolist(), g["dst"][keep].tolist()))
    want |= {(v, u) for u, v in want}
    assert pairs == want and len(pairs) == len(adj)           # symmetric, no loops, no duplicates
    part = np.arange(n) % 3
    got = cut_and_balance(part, g["src"], g["dst"], 3)
    assert got["node_imbalance"] == 1.0
    assert got["edge_cut_fraction"] == round(float(np.mean(part[g["src"]] != part[g["dst"]])), 4)


def test_kaminpar_reads_the_same_graph(bench, tmp_path):
    kaminpar = pytest.importorskip("kaminpar")
    from kaminpar_baseline import write_parhip
    from raw_csr import read_symmetric_csr

    raw = str(tmp_path / "g.h5")
    generate_graph(raw, None, 3000, 6, 4, 3, seed=2)
    g, _ = read_symmetric_csr(raw)
    path = str(tmp_path / "g.parhip")
    write_parhip(path, g["xadj"], g["adj"])
    graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
    assert (graph.n(), graph.m()) == (g["n"], len(g["adj"]))
    assert sorted(v for v, _ in graph.neighbors(7)) == sorted(g["adj"][g["xadj"][7]:g["xadj"][8]].tolist())
    part = np.arange(g["n"]) % 4
    rows = np.repeat(np.arange(g["n"]), np.diff(g["xadj"]))
    assert 2 * kaminpar.edge_cut(graph, part.tolist()) == int((part[rows] != part[g["adj"]]).sum())
