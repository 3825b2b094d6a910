"""hpcgnn.nn's relational layers give DGL's outputs: each case of
tests/data/dgl_rel_layers.pt (made by bench/dgl_peer/layers_rel.py with DGL 2.1)
holds a block (for HeteroGraphConv: per-relation edges of a DGL heterogeneous
block), its inputs, the DGL layer's constructor arguments, state_dict and output;
the hpcgnn layer loads that state_dict strictly and must give the same output.
HeteroGraphConv runs on a HeteroBlock split from a typed homogeneous block whose
nodes and edges are shuffled across types, as hpcgnn's samplers make them."""
import os

import pytest
import torch

import hpcgnn.nn as dglnn
from hpcgnn.errors import DGLError, InputError
from hpcgnn.partition.book import RangePartitionBook
from hpcgnn.sampling import Block
from hpcgnn.sampling.batch import EID, ETYPE, NID, MiniBatch

CASES = torch.load(os.path.join(os.path.dirname(__file__), os.pardir, "data", "dgl_rel_layers.pt"), weights_only=False)
TOL = dict(rtol=1e-5, atol=1e-5)
BASE = 100          # node ids per type in the test's partition book: type i holds [100 i, 100 (i + 1))


def _names(kind):
    return sorted(k for k, c in CASES.items() if c["kind"] == kind)


def _block(src, dst, ns, nd, e_type=None):
    n = torch.arange(ns)
    return Block(n, n[:nd], torch.stack([src, dst]), torch.arange(len(src)), None, e_type)


def _rel_layer(case):
    kw = dict(case["ctor"])
    if kw.get("activation") == "relu":
        kw["activation"] = torch.relu
    layer = dglnn.RelGraphConv(**kw)
    layer.load_state_dict(case["state"], strict=True)
    return layer.eval()


@pytest.mark.parametrize("name", _names("RelGraphConv"))
def test_relgraphconv_gives_dgls_output(name):
    case = CASES[name]
    layer = _rel_layer(case)
    assert repr(layer).replace(", bias=True)", ")") == case["repr"]      # newer torch shows LayerNorm's bias
    block = _block(case["src"], case["dst"], case["num_src"], case["num_dst"], case["etypes"])
    args = (block, case["feat"], case["etypes"], case["norm"])
    with torch.no_grad():
        torch.testing.assert_close(layer(*args, presorted=case["presorted"]), case["out"], **TOL)
        for order in ("nodes", "edges"):         # both aggregation orders
            layer._order = order
            torch.testing.assert_close(layer(*args, presorted=case["presorted"]), case["out"], **TOL)
        layer._order = None
        own = layer(block, case["feat"], block.edata[ETYPE], case["norm"])     # etypes from the block
        torch.testing.assert_close(own, case["out"], **TOL)
        torch.testing.assert_close(layer(block, case["feat"], None, case["norm"]), case["out"], **TOL)


@pytest.mark.parametrize("name", _names("TypedLinear"))
def test_typedlinear_gives_dgls_output(name):
    case = CASES[name]
    m = dglnn.TypedLinear(**case["ctor"])
    m.load_state_dict(case["state"], strict=True)
    assert repr(m) == case["repr"]
    with torch.no_grad():
        torch.testing.assert_close(m(case["x"], case["x_type"], case["sorted"]), case["out"], **TOL)
        torch.testing.assert_close(m(case["x"], case["x_type"]), case["out"], **TOL)
        onehot = torch.nn.functional.one_hot(case["x_type"], m.num_types).unsqueeze(-1) * case["x"].unsqueeze(1)
        torch.testing.assert_close(m.sum_typed(onehot), case["out"], **TOL)


def test_weightbasis_gives_dgls_output():
    case = CASES["weightbasis"]
    wb = dglnn.WeightBasis(**case["ctor"])
    wb.load_state_dict(case["state"], strict=True)
    with torch.no_grad():
        torch.testing.assert_close(wb(), case["out"], **TOL)
    with pytest.warns(UserWarning, match="WeightBasis"):
        dglnn.WeightBasis((2, 2), 3, 3)


def _book(ntypes, canonical):
    return RangePartitionBook({"graph_name": "g", "num_parts": 1,
                               "node_map": {t: [[BASE * i, BASE * (i + 1)]] for i, t in enumerate(ntypes)},
                               "ntypes": {t: i for i, t in enumerate(ntypes)},
                               "edge_map": {":".join(c): [[BASE * i, BASE * (i + 1)]] for i, c in enumerate(canonical)},
                               "etypes": {":".join(c): i for i, c in enumerate(canonical)}}, 0)


def _typed_block(case, seed=0):
    """A homogeneous typed Block holding the case's heterogeneous block: the
    destinations of all types first, types interleaved at random, then the other
    sources; edges of all relations interleaved (each relation's own order kept).
    Returns it, the per-type ids of every type's sources, and the book."""
    g = torch.Generator().manual_seed(seed)
    ntypes, canon = case["srctypes"], case["canonical_etypes"]
    nd = torch.cat([torch.full((case["num_dst"][t],), i) for i, t in enumerate(ntypes)])
    rest = torch.cat([torch.full((case["num_src"][t] - case["num_dst"][t],), i) for i, t in enumerate(ntypes)])
    n_type = torch.cat([nd[torch.randperm(len(nd), generator=g)], rest[torch.randperm(len(rest), generator=g)]])
    pos = {t: torch.nonzero(n_type == i).flatten() for i, t in enumerate(ntypes)}
    per_type = {t: torch.randperm(BASE, generator=g)[:case["num_src"][t]] for t in ntypes}
    ids = torch.empty(len(n_type), dtype=torch.long)
    for i, t in enumerate(ntypes):
        ids[pos[t]] = BASE * i + per_type[t]
    src = torch.cat([pos[c[0]][case["edges"][c][0]] for c in canon])
    dst = torch.cat([pos[c[2]][case["edges"][c][1]] for c in canon])
    et = torch.cat([torch.full((len(case["edges"][c][0]),), r) for r, c in enumerate(canon)])
    where = torch.argsort(et[torch.randperm(len(et), generator=g)], stable=True)    # edge j's row in the block
    ei, e_type = torch.empty(2, len(et), dtype=torch.long), torch.empty_like(et)
    ei[0, where], ei[1, where], e_type[where] = src, dst, et
    e_id = torch.empty_like(et)
    e_id[where] = torch.cat([BASE * r + torch.arange(len(case["edges"][c][0])) for r, c in enumerate(canon)])
    block = Block(ids, ids[:len(nd)], ei, e_id, None, e_type.to(torch.int32), n_type.to(torch.int8))
    return block, per_type, _book(ntypes, canon)


class BasisLayer(torch.nn.Module):
    """bench/dgl_peer/layers_rel.py's: weightless GraphConvs fed WeightBasis weights."""

    def __init__(self, conv, rel_names):
        super().__init__()
        self.conv, self.rel_names = conv, rel_names
        self.basis = dglnn.WeightBasis((5, 3), 2, len(rel_names))

    def forward(self, g, inputs):
        w = self.basis()
        kw = {r: {"weight": w[i] if r != "sells" else w[i][:4]} for i, r in enumerate(self.rel_names)}
        return self.conv(g, inputs, mod_kwargs=kw)


def _hetero_layer(case):
    conv = dglnn.HeteroGraphConv({k: getattr(dglnn, cls)(*a, **kw) for k, cls, a, kw in case["mods"]},
                                 aggregate=case["aggregate"])
    layer = BasisLayer(conv, ["follows", "plays", "sells", "played_by"]) if case["basis"] else conv
    layer.load_state_dict(case["state"], strict=True)
    return layer.eval()


@pytest.mark.parametrize("name", _names("HeteroGraphConv"))
def test_heterographconv_gives_dgls_output(name):
    case = CASES[name]
    block, per_type, book = _typed_block(case)
    hb = dglnn.to_hetero_blocks(block, book)
    assert hb.canonical_etypes == case["canonical_etypes"] and hb.srctypes == case["srctypes"]
    for t in hb.ntypes:
        assert hb.num_src_nodes(t) == case["num_src"][t] and hb.num_dst_nodes(t) == case["num_dst"][t]
        assert torch.equal(hb.srcdata[NID][t], per_type[t])
        assert torch.equal(hb.dstnodes[t].data[NID], per_type[t][:case["num_dst"][t]])
    for c in hb.canonical_etypes:
        assert torch.equal(hb[c].edge_index, torch.stack(case["edges"][c]))
        assert hb.num_edges(c[1]) == len(case["edges"][c][0])
        assert torch.equal(hb.edata[EID][c], torch.arange(len(case["edges"][c][0])))    # per-type edge ids
    layer = _hetero_layer(case)
    with torch.no_grad():
        out = layer(hb, case["inputs"])
    assert sorted(out) == sorted(case["out"])
    for t in out:
        torch.testing.assert_close(out[t], case["out"][t], **TOL)


def test_hand_worked_relgraphconv():
    """W_0 = I, W_1 = 2 I; edges 1 -> 0 (relation 0, norm 0.5), 2 -> 0 and 0 -> 1
    (relation 1); the self-loop adds h_dst, the bias 1."""
    layer = dglnn.RelGraphConv(2, 2, 2)
    with torch.no_grad():
        layer.linear_r.W.copy_(torch.stack([torch.eye(2), 2 * torch.eye(2)]))
        layer.loop_weight.copy_(torch.eye(2))
        layer.h_bias.fill_(1.0)
    block = _block(torch.tensor([1, 2, 0]), torch.tensor([0, 0, 1]), 3, 2)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    out = layer(block, x, torch.tensor([0, 1, 1]), torch.tensor([[0.5], [1.0], [1.0]]))
    # node 0: 0.5 * [0, 1] + 2 * [1, 1] + [1, 0] + 1;  node 1: 2 * [1, 0] + [0, 1] + 1
    torch.testing.assert_close(out, torch.tensor([[4.0, 3.5], [3.0, 2.0]]))


def test_bad_inputs_name_the_layer_and_shapes():
    case = CASES["hetero-sum"]
    layer = _hetero_layer(case)
    n = torch.arange(7)
    plain = Block(n, n[:3], torch.tensor([[1, 2], [0, 1]]), torch.arange(2))
    with pytest.raises(InputError, match=r"HeteroGraphConv.*without edge types.*7 sources, 3 destinations, 2 edges"):
        layer(plain, case["inputs"])
    block, _, book = _typed_block(case)
    with pytest.raises(DGLError, match="HeteroGraphConv.*to_hetero_blocks"):
        layer(block, case["inputs"])
    hb = dglnn.to_hetero_blocks(block, book)
    narrow = dict(case["inputs"], user=torch.randn(7, 4))
    where = r"HeteroGraphConv, relation \('game', 'played_by', 'user'\): SAGEConv: expects 5 .*\(3, 4\)"
    with pytest.raises(InputError, match=where):
        layer(hb, narrow)
    with pytest.raises(InputError, match=r"HeteroGraphConv: source features of 'user' have shape \(6, 5\)"):
        layer(hb, dict(case["inputs"], user=torch.randn(6, 5)))
    with pytest.raises(DGLError, match="node type 'movie'"):
        layer(hb, dict(case["inputs"], movie=torch.randn(6, 5)))
    with pytest.raises(DGLError, match="aggregate"):
        dglnn.HeteroGraphConv({}, aggregate="median")
    rel = CASES["rgc-none"]
    rgc = _rel_layer(rel)
    b = _block(rel["src"], rel["dst"], rel["num_src"], rel["num_dst"])
    with pytest.raises(DGLError, match=r"RelGraphConv: etypes has shape \(29,\), the block has 30 edges"):
        rgc(b, rel["feat"], rel["etypes"][:29])
    with pytest.raises(InputError, match=r"RelGraphConv: expects 5 input features.*\(12, 4\)"):
        rgc(b, rel["feat"][:, :4], rel["etypes"])
    with pytest.raises(InputError, match=r"RelGraphConv: etypes hold relation ids in \[0, 3\].*num_rels=3"):
        rgc(b, rel["feat"], rel["etypes"].clamp(max=2) + (rel["etypes"] == 2).long())
    with pytest.raises(InputError, match="RelGraphConv: no etypes given"):
        rgc(b, rel["feat"], None)
    with pytest.raises(DGLError, match="RelGraphConv: norm has shape"):
        rgc(b, rel["feat"], rel["etypes"], torch.ones(29, 1))
    with pytest.raises(ValueError, match="divisible"):
        dglnn.TypedLinear(5, 4, 3, "bdd", 2)
    with pytest.raises(InputError, match="edges join nodes of other types"):
        dglnn.to_hetero_blocks(block, ntypes=case["srctypes"], canonical_etypes=case["canonical_etypes"][::-1])


def test_gradients_flow():
    rel = CASES["rgc-basis"]
    for ctor in ({}, {"regularizer": "basis", "num_bases": 2}, {"regularizer": "bdd", "num_bases": 5}):
        for order in ("nodes", "edges"):
            layer = dglnn.RelGraphConv(5, 5, 3, layer_norm=True, **ctor)
            layer._order = order
            x = rel["feat"].clone().requires_grad_()
            b = _block(rel["src"], rel["dst"], rel["num_src"], rel["num_dst"])
            layer(b, x, rel["etypes"], torch.rand(30, 1)).square().sum().backward()
            assert x.grad is not None and x.grad.abs().sum() > 0
            for name, p in layer.named_parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all(), (ctor, order, name)
    case = CASES["hetero-weightbasis"]
    block, _, book = _typed_block(case)
    layer = _hetero_layer(case).train()
    inputs = {t: v.clone().requires_grad_() for t, v in case["inputs"].items()}
    sum(v.sum() for v in layer(dglnn.to_hetero_blocks(block, book), inputs).values()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())
    assert all(v.grad is not None for v in inputs.values())


def _typed_batch(seed=0):
    """A 2-hop typed MiniBatch: 3 paper seeds; authors write papers, papers cite
    papers, papers are written by authors."""
    g = torch.Generator().manual_seed(seed)
    canon = [("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "written_by", "author")]
    rel = {(0, 0): 1, (1, 0): 0, (0, 1): 2}               # (src type, dst type) -> relation
    hops = [torch.zeros(3, dtype=torch.long), torch.tensor([0, 1, 1, 0, 1, 0]), torch.tensor([1, 0, 0, 1, 0, 1, 0])]
    n_type = torch.cat(hops)
    starts = [0, 3, 9, 16]
    src, dst, et, counts = [], [], [], []
    for h in (1, 2):
        for v in range(starts[h], starts[h + 1]):
            ok = [u for u in range(starts[h - 1], starts[h]) if (int(n_type[v]), int(n_type[u])) in rel]
            for k in torch.randperm(len(ok), generator=g)[:2].tolist():
                src.append(v), dst.append(ok[k]), et.append(rel[(int(n_type[v]), int(n_type[ok[k]]))])
        counts.append(len(src) - sum(counts))
    return MiniBatch(torch.arange(16) + 1000, torch.arange(len(src)) + 500, torch.tensor([src, dst]), 3, [3, 6, 7],
                     counts, n_type=n_type, e_type=torch.tensor(et)), canon


def test_minibatch_to_hetero_blocks():
    mb, canon = _typed_batch()
    blocks = dglnn.to_hetero_blocks(mb, ntypes=["paper", "author"], canonical_etypes=canon)
    assert len(blocks) == 2
    assert blocks[-1].num_dst_nodes("paper") == 3 and blocks[-1].num_dst_nodes("author") == 0
    for hb, b in zip(blocks, mb.to_blocks()):
        assert hb.num_edges() == b.edge_index.shape[1]
        for c in canon:
            rb = hb[c]
            ei = rb.edge_index
            rows = b.e_type == canon.index(c)
            assert torch.equal(hb.src_index[c[0]][ei[0]], b.edge_index[0, rows])      # back to block rows
            assert torch.equal(hb.dst_index[c[2]][ei[1]], b.edge_index[1, rows])
            assert torch.equal(rb.src_nodes, b.src_nodes[hb.src_index[c[0]]])
            assert torch.equal(hb.edata[EID][c], b.e_id[rows])
    x = torch.randn(16, 4)
    h = blocks[0].split_src(x)
    assert torch.equal(blocks[0].merge_dst({t: v[:blocks[0].num_dst_nodes(t)] for t, v in h.items()}), x[:9])
    conv = dglnn.HeteroGraphConv({r: dglnn.SAGEConv(4, 4, "mean") for _, r, _ in canon}, aggregate="mean")
    out = conv(blocks[1], conv(blocks[0], h))
    assert out["paper"].shape == (3, 4) and out["author"].shape == (0, 4)    # no author seeds: empty, as DGL
