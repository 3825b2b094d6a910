"""The layer-wise inference of DGL's GraphSAGE example (examples/dgl/node_classification.py,
DGL's file with its imports renamed) gives the predictions that sampled inference with
every neighbour (MultiLayerFullNeighborSampler) gives, on 2, 3 (batches from a sampler rank) and 4 ranks: each layer of
DGL's model (hpcgnn.nn.SAGEConv) over the whole graph, written to a DistTensor, against
both layers on the same nodes' full 2-hop blocks.  (Node 0 and its out-neighbours are
left out: DGL's example passes ``np.arange(N)`` to ``node_split`` as a mask, whose entry
0 is false, so node 0's rows are never inferred, on DGL too.)"""
import importlib.util
import os
import shutil
import tempfile

import pytest
import torch as th

import hpcgnn.dataloading as dataloading
import hpcgnn.distributed as dist
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph

pytest.importorskip("hpcgnn._ext")
world = MPI.COMM_WORLD
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "dgl", "node_classification.py")


def _example():
    spec = importlib.util.spec_from_file_location("dgl_node_classification", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def shared_tmp():
    path = world.bcast(tempfile.mkdtemp(prefix="hpcgnn-test-") if world.Get_rank() == 0 else None, root=0)
    yield path
    world.Barrier()
    if world.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(300)
def test_layerwise_inference_equals_full_neighbour_sampling(shared_tmp):
    size = world.Get_size()
    nparts, per_node = (2, 2) if size == 4 else (1, None)
    layout = "servers=1,samplers=1,trainers=1" if size == 3 else "servers=1,samplers=0,trainers=1"
    raw = os.path.join(shared_tmp, "g.h5")
    generate_graph(raw, world, 1500, 6, 8, 4, seed=3, name="g", overwrite=True)
    cfg = dist.partition_graph(raw, "g", nparts, os.path.join(shared_tmp, "parts"), comm=world, overwrite=True)
    ctx = dist.initialize("ip_config.txt", layout=layout, ranks_per_node=per_node,
                          part_config=cfg, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    th.distributed.init_process_group(backend="gloo")
    try:
        g = dist.DistGraph("g")
        th.manual_seed(0)
        model = _example().DistSAGE(g.ndata["feat"].shape[1], 16, 4, 2, th.nn.functional.relu, 0.5)
        model.eval()
        with th.no_grad():
            whole = model.inference(g, g.ndata["feat"], 200, th.device("cpu"))      # a DistTensor
            nodes = dist.node_split(th.ones(g.num_nodes(), dtype=th.bool), g.get_partition_book(), force_even=True)
            loader = dataloading.DistNodeDataLoader(g, nodes, dataloading.MultiLayerFullNeighborSampler(2),
                                                    batch_size=128, shuffle=False)
            worst, seen, compared = 0.0, 0, 0
            for input_nodes, seeds, blocks in loader:
                sampled = model(blocks, g.ndata["feat"][input_nodes])
                # the example splits np.arange(N) as a mask: node 0's rows stay zero, in its
                # layer-2 input too, so node 0 and the nodes it sends to are left out
                last = blocks[-1]
                touched = last.edge_index[1][last.src_nodes[last.edge_index[0]] == 0]
                keep = seeds != 0
                keep[touched] = False
                worst = max(worst, float((sampled[keep] - whole[seeds[keep]]).abs().max()))
                seen += len(seeds)
                compared += int(keep.sum())
    finally:
        th.distributed.destroy_process_group()
    assert seen >= len(nodes) and compared > seen // 2 and worst < 1e-4, (worst, compared)
    dist.exit_client()
