"""Reference outputs of DGL's layers for tests/nn/test_nn_dgl.py: run in the DGL peer
environment (bench/dgl_peer/setup.sh), it builds DGL layers on small random blocks,
runs them and saves each case's block, inputs, state_dict and outputs.

    .dglvenv/bin/python bench/dgl_peer/layers.py tests/data/dgl_layers.pt
"""
import sys

import dgl
import dgl.nn as dglnn
import torch


def block(seed, ns=12, nd=5, e=30, zero_dst=True):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, ns, (e,), generator=g)
    dst = torch.randint(0, nd - 1 if zero_dst else nd, (e,), generator=g)   # the last dst: no in-edge
    return src, dst, ns, nd


def cases():
    lin = lambda: torch.nn.Linear(5, 4)  # noqa: E731
    yield "sage-mean-small", dglnn.SAGEConv(5, 3, "mean"), {}, 5
    yield "sage-mean-wide", dglnn.SAGEConv(5, 7, "mean"), {}, 5
    yield "sage-mean-weighted", dglnn.SAGEConv(5, 3, "mean"), {"edge_weight": True}, 5
    yield "sage-gcn-small", dglnn.SAGEConv(5, 3, "gcn"), {}, 5
    yield "sage-gcn-wide", dglnn.SAGEConv(5, 7, "gcn"), {}, 5
    yield "sage-pool", dglnn.SAGEConv(5, 3, "pool"), {}, 5
    yield "sage-lstm", dglnn.SAGEConv(5, 3, "lstm"), {}, 5
    yield "sage-pair", dglnn.SAGEConv((5, 4), 3, "mean"), {"pair": 4}, 5
    for norm in ("both", "right", "left", "none"):
        yield f"graphconv-{norm}", dglnn.GraphConv(5, 3, norm=norm, allow_zero_in_degree=True), {}, 5
    yield "graphconv-wide", dglnn.GraphConv(5, 7, allow_zero_in_degree=True), {"edge_weight": True}, 5
    yield "gin-sum", dglnn.GINConv(lin(), "sum", init_eps=0.1, learn_eps=True), {}, 5
    yield "gin-max", dglnn.GINConv(lin(), "max"), {}, 5
    yield "gin-mean", dglnn.GINConv(None, "mean"), {"edge_weight": True}, 5
    yield "gat", dglnn.GATConv(5, 3, 2, allow_zero_in_degree=True), {"attention": True}, 5
    yield "gat-residual", dglnn.GATConv(5, 3, 2, residual=True, allow_zero_in_degree=True), {}, 5
    yield "gat-residual-same", dglnn.GATConv(6, 3, 2, residual=True, allow_zero_in_degree=True), {}, 6
    yield "gat-weighted", dglnn.GATConv(5, 3, 2, allow_zero_in_degree=True), {"edge_weight": True}, 5
    yield "gatv2", dglnn.GATv2Conv(5, 3, 2, allow_zero_in_degree=True), {"attention": True}, 5
    yield "gatv2-shared-residual", dglnn.GATv2Conv(5, 3, 2, residual=True, share_weights=True,
                                                  allow_zero_in_degree=True), {}, 5


def main(out):
    torch.manual_seed(0)
    saved = {}
    for i, (name, layer, opts, width) in enumerate(cases()):
        src, dst, ns, nd = block(i)
        b = dgl.create_block((src, dst), num_src_nodes=ns, num_dst_nodes=nd)
        x = torch.randn(ns, width)
        feat = (x, torch.randn(nd, opts["pair"])) if "pair" in opts else x
        kw = {}
        if opts.get("edge_weight"):
            kw["edge_weight"] = torch.rand(len(src)) + 0.5
        if opts.get("attention"):
            kw["get_attention"] = True
        with torch.no_grad():
            out_ = layer(b, feat, **kw)
        rst, att = out_ if isinstance(out_, tuple) else (out_, None)
        saved[name] = {"src": src, "dst": dst, "num_src": ns, "num_dst": nd, "feat": feat, "kw": kw,
                       "state": {k: v.clone() for k, v in layer.state_dict().items()}, "out": rst,
                       "attention": att, "repr": repr(layer)}
    torch.save(saved, out)
    print(f"wrote {len(saved)} cases to {out} (dgl {dgl.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main(sys.argv[1])
