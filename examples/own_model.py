"""Train your own model: a GAT written here, trained by hpcgnn's runtime.

    mpirun -n 4 python examples/own_model.py --part-config runs/main/parts/synthetic.json

4 ranks = 2 virtual hosts of a server and a trainer each (HPCGNN_RANKS_PER_NODE=2).
The runtime (``hpcgnn.train.Trainer``) gives DDP, checkpoints (``--resume``), SIGUSR1/
SIGTERM stops, the run log and evaluation; the model sees only tensors and blocks.
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv

import hpcgnn
from hpcgnn.graph import DistGraph, node_split
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler
from hpcgnn.train import Trainer, layerwise_inference


class GAT(nn.Module):
    """Two GATConv layers on per-layer blocks: ``forward(x, adjs)`` for training,
    ``layer(i, x, adj)`` for layer-wise inference over the whole graph."""

    def __init__(self, in_dim, hidden, out_dim, heads=4, dropout=0.5):
        super().__init__()
        self.convs = nn.ModuleList([GATConv(in_dim, hidden // heads, heads=heads), GATConv(hidden, out_dim)])
        self.dropout = dropout
        self.num_layers = 2

    def layer(self, i, x, adj):
        h = self.convs[i]((x, x[: adj.num_dst]), adj.edge_index)   # destinations: the first num_dst rows
        return F.dropout(F.elu(h), self.dropout, self.training) if i == 0 else h

    def forward(self, x, adjs):
        for i, adj in enumerate(adjs):
            x = self.layer(i, x, adj)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--run-dir", default="runs/own_model")
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("HPCGNN_RANKS_PER_NODE", "2")
    hpcgnn.initialize(layout="servers=1,samplers=0,trainers=rest", part_config=a.part_config)
    with open(a.part_config) as fh:        # servers never get here: they serve, then exit
        conf = json.load(fh)
    g = DistGraph(conf["graph_name"])
    train, val, test = (node_split(g.ndata[m]) for m in ("train_mask", "val_mask", "test_mask"))
    num_classes = conf["num_classes"]

    torch.manual_seed(0)
    model = GAT(g.ndata["feat"].shape[1], 128, num_classes)
    trainer = Trainer(model, lr=0.003, run_dir=a.run_dir, resume=a.resume, graph=g)
    sampler = NeighborSampler([10, 5])                   # hop order: 10 neighbours of each seed, then 5
    loader = DistNodeDataLoader(g, train, sampler, batch_size=1000, shuffle=True, labels="seeds")
    val_loader = DistNodeDataLoader(g, val, sampler, batch_size=1000, labels="seeds")

    def loss_fn(model, b):
        out = model(b.x, b.adjs)
        y = b.y[: b.batch_size].long()
        return F.cross_entropy(out, y), (out.argmax(1) == y).sum(), b.batch_size

    def predict(model, b):
        return model(b.x, b.adjs).argmax(1), b.y[: b.batch_size].long()

    fit = trainer.fit(loader, loss_fn, epochs=a.epochs,
                      evaluate=lambda epoch: {"val_acc": trainer.accuracy(val_loader, predict)})
    if not fit.stopped:                                  # a stop signal: checkpointed, resume with --resume
        logits = layerwise_inference(model, g, "feat")   # every node, layer by layer
        right = (logits[test].argmax(1) == torch.as_tensor(g.ndata["label"][test])).sum()
        acc = trainer.allsum([int(right), len(test)])
        result = trainer.finish({"test_acc": acc[0] / acc[1]})
        trainer.say(f"test accuracy: {result['test_acc']:.4f}")
    trainer.close()


if __name__ == "__main__":
    main()
