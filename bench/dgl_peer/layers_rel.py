"""Reference outputs of DGL's relational layers for tests/nn/test_nn_rel.py: run in the
DGL peer environment (bench/dgl_peer/setup.sh), it builds RelGraphConv,
TypedLinear, WeightBasis and HeteroGraphConv on small random blocks, runs them and
saves each case's structure, inputs, constructor arguments, state_dict and output.

    .dglvenv/bin/python bench/dgl_peer/layers_rel.py tests/data/dgl_rel_layers.pt
"""
import sys

import dgl
import dgl.nn as dglnn
import torch

NUM_SRC = {"game": 6, "store": 4, "user": 7}
NUM_DST = {"game": 2, "store": 0, "user": 3}       # store: sources only
WIDTH = {"game": 5, "store": 4, "user": 5}
RELS = [("user", "follows", "user"), ("user", "plays", "game"), ("store", "sells", "game"),
        ("game", "played_by", "user")]


def rel_cases():
    """name, RelGraphConv arguments, options (block size, norm, presorted)."""
    yield "rgc-none", dict(in_feat=5, out_feat=4, num_rels=3), {}
    yield "rgc-none-sparse", dict(in_feat=5, out_feat=4, num_rels=4), {"e": 8}
    yield "rgc-basis", dict(in_feat=5, out_feat=4, num_rels=3, regularizer="basis", num_bases=2), {}
    yield "rgc-basis-sparse", dict(in_feat=5, out_feat=4, num_rels=4, regularizer="basis", num_bases=2), {"e": 8}
    yield "rgc-basis-default", dict(in_feat=5, out_feat=4, num_rels=3, regularizer="basis"), {}
    yield "rgc-bdd", dict(in_feat=6, out_feat=4, num_rels=3, regularizer="bdd", num_bases=2), {}
    yield "rgc-bdd-sparse", dict(in_feat=6, out_feat=4, num_rels=4, regularizer="bdd", num_bases=2), {"e": 8}
    yield "rgc-noloop", dict(in_feat=5, out_feat=4, num_rels=3, self_loop=False), {}
    yield "rgc-layernorm", dict(in_feat=5, out_feat=4, num_rels=3, layer_norm=True), {}
    yield "rgc-layernorm-noloop-nobias", dict(in_feat=5, out_feat=4, num_rels=3, layer_norm=True, self_loop=False,
                                              bias=False), {}
    yield "rgc-norm", dict(in_feat=5, out_feat=4, num_rels=3, regularizer="basis", num_bases=2), {"norm": True}
    yield "rgc-norm-sparse", dict(in_feat=5, out_feat=4, num_rels=4), {"norm": True, "e": 8}
    yield "rgc-presorted", dict(in_feat=5, out_feat=4, num_rels=3), {"presorted": True, "e": 8}
    yield "rgc-bdd-presorted", dict(in_feat=6, out_feat=4, num_rels=3, regularizer="bdd", num_bases=2), \
        {"presorted": True}
    yield "rgc-relu", dict(in_feat=5, out_feat=4, num_rels=3, activation="relu"), {}


def hetero_mods(key_canonical=False):
    """The modules per relation, as (key, class name, args, kwargs)."""
    spec = [("follows", "GraphConv", (5, 3), {}),
            ("plays", "GraphConv", (5, 3), {"norm": "right"}),
            ("sells", "SAGEConv", ((4, 5), 3, "mean"), {}),
            ("played_by", "SAGEConv", (5, 3, "gcn"), {})]
    if key_canonical:
        spec = [(next(c for c in RELS if c[1] == k), cls, a, kw) for k, cls, a, kw in spec]
    return spec


def hetero_cases():
    """name, mods spec, aggregate, options."""
    for agg in ("sum", "mean", "max", "min", "stack"):
        yield f"hetero-{agg}", hetero_mods(), agg, {}
    yield "hetero-canonical-keys", hetero_mods(True), "sum", {}
    yield "hetero-pair", hetero_mods(), "sum", {"pair": True}
    yield "hetero-empty-relation", hetero_mods(), "stack", {"empty": "sells"}
    yield "hetero-missing-input", hetero_mods(), "sum", {"drop": "store"}
    basis = [(r[1], "GraphConv", (5, 3), {"norm": "right", "weight": False, "bias": False})
             for r in RELS if r[0] != "store"] + [("sells", "GraphConv", (4, 3), {"norm": "right", "weight": False,
                                                                                  "bias": False})]
    yield "hetero-weightbasis", basis, "sum", {"basis": True}


def rel_block(seed, ns=12, nd=5, e=30, num_rels=3, presorted=False):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, ns, (e,), generator=g)
    dst = torch.randint(0, nd - 1, (e,), generator=g)        # the last destination: no in-edge
    et = torch.randint(0, num_rels, (e,), generator=g)
    if presorted:
        et = torch.sort(et).values
    return src, dst, et, ns, nd


def hetero_block(seed, empty=None):
    g = torch.Generator().manual_seed(seed)
    edges = {}
    for i, (s, r, d) in enumerate(RELS):
        n = 0 if r == empty else 6 + 2 * i
        edges[(s, r, d)] = (torch.randint(0, NUM_SRC[s], (n,), generator=g),
                            torch.randint(0, NUM_DST[d], (n,), generator=g))
    return edges


def make_rel(saved):
    for i, (name, ctor, opts) in enumerate(rel_cases()):
        kw = dict(ctor)
        if kw.get("activation") == "relu":
            kw["activation"] = torch.relu
        layer = dglnn.RelGraphConv(**kw)
        with torch.no_grad():
            for p in layer.parameters():          # non-trivial layer norm and bias
                p.add_(0.1 * torch.randn(p.shape))
        src, dst, et, ns, nd = rel_block(100 + i, e=opts.get("e", 30), num_rels=ctor["num_rels"],
                                         presorted=opts.get("presorted", False))
        b = dgl.create_block((src, dst), num_src_nodes=ns, num_dst_nodes=nd)
        x = torch.randn(ns, ctor["in_feat"])
        norm = torch.rand(len(src), 1) + 0.5 if opts.get("norm") else None
        with torch.no_grad():
            out = layer(b, x, et, norm, presorted=opts.get("presorted", False))
        saved[name] = {"kind": "RelGraphConv", "ctor": ctor, "src": src, "dst": dst, "etypes": et, "num_src": ns,
                       "num_dst": nd, "feat": x, "norm": norm, "presorted": opts.get("presorted", False),
                       "state": _state(layer), "out": out, "repr": repr(layer)}


def make_typed(saved):
    for i, (reg, nb, sort) in enumerate([(None, None, False), ("basis", 2, False), ("bdd", 2, False),
                                         (None, None, True), ("basis", 3, True), ("bdd", 3, True)]):
        ctor = dict(in_size=6, out_size=12, num_types=4, regularizer=reg, num_bases=nb)
        m = dglnn.TypedLinear(**ctor)
        x = torch.randn(20, 6)
        t = torch.randint(0, 4, (20,))
        if sort:
            t = torch.sort(t).values
        with torch.no_grad():
            out = m(x, t, sort)
        saved[f"typed-{reg}-{'sorted' if sort else 'unsorted'}"] = {
            "kind": "TypedLinear", "ctor": ctor, "x": x, "x_type": t, "sorted": sort, "state": _state(m),
            "out": out, "repr": repr(m)}
    ctor = dict(shape=(5, 3), num_bases=2, num_outputs=4)
    wb = dglnn.WeightBasis(**ctor)
    with torch.no_grad():
        saved["weightbasis"] = {"kind": "WeightBasis", "ctor": ctor, "state": _state(wb), "out": wb()}


class BasisLayer(torch.nn.Module):
    """HeteroGraphConv of weightless GraphConvs fed WeightBasis weights (DGL's
    distributed R-GCN example)."""

    def __init__(self, conv, rel_names):
        super().__init__()
        self.conv, self.rel_names = conv, rel_names
        self.basis = dglnn.WeightBasis((5, 3), 2, len(rel_names))

    def forward(self, g, inputs):
        w = self.basis()
        kw = {r: {"weight": w[i] if r != "sells" else w[i][:4]} for i, r in enumerate(self.rel_names)}
        return self.conv(g, inputs, mod_kwargs=kw)


def make_hetero(saved):
    for i, (name, spec, agg, opts) in enumerate(hetero_cases()):
        conv = dglnn.HeteroGraphConv({k: getattr(dglnn, cls)(*a, **kw) for k, cls, a, kw in spec}, aggregate=agg)
        layer = BasisLayer(conv, [r[1] for r in RELS]) if opts.get("basis") else conv
        edges = hetero_block(200 + i, opts.get("empty"))
        b = dgl.create_block(edges, num_src_nodes=NUM_SRC, num_dst_nodes=NUM_DST)
        feats = {t: torch.randn(NUM_SRC[t], WIDTH[t]) for t in NUM_SRC if t != opts.get("drop")}
        inputs = feats
        if opts.get("pair"):
            inputs = (feats, {t: torch.randn(NUM_DST[t], WIDTH[t]) for t in NUM_DST})
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(0.1 * torch.randn(p.shape))
            out = layer(b, inputs)
        saved[name] = {"kind": "HeteroGraphConv", "mods": spec, "aggregate": agg, "basis": bool(opts.get("basis")),
                       "edges": edges, "num_src": dict(NUM_SRC), "num_dst": dict(NUM_DST),
                       "ntypes": list(b.ntypes), "srctypes": list(b.srctypes), "dsttypes": list(b.dsttypes),
                       "canonical_etypes": list(b.canonical_etypes), "inputs": inputs,
                       "state": _state(layer), "out": out}


def _state(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


def main(out):
    torch.manual_seed(0)
    saved = {}
    make_rel(saved)
    make_typed(saved)
    make_hetero(saved)
    torch.save(saved, out)
    print(f"wrote {len(saved)} cases to {out} (dgl {dgl.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main(sys.argv[1])
