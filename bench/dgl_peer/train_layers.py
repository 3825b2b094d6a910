"""The DGL side of ``bench/dgl_layers_bench.py``: a 2-layer model of DGL's own
``GATConv`` (``--model gat``) or ``RelGraphConv`` (``--model rgcn``) trained with DGL's
distributed module, timed per epoch.  Started by ``bench/dgl_peer/run.py --script
train_layers.py`` (2 emulated machines of [server, trainer]); trainer 0 prints one
JSON line per epoch and a final one (no inference: ``test_acc`` null).

* ``gat``: ``bench/dgl_peer/train.py``'s ``Net("gat")``: GATConv(in, hidden/heads,
  heads) with the heads flattened, ReLU, dropout, GATConv(hidden, classes, 1).
* ``rgcn``: RelGraphConv(in, hidden, num_rels, regularizer, num_bases, self_loop),
  ReLU, dropout, RelGraphConv(hidden, classes, ...); the graph is homogeneous, so each
  sampled edge's relation is ``block.edata[dgl.EID] % num_rels`` (its global edge id
  in DGL's partitioned numbering).

Settings are the callers' (hidden 256, fanouts 10,25 in DGL's order, batch 1000,
Adam 0.003, dropout 0.5, ``--epoch-steps`` steps per epoch).
"""
import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import dgl
import dgl.distributed.rpc_client as rpc_client
from dgl.nn import RelGraphConv

from train import Net, train_epochs      # bench/dgl_peer/train.py: DGL's GAT model of the zoo, its loop


class RGCN(nn.Module):
    def __init__(self, in_dim, hidden, out_dim, num_rels, regularizer, num_bases, dropout):
        super().__init__()
        reg = None if regularizer == "none" else regularizer
        nb = num_bases if reg else None
        self.num_rels = num_rels
        self.layers = nn.ModuleList([RelGraphConv(in_dim, hidden, num_rels, reg, nb, self_loop=True),
                                     RelGraphConv(hidden, out_dim, num_rels, reg, nb, self_loop=True)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h, block.edata[dgl.EID] % self.num_rels)
            if i + 1 < len(self.layers):
                h = self.dropout(F.relu(h))
        return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ip-config", required=True)
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--graph-name", default="peer")
    ap.add_argument("--model", choices=("gat", "rgcn"), required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epoch-steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fanouts", default="10,25", help="DGL's order: input layer first")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--num-rels", type=int, default=4)
    ap.add_argument("--regularizer", default="basis", choices=("none", "basis", "bdd"))
    ap.add_argument("--num-bases", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--classes", type=int, required=True)
    a = ap.parse_args()
    machine = int(os.environ.get("HPCGNN_PEER_MACHINE", "0"))
    rpc_client.get_local_machine_id = lambda namebook: machine       # one host, emulated machines
    dgl.distributed.initialize(a.ip_config)                          # servers serve here and exit
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    torch.manual_seed(0)
    g = dgl.distributed.DistGraph(a.graph_name, part_config=a.part_config)
    pb = g.get_partition_book()
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in a.fanouts.split(",")])
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nid, sampler, batch_size=a.batch, shuffle=True,
                                                drop_last=False)
    in_dim = g.ndata["feat"].shape[1]
    if a.model == "gat":
        model = Net("gat", in_dim, a.hidden, a.classes, a.dropout, num_layers=2, heads=a.heads)
    else:
        model = RGCN(in_dim, a.hidden, a.classes, a.num_rels, a.regularizer, a.num_bases, a.dropout)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=a.lr)
    train_epochs(g, model, ddp, opt, loader, a, rank)
    if rank == 0:
        print(json.dumps({"kind": "final", "model": a.model, "test_acc": None, "inference_s": None}), flush=True)
    g.barrier()
    dgl.distributed.exit_client()


if __name__ == "__main__":
    main()
