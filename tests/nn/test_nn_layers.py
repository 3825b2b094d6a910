"""hpcgnn.nn on blocks: a hand-worked answer, the CSR path of a sampled batch's blocks
equal to the edge-list path, and bad input named by the layer."""
import pytest
import torch

import hpcgnn
import hpcgnn.nn as dglnn
from hpcgnn.errors import DGLError, InputError
from hpcgnn.sampling import Block, MiniBatch


def _batch():
    """Seeds 0, 1; hop 1 reached 2, 3, 4; hop 2 reached 5..8.  Hop 1's edges point
    into the seeds, hop 2's into the hop-1 nodes."""
    hop1 = [[2, 0], [3, 0], [4, 1], [1, 0]]
    hop2 = [[5, 2], [6, 2], [7, 3], [8, 4], [0, 4]]
    ei = torch.tensor(hop1 + hop2).T.contiguous()
    return MiniBatch(n_id=torch.arange(9), e_id=torch.arange(9), edge_index=ei, batch_size=2,
                     num_sampled_nodes=[2, 3, 4], num_sampled_edges=[4, 5])


def test_mean_by_hand():
    """Destination 0 has sources 2, 3, 1; destination 1 has source 4: with identity
    weights and no bias, SAGE-mean gives h_self + the mean of the neighbours."""
    block = _batch().to_blocks()[1]
    x = torch.arange(5.0).unsqueeze(1).repeat(1, 2)     # row i = (i, i)
    conv = dglnn.SAGEConv(2, 2, "mean", bias=False)
    with torch.no_grad():
        conv.fc_self.weight.copy_(torch.eye(2))
        conv.fc_neigh.weight.copy_(torch.eye(2))
    out = conv(block, x)
    assert torch.allclose(out, torch.tensor([[0 + 2.0, 0 + 2.0], [1 + 4.0, 1 + 4.0]]))


@pytest.mark.parametrize("make,width", [(lambda: dglnn.SAGEConv(3, 4, "mean"), 3),
                                        (lambda: dglnn.SAGEConv(6, 2, "gcn"), 6), (lambda: dglnn.GraphConv(3, 4), 3),
                                        (lambda: dglnn.GraphConv(6, 2, norm="right"), 6),
                                        (lambda: dglnn.GINConv(None, "sum"), 3),
                                        (lambda: dglnn.GATConv(3, 4, 2, allow_zero_in_degree=True), 3),
                                        (lambda: dglnn.GATConv(6, 3, 2, residual=True, allow_zero_in_degree=True,
                                                               negative_slope=0.1), 6)],
                         ids=["sage", "sage-gcn", "gcn", "gcn-right", "gin", "gat", "gat-residual"])
def test_the_csr_of_a_sampled_batch_gives_the_edge_list_answer(make, width):
    """Blocks from a batch carry its CSR (built by the compiled pass): the product path
    agrees with the scatter path, gradients included."""
    torch.manual_seed(0)
    conv = make()
    for block in _batch().to_blocks():
        assert block.adj is not None and block.adj.num_dst == len(block.dst_nodes)
        plain = Block(*block[:4])
        x = torch.randn(len(block.src_nodes), width, requires_grad=True)
        a = conv(block, x)
        b = conv(plain, x)
        torch.testing.assert_close(a, b)
        ga, = torch.autograd.grad(a.sum(), x)
        gb, = torch.autograd.grad(b.sum(), x)
        torch.testing.assert_close(ga, gb)


def test_bad_input_is_named_by_the_layer():
    outer, inner = _batch().to_blocks()
    conv = dglnn.SAGEConv(3, 4, "mean")
    with pytest.raises(InputError, match=r"SAGEConv: the block has 5 source nodes but the features have 9 rows"):
        conv(inner, torch.randn(9, 3))                   # the outer block's features
    with pytest.raises(InputError, match=r"SAGEConv: expects 3 input features, the source features have shape "
                                         r"\(9, 5\)"):
        conv(outer, torch.randn(9, 5))
    with pytest.raises(InputError, match="given a list of 2 blocks"):
        conv([outer, inner], torch.randn(9, 3))
    with pytest.raises(DGLError, match="aggregator_type must be"):
        dglnn.SAGEConv(3, 4, "sum")
    lone = Block(torch.arange(3), torch.arange(2), torch.tensor([[2], [0]]), torch.arange(1))
    with pytest.raises(hpcgnn.DGLError, match="GraphConv: the block has destination nodes without in-edges"):
        dglnn.GraphConv(3, 4)(lone, torch.randn(3, 3))


def test_dgl_names_are_attributes_of_the_package():
    import hpcgnn as dgl

    assert dgl.NID == dgl.EID == "_ID" and dgl.distributed.DistGraph and dgl.dataloading.NodeDataLoader
    assert dgl.nn.SAGEConv is dglnn.SAGEConv and issubclass(dgl.DGLError, InputError)
    import hpcgnn.nn.pytorch as pt

    assert pt.GraphConv is dglnn.GraphConv
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dgl.nope
