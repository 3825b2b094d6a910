"""A served launch with sampler ranks feeding DistNodeDataLoader (used by
tests/sampling/test_loader.py).  argv: part_config layout ranks_per_node mode
(mode "ok": two epochs, print one line per trainer, then take two batches of a third
and end the script with that epoch neither exhausted nor closed, so finalize must
stop the samplers' stream itself; "die": the sampler's NeighborSampler raises on
sampler ranks, so the job must end, not hang)."""
import sys

import numpy as np
import torch

import hpcgnn
from hpcgnn.graph import DistGraph, node_split
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler


class DyingSampler(NeighborSampler):
    def sample(self, g, seeds, *, rng=None):
        ctx = hpcgnn.current_context()
        if ctx is not None and ctx.is_sampler:
            raise RuntimeError("sampler failed while producing a batch")
        return super().sample(g, seeds, rng=rng)


part_config, layout, rpn, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ctx = hpcgnn.initialize(layout, rpn, part_config=part_config)
g = DistGraph("g")
nids = node_split(np.ones(g.num_nodes(), bool), g.get_partition_book())
sampler = (DyingSampler if mode == "die" else NeighborSampler)([4, 2])
loader = DistNodeDataLoader(g, nids, sampler, batch_size=64, shuffle=True, seed=1,
                            feature_rows="refs")     # from sampler ranks: copies all the same
seen = 0
for epoch in range(2):
    for b in loader:
        seen += b.batch_size
        assert torch.equal(b.x, torch.as_tensor(g.ndata["feat"][b.n_id]))
print(f"trainer {ctx.rank}: mode={loader.mode} steps={len(loader)} seeds={seen}", flush=True)
it = iter(loader)                     # a third epoch, left unfinished
next(it)
next(it)
keep = it                             # still referenced when the script ends
print(f"trainer {ctx.rank}: left an epoch unfinished", flush=True)
sys.exit(0)
