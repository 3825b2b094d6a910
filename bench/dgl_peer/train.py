"""The DGL peer of ``hpcgnn train``: distributed GraphSAGE (or, with ``--model``, GCN,
GAT or GIN from DGL's own layers) with DGL's own distributed module, for
``bench/train_bench.py --dgl-venv`` and ``bench/zoo_bench.py``.  Written for this
benchmark from DGL's documented API (DistGraph, node_split, DistNodeDataLoader, DistTensor).

Every process of the peer run executes this file (started by
``bench/dgl_peer/run.py``): with ``DGL_ROLE=server`` it serves its partition inside
``dgl.distributed.initialize`` and exits there; trainers train with the settings of
TARGETS.md (2-layer GraphSAGE, mean aggregation, hidden 256, fanouts 10,25, batch
1000, Adam 0.003, dropout 0.5), time each epoch's sampling (waiting on the loader),
feature fetch and compute, and end with a layer-wise full-graph inference for the
test accuracy, as hpcgnn does.  Trainer 0 prints one JSON line per epoch and a final
one.  ``--model`` (default ``$HPCGNN_PEER_MODEL``, else ``sage``) picks DGL's layer of the
kind ``hpcgnn train --model`` trains: ``sage`` SAGEConv (mean), ``gcn`` GraphConv
(norm='right' as hpcgnn's ``gcn``, allow_zero_in_degree=True, on the graph as
partitioned: no self-loops added, where hpcgnn's ``gcn`` adds one per destination of
each block), ``gat`` GATConv (4 heads of
hidden/4 concatenated, then 1 head), ``gin`` GINConv (sum) with a 2-layer MLP, LayerNorm after its first product.
``HPCGNN_PEER_MACHINE`` names the emulated machine of a trainer (all share one
host address; run.py gives each machine its own /dev/shm).
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import dgl
import dgl.distributed.rpc_client as rpc_client
from dgl.nn import GATConv, GINConv, GraphConv, SAGEConv

MODELS = ("sage", "gcn", "gat", "gin")


class Net(nn.Module):
    """Two (len(fanouts)) layers of one DGL convolution kind, ReLU and dropout between
    them.  ``layer(i, block, h)`` is layer ``i`` alone (GAT's heads flattened, the last
    layer's averaged), without the activation; ``out_dims[i]`` its output width."""

    def __init__(self, kind, in_dim, hidden, out_dim, dropout, num_layers=2, heads=4):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.kind, self.out_dims, layers = kind, dims[1:], []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            last = i == num_layers - 1
            if kind == "sage":
                layers.append(SAGEConv(a, b, "mean"))
            elif kind == "gcn":
                layers.append(GraphConv(a, b, norm="right", allow_zero_in_degree=True))
            elif kind == "gat":
                if not last and b % heads:
                    raise SystemExit(f"gat: hidden ({b}) must be a multiple of heads ({heads})")
                layers.append(GATConv(a, b if last else b // heads, 1 if last else heads,
                                      allow_zero_in_degree=True))
            elif kind == "gin":
                layers.append(GINConv(nn.Sequential(nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU(), nn.Linear(b, b)), "sum"))
            else:
                raise SystemExit(f"--model {kind!r}: one of {', '.join(MODELS)}")
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)

    def layer(self, i, block, h):
        h = self.layers[i](block, h)
        if self.kind == "gat":                      # (nodes, heads, out)
            h = h.mean(1) if i == len(self.layers) - 1 else h.flatten(1)
        return h

    def forward(self, blocks, x):
        h = x
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
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
        for i in range(len(model.layers)):
            out_dim = model.out_dims[i]
            y = dgl.distributed.DistTensor((g.num_nodes(), out_dim), torch.float32, f"h{i}", persistent=True)
            loader = dgl.dataloading.DistNodeDataLoader(g, nodes, sampler, batch_size=batch, shuffle=False)
            for input_nodes, seeds, blocks in loader:
                h = model.layer(i, blocks[0], x[input_nodes])
                if i + 1 < len(model.layers):
                    h = F.relu(h)
                y[seeds] = h
            g.barrier()
            x = y
    return x


def train_epochs(g, model, ddp, opt, loader, a, rank: int) -> None:
    """``a.epochs`` epochs of ``a.epoch_steps`` steps (all when 0), the user's loop as
    DGL's tutorial writes it; trainer 0 prints one JSON line per epoch with the time
    spent sampling, reading features and computing."""
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
    ap.add_argument("--model", choices=MODELS, default=os.environ.get("HPCGNN_PEER_MODEL", "sage"),
                    help="DGL's layer kind (default: $HPCGNN_PEER_MODEL, else sage)")
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
    model = Net(a.model, g.ndata["feat"].shape[1], a.hidden, a.classes, a.dropout,
                num_layers=len(a.fanouts.split(",")))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=a.lr)
    train_epochs(g, model, ddp, opt, loader, a, rank)
    model.eval()
    t = time.perf_counter()
    logits = full_graph_inference(g, model, 10000, pb)
    test_nid = dgl.distributed.node_split(g.ndata["test_mask"], pb, force_even=True)
    right = (logits[test_nid].argmax(1) == g.ndata["label"][test_nid]).sum()
    counts = torch.tensor([int(right), len(test_nid)], dtype=torch.int64)
    torch.distributed.all_reduce(counts)
    if rank == 0:
        print(json.dumps({"kind": "final", "model": a.model,
                          "test_acc": round(int(counts[0]) / int(counts[1]), 4),
                          "inference_s": round(time.perf_counter() - t, 2)}), flush=True)
    g.barrier()
    dgl.distributed.exit_client()


if __name__ == "__main__":
    main()
