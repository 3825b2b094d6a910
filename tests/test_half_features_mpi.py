"""Half-precision features under ``mpirun -n K python -m pytest --with-mpi``: the
partitioner writes them from every rank (parallel HDF5, the dataset attribute made
collectively), and a served launch gathers them (``torch.bfloat16``/``float16`` rows
equal to the float32 rows rounded) and hands loader batches a float32 ``x``.
tests/test_half_features.py covers two hosts, sampler ranks and the cache."""
import os

import h5py
import numpy as np
import pytest
import torch

import hpcgnn
from conftest import served_layout
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.graph import DistGraph, node_split
from hpcgnn.partition import partition_graph
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler

world = MPI.COMM_WORLD
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.mark.mpi(min_size=2)          # one process: tests/test_half_features.py
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_parallel_partition_and_served_gather(shared_tmp, dt):
    size = world.Get_size()
    layout, rpn, nparts = served_layout(size)
    raw = os.path.join(shared_tmp, "g.h5")
    generate_graph(raw, world, 3000, 8, 12, 4, seed=4, name="g")
    cfg32 = partition_graph(raw, os.path.join(shared_tmp, "p32"), nparts, comm=world, return_mapping=True)
    cfg = partition_graph(raw, os.path.join(shared_tmp, "ph"), nparts, comm=world, return_mapping=True,
                          feat_dtype=dt)
    if world.Get_rank() == 0:
        with h5py.File(raw) as f:
            feat = f["nodes/data/feat"][:]
        with h5py.File(os.path.join(shared_tmp, "ph", "g.h5")) as f:
            for p in range(nparts):
                d = f[f"part{p}/node/feat"]
                want = torch.from_numpy(feat[f[f"part{p}/orig_nid"][:]]).to(TORCH[dt])
                assert d.attrs["logical_dtype"] == {"bf16": "bfloat16", "fp16": "float16"}[dt]
                assert np.array_equal(d[:].view(np.uint16), want.view(torch.int16).numpy().view(np.uint16))
    world.Barrier()
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg32, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    g32, g = DistGraph("g"), DistGraph("h", part_config=cfg)
    x = g.ndata["feat"]
    ids = np.random.default_rng(ctx.rank).integers(0, g.num_nodes(), 2000)
    assert x.dtype == TORCH[dt]
    assert torch.equal(x[ids], g32.ndata["feat"][ids].to(TORCH[dt]))
    seeds = node_split(np.ones(g.num_nodes(), bool), g.get_partition_book())
    for b in DistNodeDataLoader(g, seeds, NeighborSampler([4, 2]), batch_size=100, seed=1):
        assert b.x.dtype == torch.float32
        assert torch.equal(b.x, g32.ndata["feat"][b.n_id].to(TORCH[dt]).float())
    ctx.finalize()
