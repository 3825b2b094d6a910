"""A served launch over two graphs, the same partitions with float32 and with
half-precision features (used by tests/partition/test_half_features.py).  argv: float32
part_config, layout, ranks_per_node, then one or more half part_configs.

On every trainer: gathers of the half graph's ``feat`` equal the float32 rows
rounded (read in place, from the cache, and with every read of the other node
through ``MPI_Get``); the same ``cache_bytes`` caches twice the rows; loader batches
(sampler ranks when the layout has them, and a thread) hand float32 ``x`` equal to
the rounded rows.  Prints one JSON line per trainer and half graph."""
import json
import sys

import numpy as np
import torch

import hpcgnn
from hpcgnn.comm.rma.rowstore import RowStore
from hpcgnn.graph import DistGraph, node_split
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler


def check(ctx, g32, name, cfg_half):
    gh = DistGraph(name, part_config=cfg_half)
    f32, fh = g32.ndata["feat"], gh.ndata["feat"]
    n = g32.num_nodes()
    ids = np.random.default_rng(ctx.rank).integers(0, n, 3000)
    want = f32[ids].to(fh.dtype)
    assert fh[ids].dtype == fh.dtype and torch.equal(fh[ids], want)
    saved = RowStore.direct_shm_reads
    RowStore.direct_shm_reads = False                 # the other node's rows through MPI_Get
    try:
        assert torch.equal(fh[ids], want)
    finally:
        RowStore.direct_shm_reads = saved

    row32 = f32[[0]].numpy().nbytes
    budget = 100 * row32
    c32, ch = f32.enable_cache(budget, graph=g32), fh.enable_cache(budget, graph=gh)
    assert torch.equal(fh[ids], want) and ch.hits > 0           # cached rows served, the same values
    f32.disable_cache()

    sampler = NeighborSampler([4, 3])
    seeds = node_split(np.ones(n, bool), gh.get_partition_book())
    modes = {}
    for mode in ("auto", "thread"):
        loader = DistNodeDataLoader(gh, seeds, sampler, batch_size=64, seed=2, mode=mode, cache_bytes=budget)
        for b in loader:
            assert b.x.dtype == torch.float32, b.x.dtype
            assert torch.equal(b.x, f32[b.n_id].to(fh.dtype).float())
        modes[mode] = [loader.mode, loader.task.keep_half]     # sampler ranks send half rows
    print(json.dumps({"rank": ctx.rank, "rows": len(ids), "dtype": str(fh.dtype), "cache_rows_float32": len(c32),
                      "cache_rows_half": len(ch), "cache_bytes": [c32.nbytes, ch.nbytes],
                      "remote_rows": ch.remote_rows, "loader_modes": modes}), flush=True)


cfg32, layout, rpn = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = hpcgnn.initialize(layout, rpn, part_config=cfg32)
g = DistGraph("g")
for i, cfg in enumerate(sys.argv[4:]):
    check(ctx, g, f"h{i}", cfg)
ctx.finalize()
