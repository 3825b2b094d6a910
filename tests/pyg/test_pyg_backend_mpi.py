"""PyG's NodeLoader / LinkLoader on hpcgnn's backend in a served launch (2-4
ranks; 4 ranks: two virtual nodes, one partition each, the other's rows read
one-sided): the same checks as test_pyg_backend.py on every trainer, with its own
seeds, and a stock GraphSAGE whose loss falls."""
import numpy as np
import pytest

import hpcgnn
from hpcgnn.comm.mpi import MPI
from hpcgnn.graph import DistGraph, node_split

from conftest import served_layout
from harness import Oracle, check_link_loader, check_node_loader, make_graph, train_sage

pytest.importorskip("hpcgnn._ext")
pytest.importorskip("torch_geometric")


world = MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(300)
def test_pyg_loaders_in_a_served_launch(shared_tmp):
    layout, rpn, nparts = served_layout(world.Get_size())
    raw, cfg = make_graph(shared_tmp, nparts, world)
    oracle = Oracle(raw, cfg)
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    g = DistGraph("g")
    tc = ctx.trainer_comm
    rank = tc.Get_rank()
    mine = np.asarray(node_split(np.ones(g.num_nodes(), bool), g.get_partition_book()))
    rng = np.random.default_rng(rank)
    # seeds of this trainer's partition and of the others (read one-sided)
    ids = np.unique(np.concatenate([rng.choice(mine, 100, replace=False),
                                    rng.choice(g.num_nodes(), 100, replace=False)]))
    check_node_loader(g, oracle, rng.permutation(ids), seed=11 + rank)
    check_link_loader(g, oracle, np.arange(rank, g.num_edges(), 150), seed=5 + rank)
    losses = train_sage(g, mine, epochs=5, seed=rank)
    assert losses[-1] < 0.8 * losses[0], losses
    g.barrier()
    ctx.finalize()
