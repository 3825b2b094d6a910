"""Partitioning the generator's own graphs (the README's default input)."""
import os

import h5py
import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import metis_part_kway, partition_graph
from hpcgnn.partition.arrays import unique

comm = MPI.COMM_WORLD


def _metis_cut(raw, nparts):
    with h5py.File(raw, "r") as f:
        src, dst, n = f["edges/src"][:], f["edges/dst"][:], int(f.attrs["num_nodes"])
    keep = src != dst
    key = unique(np.concatenate([src[keep] * n + dst[keep], dst[keep] * n + src[keep]]))
    rows, adj = key // n, key % n
    xadj = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    part = metis_part_kway(xadj, adj, nparts=nparts)
    return float(np.mean(part[src] != part[dst]))


@pytest.mark.mpi(min_size=1)
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cut_on_a_100k_generated_graph_is_close_to_serial_metis(shared_tmp):
    raw = os.path.join(shared_tmp, "g100k.h5")
    generate_graph(raw, comm, 100_000, 10, 16, 16, seed=5, name="g")
    cfg = partition_graph(raw, os.path.join(shared_tmp, "p"), 4, comm=comm, balance_ntypes=["train_mask"])
    rnd = partition_graph(raw, os.path.join(shared_tmp, "r"), 4, comm=comm, part_method="random")
    if comm.Get_rank() == 0:
        import json

        ours = json.load(open(cfg))
        rand = json.load(open(rnd))
        cut = ours["edge_cut"] / ours["num_edges"]
        metis = _metis_cut(raw, 4)
        assert cut <= 1.3 * metis, (cut, metis)
        assert cut < 0.75 * rand["edge_cut"] / rand["num_edges"]
        train = np.array([p["weights"]["train_mask"] for p in ours["parts"]])
        assert np.abs(train / train.mean() - 1).max() <= 0.05
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(200)
def test_partition_files_do_not_depend_on_how_many_ranks_generated_the_graph(shared_tmp):
    one = os.path.join(shared_tmp, "one.h5")
    many = os.path.join(shared_tmp, "many.h5")
    if comm.Get_rank() == 0:
        generate_graph(one, None, 6000, 6, 4, 4, seed=11, name="g")
    comm.Barrier()
    generate_graph(many, comm, 6000, 6, 4, 4, seed=11, name="g")
    cfgs = [partition_graph(p, os.path.join(shared_tmp, f"out{i}"), 3, comm=comm, seed=1)
            for i, p in enumerate((one, many))]
    if comm.Get_rank() == 0:
        with h5py.File(os.path.join(os.path.dirname(cfgs[0]), "g.h5")) as a, \
                h5py.File(os.path.join(os.path.dirname(cfgs[1]), "g.h5")) as b:
            names = []
            a.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
            assert names
            for k in names:
                assert np.array_equal(a[k][()], b[k][()]), k
    comm.Barrier()
