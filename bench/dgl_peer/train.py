"""The DGL peer of ``hpcgnn train``: distributed GraphSAGE with DGL's own distributed
module, for ``bench/train_bench.py --dgl-venv``.  Written for this benchmark from
DGL's documented API (DistGraph, node_split, DistNodeDataLoader, DistTensor).

Every process of the peer run executes this file (started by
``bench/dgl_peer/run.py``): with ``DGL_ROLE=server`` it serves its partition inside
``dgl.distributed.initialize`` and exits there; trainers train with the settings of
TARGETS.md (2-layer GraphSAGE, mean aggregation, hidden 256, fanouts 10,25, batch
1000, Adam 0.003, dropout 0.5), time each epoch's sampling (waiting on the loader),
feature fetch and compute, and end with a layer-wise full-graph inference for the
test accuracy, as hpcgnn does.  Trainer 0 prints one JSON line per epoch and a final
one.  ``HPCGNN_PEER_MACHINE`` names the emulated machine of a trainer (all share one
host address; run.py gives each machine its own /dev/shm).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import dgl
import dgl.distributed.rpc_client as rpc_client
from dgl.nn import SAGEConv


class SAGE(nn.Module):
    def __init__(self, in_dim, hidden, out_dim, dropout):
        super().__init__()
        self.layers = nn.ModuleList([SAGEConv(in_dim, hidden, "mean"), SAGEConv(hidden, out_dim, "mean")])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i + 1 < len(self.layers):
                h = self.dropout(F.relu(h))
        return h


def full_graph_inference(g, model, batch, pb):
    """Each layer for every node, in batches over this trainer's share of the nodes,
    written into a DistTensor that the next layer reads."""
    nodes = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), pb, force_even=True)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    x = g.ndata["feat"]
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            out_dim = layer._out_feats
            y = dgl.distributed.DistTensor((g.num_nodes(), out_dim), torch.float32, f"h{i}", persistent=True)
            loader = dgl.dataloading.DistNodeDataLoader(g, nodes, sampler, batch_size=batch, shuffle=False)
            for input_nodes, seeds, blocks in loader:
                h = layer(blocks[0], x[input_nodes])
                if i + 1 < len(model.layers):
                    h = F.relu(h)
                y[seeds] = h
            g.barrier()
            x = y
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ip-config", required=True)
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--graph-name", default="peer")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epoch-steps", type=int, default=0, help="steps per epoch per trainer; 0: full passes")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fanouts", default="10,25", help="DGL's order: input layer first")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--classes", type=int, required=True)
    a = ap.parse_args()
    machine = int(os.environ.get("HPCGNN_PEER_MACHINE", "0"))
    rpc_client.get_local_machine_id = lambda namebook: machine       # one host, emulated machines
    dgl.distributed.initialize(a.ip_config)                          # servers serve here and exit
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    torch.manual_seed(rank)
    g = dgl.distributed.DistGraph(a.graph_name, part_config=a.part_config)
    pb = g.get_partition_book()
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in a.fanouts.split(",")])
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nid, sampler, batch_size=a.batch, shuffle=True,
                                                drop_last=False)
    model = SAGE(g.ndata["feat"].shape[1], a.hidden, a.classes, a.dropout)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=a.lr)
    for epoch in range(a.epochs):
        model.train()
        sample = fetch = compute = 0.0
        steps = edges = 0
        start = tic = time.perf_counter()
        for input_nodes, seeds, blocks in loader:
            t1 = time.perf_counter()
            x = g.ndata["feat"][input_nodes]
            y = g.ndata["label"][seeds]
            t2 = time.perf_counter()
            loss = F.cross_entropy(ddp(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            edges += sum(b.num_edges() for b in blocks)
            steps += 1
            t3 = time.perf_counter()
            sample, fetch, compute = sample + t1 - tic, fetch + t2 - t1, compute + t3 - t2
            tic = t3
            if a.epoch_steps and steps == a.epoch_steps:
                break
        epoch_s = time.perf_counter() - start
        if rank == 0:
            print(json.dumps({"kind": "epoch", "epoch": epoch, "steps": steps, "epoch_s": round(epoch_s, 4),
                              "sample_s": round(sample, 4), "fetch_s": round(fetch, 4),
                              "compute_s": round(compute, 4), "sampled_edges_per_s": round(edges / epoch_s),
                              "loss": round(float(loss), 4)}), flush=True)
    model.eval()
    t = time.perf_counter()
    logits = full_graph_inference(g, model, 10000, pb)
    test_nid = dgl.distributed.node_split(g.ndata["test_mask"], pb, force_even=True)
    right = (logits[test_nid].argmax(1) == g.ndata["label"][test_nid]).sum()
    counts = torch.tensor([int(right), len(test_nid)], dtype=torch.int64)
    torch.distributed.all_reduce(counts)
    if rank == 0:
        print(json.dumps({"kind": "final", "test_acc": round(int(counts[0]) / int(counts[1]), 4),
                          "inference_s": round(time.perf_counter() - t, 2)}), flush=True)
    g.barrier()
    dgl.distributed.exit_client()


if __name__ == "__main__":
    main()
