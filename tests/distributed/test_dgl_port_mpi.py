"""DGL's distributed node-classification tutorial loop, ported by changing its
imports (``dgl.distributed`` -> ``hpcgnn.distributed``, ``dgl.dataloading`` ->
``hpcgnn.dataloading``) and the model's layer (PyG's ``SAGEConv`` on the blocks),
on a small generated graph whose labels the features alone predict poorly (noisy
features, homophilous edges: a features-only model reaches ~40%), at 2-4 ranks:
training accuracy rises far above chance and above what the features alone give.
At 3 ranks the batches come from a sampler rank (the DGL-order sampler travels
there); at 4 ranks from two partitions on two virtual nodes."""
import os
import shutil
import tempfile

import numpy as np
import pytest
import torch as th
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import hpcgnn.bernoulli
import hpcgnn.dataloading as dataloading
import hpcgnn.distributed as dist
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph

pytest.importorskip("hpcgnn._ext")
SAGEConv = pytest.importorskip("torch_geometric.nn").SAGEConv
world = MPI.COMM_WORLD
NUM_CLASSES = 4
EPOCHS = 5


@pytest.fixture
def shared_tmp():
    """A directory made by rank 0, the same on every rank, removed afterwards."""
    path = world.bcast(tempfile.mkdtemp(prefix="hpcgnn-test-") if world.Get_rank() == 0 else None, root=0)
    yield path
    world.Barrier()
    if world.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)


class SAGE(nn.Module):
    """The tutorial's model, with PyG's SAGEConv applied to each block."""

    def __init__(self, in_feats, n_hidden, n_classes, n_layers):
        super().__init__()
        self.n_layers = n_layers
        self.layers = nn.ModuleList([SAGEConv(in_feats, n_hidden)])
        for _ in range(1, n_layers - 1):
            self.layers.append(SAGEConv(n_hidden, n_hidden))
        self.layers.append(SAGEConv(n_hidden, n_classes))

    def forward(self, blocks, x):
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            x = layer((x, x[:block.num_dst_nodes()]), block.edge_index)
            if i != self.n_layers - 1:
                x = F.relu(x)
        return x


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(300)
def test_dgl_tutorial_loop_ported_by_imports(shared_tmp):
    size = world.Get_size()
    nparts, per_node = (2, 2) if size == 4 else (1, None)
    layout = {3: "servers=1,samplers=1,trainers=1"}.get(size, "servers=1,samplers=0,trainers=1")
    raw = os.path.join(shared_tmp, "g.h5")
    generate_graph(raw, world, 3000, 8, 16, NUM_CLASSES, seed=11, name="g", overwrite=True, homophily=0.9,
                   noise=2.0)
    # DGL: dgl.distributed.partition_graph(graph, graph_name, num_parts, out_path, balance_ntypes=..., ...)
    cfg = dist.partition_graph(raw, "g", nparts, os.path.join(shared_tmp, "parts"), balance_ntypes="train_mask",
                               balance_edges=True, comm=world, overwrite=True)

    # -- the tutorial's script (trainers); servers and samplers serve here ---------
    ctx = dist.initialize("ip_config.txt", layout=layout, ranks_per_node=per_node, part_config=cfg, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    assert hpcgnn.bernoulli.installed()         # the model's nn.Dropout draws its masks compiled
    th.distributed.init_process_group(backend="gloo")
    try:
        g = dist.DistGraph("g")
        train_nid = dist.node_split(g.ndata["train_mask"])
        valid_nid = dist.node_split(g.ndata["val_mask"])

        num_hidden, num_layers, lr = 32, 2, 0.01
        num_labels = len(th.unique(g.ndata["label"][0:g.number_of_nodes()]))
        assert num_labels == NUM_CLASSES
        th.manual_seed(0)
        model = SAGE(g.ndata["feat"].shape[1], num_hidden, num_labels, num_layers)
        loss_fcn = nn.CrossEntropyLoss()
        optimizer = optim.Adam(model.parameters(), lr=lr)
        model = th.nn.parallel.DistributedDataParallel(model)

        sampler = dataloading.MultiLayerNeighborSampler([10, 5])
        train_dataloader = dataloading.NodeDataLoader(g, train_nid, sampler, batch_size=64, shuffle=True,
                                                      drop_last=False)
        valid_dataloader = dataloading.NodeDataLoader(g, valid_nid, sampler, batch_size=64, shuffle=False,
                                                      drop_last=False)
        expect = "samplers" if size == 3 else "thread"
        assert train_dataloader.mode == expect

        accs = []
        for epoch in range(EPOCHS):
            correct = total = 0
            for step, (input_nodes, seeds, blocks) in enumerate(train_dataloader):
                batch_inputs = g.ndata["feat"][input_nodes]
                batch_labels = g.ndata["label"][seeds]
                batch_pred = model(blocks, batch_inputs)
                loss = loss_fcn(batch_pred, batch_labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                correct += int((batch_pred.argmax(1) == batch_labels).sum())
                total += len(seeds)
            accs.append(world_fraction(ctx, correct, total))

        predictions, labels = [], []
        with th.no_grad():
            for step, (input_nodes, seeds, blocks) in enumerate(valid_dataloader):
                inputs = g.ndata["feat"][input_nodes]
                labels.append(g.ndata["label"][seeds].numpy())
                predictions.append(model(blocks, inputs).argmax(1).numpy())
        predictions, labels = np.concatenate(predictions), np.concatenate(labels)
        val_acc = world_fraction(ctx, int((predictions == labels).sum()), len(labels))
        if ctx.trainer_comm.Get_rank() == 0:
            print(f"train accuracy by epoch {accs}, validation {val_acc:.3f}")
    finally:
        th.distributed.destroy_process_group()
    # chance is 1/4; the same model fed blocks without edges stays near 0.4 (features
    # alone); with the graph it passes 0.75 in single-process runs of this loop
    assert accs[-1] > 0.65 and accs[-1] > accs[0] + 0.1, accs
    assert val_acc > 0.6, (accs, val_acc)
    dist.exit_client()
    assert ctx.finalized


def world_fraction(ctx, hits, count):
    """hits / count summed over the trainers."""
    h, c = ctx.trainer_comm.allreduce(np.array([hits, count], np.int64))
    return float(h) / max(int(c), 1)
