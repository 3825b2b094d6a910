"""Data loaders in a served launch at 2-4 ranks: sampler ranks (3 and 4 ranks: one
sampler for one or two trainers) and the prefetch thread give exactly the batches
the trainer would make itself; trainers with unequal shares run the same number
of steps; an early exit from an epoch leaves both sides clean."""
import numpy as np
import pytest
import torch

import hpcgnn
from hpcgnn.comm.mpi import MPI
from hpcgnn.graph import DistGraph, DistTensor, node_split
from hpcgnn.sampling import DistEdgeDataLoader, DistNodeDataLoader, NeighborSampler, negative_sampler

from harness import make_graph

world = MPI.COMM_WORLD


def _same(a, b):
    return all((getattr(a, k) is None and getattr(b, k) is None) or torch.equal(getattr(a, k), getattr(b, k))
               for k in ("n_id", "e_id", "edge_index", "x", "y"))


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(240)
def test_loaders_in_a_served_launch(shared_tmp):
    size = world.Get_size()
    layout = {2: "servers=1,samplers=0,trainers=1", 3: "servers=1,samplers=1,trainers=1"}.get(
        size, "servers=1,samplers=1,trainers=rest")
    _, cfg = make_graph(shared_tmp, 1, world)
    ctx = hpcgnn.initialize(layout=layout, part_config=cfg, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    g = DistGraph("g")
    tc = ctx.trainer_comm
    mask = np.ones(g.num_nodes(), bool)
    nids = node_split(mask, g.get_partition_book())
    nids = nids[: len(nids) - 130 * tc.Get_rank()]          # unequal shares: steps are agreed anyway
    s = NeighborSampler([4, 3])
    ref = DistNodeDataLoader(g, nids, s, batch_size=64, shuffle=True, seed=9, mode="inline")
    fast = DistNodeDataLoader(g, nids, s, batch_size=64, shuffle=True, seed=9)
    assert fast.mode == ("thread" if size == 2 else "samplers")
    assert len(set(tc.allgather(len(fast)))) == 1
    if tc.Get_size() > 1:               # settings that give other step counts: refused everywhere
        with pytest.raises(Exception, match=r"different \(batch_size, drop_last\)"):
            DistNodeDataLoader(g, nids, s, batch_size=64 + 32 * tc.Get_rank(), seed=9, mode="inline")
    own = -(-len(nids) // 64)
    for epoch in range(2):
        n = 0
        for a, b in zip(ref, fast):
            assert _same(a, b)
            # batches past this trainer's own count repeat its ids, and say so (also from samplers)
            assert a.extra["padding"] == b.extra["padding"] == (n >= own)
            n += 1
            if epoch == 0 and n == 3:
                break                                        # early exit, then a whole epoch
        assert n == (3 if epoch == 0 else len(fast))
    e_ids = np.arange(tc.Get_rank(), g.num_edges(), 40)
    kw = dict(batch_size=32, shuffle=True, seed=4, negative_sampler=negative_sampler.Uniform(2), exclude="self")
    for a, b in zip(DistEdgeDataLoader(g, e_ids, s, mode="inline", **kw), DistEdgeDataLoader(g, e_ids, s, **kw)):
        assert _same(a, b) and torch.equal(a.edge_label_index, b.edge_label_index)
    # data attached on the trainers is read there: auto mode keeps away from the
    # samplers, which do not hold it, and an explicit samplers mode is refused
    h = DistTensor((g.num_nodes(), 2), torch.float32, name="h_attached", init_func=lambda sh, dt: torch.ones(sh))
    g.ndata["h"] = h
    auto = DistNodeDataLoader(g, nids, s, batch_size=64, feat="h", label=None)
    assert auto.mode == "thread"
    first = next(iter(auto))
    assert first.x.shape[1] == 2 and torch.equal(first.x, torch.ones_like(first.x))
    if size > 2:
        with pytest.raises(Exception, match=r"\['h'\] were attached on the trainers"):
            DistNodeDataLoader(g, nids, s, batch_size=64, feat="h", label=None, mode="samplers")
    g.barrier()
    ctx.finalize()
