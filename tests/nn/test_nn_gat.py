"""hpcgnn.nn.gatconv: GATConv / GATv2Conv on hand-built blocks (CPU, single process)."""
import math

import pytest
import torch

from hpcgnn.errors import DGLError, InputError
from hpcgnn.nn.gatconv import GATConv, GATv2Conv
from hpcgnn.sampling import Block


def block(num_src, num_dst, src, dst):
    ei = torch.tensor([src, dst], dtype=torch.long)
    return Block(torch.arange(num_src), torch.arange(num_dst), ei, torch.arange(ei.shape[1]), None)


def leaky(x, slope=0.2):
    return x if x > 0 else slope * x


def softmax(xs):
    ex = [math.exp(x) for x in xs]
    return [v / sum(ex) for v in ex]


# 5 sources, 3 destinations, every destination has in-edges (7 edges).
SRC, DST = [0, 1, 2, 3, 4, 1, 2], [0, 0, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
def test_shapes(cls, heads, residual):
    torch.manual_seed(0)
    b = block(5, 3, SRC, DST)
    for in_feats, out in ((6, 3), (6, 6 // heads)):   # res_fc a Linear, and (where widths match) the identity
        conv = cls(in_feats, out, heads, residual=residual)
        rst, att = conv(b, torch.randn(5, in_feats), get_attention=True)
        assert rst.shape == (3, heads, out) and att.shape == (7, heads, 1)
    conv = cls((6, 4), 3, heads, residual=residual)
    rst = conv(b, (torch.randn(5, 6), torch.randn(3, 4)))
    assert rst.shape == (3, heads, 3)
    if cls is GATConv:   # extra feature dims [N, *, D]
        rst, att = GATConv(6, 3, heads, residual=residual)(b, torch.randn(5, 2, 6), get_attention=True)
        assert rst.shape == (3, 2, heads, 3) and att.shape == (7, 2, heads, 1)


def test_gat_by_hand():
    # dst 0 <- src 1, src 2; dst 1 <- src 1 (its only edge: attention 1)
    b = block(3, 2, [1, 2, 1], [0, 0, 1])
    x = torch.tensor([[1., 2.], [3., -1.], [0., 4.]])
    conv = GATConv(2, 1, num_heads=2)
    with torch.no_grad():
        conv.fc.weight.copy_(torch.eye(2))                     # head h sees feature h
        conv.attn_l.copy_(torch.tensor([[[1.], [2.]]]))
        conv.attn_r.copy_(torch.tensor([[[0.5], [-1.]]]))
        conv.bias.copy_(torch.tensor([0.25, -0.5]))
    rst, att = conv(b, x, get_attention=True)
    # head 0: Wh = [1, 3, 0]; e = leaky(1*Wh_j + 0.5*Wh_dst)
    a0 = softmax([leaky(3 + 0.5 * 1), leaky(0 + 0.5 * 1)])
    # head 1: Wh = [2, -1, 4]; e = leaky(2*Wh_j - 1*Wh_dst)
    a1 = softmax([leaky(2 * -1 - 2), leaky(2 * 4 - 2)])
    want_att = torch.tensor([[a0[0], a1[0]], [a0[1], a1[1]], [1., 1.]]).unsqueeze(-1)
    assert torch.allclose(att, want_att, atol=1e-6)
    want = torch.tensor([[3 * a0[0] + 0 * a0[1] + 0.25, -1 * a1[0] + 4 * a1[1] - 0.5],
                         [3 + 0.25, -1 - 0.5]]).unsqueeze(-1)
    assert torch.allclose(rst, want, atol=1e-6)
    # edge weights scale the attention (and the returned attention) per edge
    w = torch.tensor([2., 0.5, 1.])
    rst_w, att_w = conv(b, x, edge_weight=w, get_attention=True)
    assert torch.allclose(att_w, want_att * w.view(-1, 1, 1), atol=1e-6)
    assert torch.allclose(rst_w[0, 0, 0], torch.tensor(3 * a0[0] * 2 + 0.25), atol=1e-6)


def test_gatv2_by_hand():
    b = block(3, 2, [1, 2, 1], [0, 0, 1])
    x = torch.tensor([[1., 2.], [3., -1.], [0., 4.]])
    conv = GATv2Conv(2, 1, num_heads=2, negative_slope=0.1)
    with torch.no_grad():
        conv.fc_src.weight.copy_(torch.eye(2))
        conv.fc_dst.weight.copy_(2 * torch.eye(2))
        conv.fc_src.bias.zero_()
        conv.fc_dst.bias.zero_()
        conv.attn.copy_(torch.tensor([[[1.], [-1.]]]))
    rst, att = conv(b, x, get_attention=True)
    lk = lambda v: leaky(v, 0.1)  # noqa: E731
    a0 = softmax([lk(3 + 2 * 1), lk(0 + 2 * 1)])             # head 0: src [1, 3, 0], dst 2*[1]
    a1 = softmax([-lk(-1 + 2 * 2), -lk(4 + 2 * 2)])          # head 1: src [2, -1, 4], dst 2*[2]
    assert torch.allclose(att[:2, :, 0], torch.tensor([a0, a1]).T, atol=1e-6)
    want = torch.tensor([[3 * a0[0], -1 * a1[0] + 4 * a1[1]], [3., -1.]]).unsqueeze(-1)
    assert torch.allclose(rst, want, atol=1e-6)


@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
@pytest.mark.parametrize("heads", [1, 3])
def test_attention_sums_to_one(cls, heads):
    torch.manual_seed(1)
    b = block(5, 3, SRC, DST)
    _, att = cls(4, 2, heads)(b, torch.randn(5, 4), get_attention=True)
    total = torch.zeros(3, heads, 1).index_add(0, b.edge_index[1], att)
    assert torch.allclose(total, torch.ones_like(total), atol=1e-6)
    assert (att > 0).all()


def test_edges_equal_to_sources():
    # E == num_src: per-edge messages must still be summed per edge
    b = block(3, 2, [1, 2, 0], [0, 0, 1])
    conv = GATConv(2, 2, 1)
    x = torch.randn(3, 2)
    rst, att = conv(b, x, get_attention=True)
    proj = conv.fc(x)
    assert torch.allclose(rst[0, 0], att[0, 0] * proj[1] + att[1, 0] * proj[2] + conv.bias, atol=1e-6)
    assert torch.allclose(rst[1, 0], proj[0] + conv.bias, atol=1e-6)


@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
def test_zero_in_degree(cls):
    b = block(4, 3, [1, 2, 3], [0, 0, 1])      # dst 2 has no in-edges
    x = torch.randn(4, 5)
    with pytest.raises(DGLError, match=cls.__name__):
        cls(5, 2, 2)(b, x)
    conv = cls(5, 2, 2, allow_zero_in_degree=True)
    rst = conv(b, x)
    assert torch.isfinite(rst).all() and torch.equal(rst[2], torch.zeros(2, 2))
    conv.set_allow_zero_in_degree(False)
    with pytest.raises(DGLError):
        conv(b, x)


@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
def test_wrong_width(cls):
    b = block(5, 3, SRC, DST)
    with pytest.raises(InputError, match=rf"{cls.__name__}.*\(5, 3\)"):
        cls(4, 2, 2)(b, torch.randn(5, 3))
    with pytest.raises(InputError, match=rf"{cls.__name__}.*\(3, 7\)"):
        cls((4, 6), 2, 2)(b, (torch.randn(5, 4), torch.randn(3, 7)))
    with pytest.raises(InputError, match=cls.__name__):
        cls(4, 2, 2)(b, torch.randn(6, 4))      # rows of another block


def shapes(module):
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def test_state_dict_gat():
    # as read off DGL 2.x python/dgl/nn/pytorch/conv/gatconv.py (in 5, out 3, 2 heads)
    assert shapes(GATConv(5, 3, 2)) == {"fc.weight": (6, 5), "attn_l": (1, 2, 3), "attn_r": (1, 2, 3),
                                        "bias": (6,)}
    assert shapes(GATConv(5, 3, 2, residual=True)) == {"fc.weight": (6, 5), "attn_l": (1, 2, 3),
                                                       "attn_r": (1, 2, 3), "res_fc.weight": (6, 5),
                                                       "res_fc.bias": (6,)}
    assert shapes(GATConv(6, 3, 2, residual=True)) == {"fc.weight": (6, 6), "attn_l": (1, 2, 3),
                                                       "attn_r": (1, 2, 3), "bias": (6,)}
    assert shapes(GATConv(5, 3, 2, residual=True, bias=False)) == {"fc.weight": (6, 5), "attn_l": (1, 2, 3),
                                                                   "attn_r": (1, 2, 3), "res_fc.weight": (6, 5)}
    assert shapes(GATConv((5, 4), 3, 2)) == {"fc_src.weight": (6, 5), "fc_dst.weight": (6, 4),
                                             "attn_l": (1, 2, 3), "attn_r": (1, 2, 3), "bias": (6,)}
    assert shapes(GATConv(5, 3, 2, bias=False)) == {"fc.weight": (6, 5), "attn_l": (1, 2, 3), "attn_r": (1, 2, 3)}


def test_state_dict_gatv2():
    # as read off DGL 2.x python/dgl/nn/pytorch/conv/gatv2conv.py (in 5, out 3, 2 heads)
    base = {"fc_src.weight": (6, 5), "fc_src.bias": (6,), "fc_dst.weight": (6, 5), "fc_dst.bias": (6,),
            "attn": (1, 2, 3)}
    assert shapes(GATv2Conv(5, 3, 2)) == base
    assert shapes(GATv2Conv(5, 3, 2, residual=True)) == {**base, "res_fc.weight": (6, 5), "res_fc.bias": (6,)}
    assert shapes(GATv2Conv(6, 3, 2, residual=True)) == {k: (6, 6) if k.endswith("weight") else v
                                                         for k, v in base.items()}
    assert shapes(GATv2Conv(5, 3, 2, share_weights=True)) == base      # fc_dst is fc_src, saved under both
    assert shapes(GATv2Conv(5, 3, 2, bias=False)) == {"fc_src.weight": (6, 5), "fc_dst.weight": (6, 5),
                                                      "attn": (1, 2, 3)}
    assert shapes(GATv2Conv((5, 4), 3, 2)) == {**base, "fc_dst.weight": (6, 4)}


@pytest.mark.parametrize("cls, kw", [(GATConv, {}), (GATConv, {"residual": True}),
                                     (GATv2Conv, {"residual": True}), (GATv2Conv, {"share_weights": True})])
def test_load_state_dict_strict(cls, kw):
    torch.manual_seed(2)
    a, b2 = cls(5, 3, 2, **kw), cls(5, 3, 2, **kw)
    b2.load_state_dict(a.state_dict(), strict=True)
    b = block(5, 3, SRC, DST)
    x = torch.randn(5, 5)
    assert torch.equal(a(b, x), b2(b, x))


@pytest.mark.parametrize("cls, kw", [(GATConv, {"residual": True}), (GATConv, {"residual": True, "in": (5, 4)}),
                                     (GATv2Conv, {"residual": True}), (GATv2Conv, {"in": (5, 4)})])
def test_gradients(cls, kw):
    torch.manual_seed(3)
    in_feats = kw.pop("in", 5)
    conv = cls(in_feats, 3, 2, feat_drop=0.1, attn_drop=0.1, activation=torch.relu, **kw)
    b = block(5, 3, SRC, DST)
    feat = (torch.randn(5, 5), torch.randn(3, 4)) if isinstance(in_feats, tuple) else torch.randn(5, 5)
    conv(b, feat).square().sum().backward()
    for name, p in conv.named_parameters():
        assert p.grad is not None, name
