"""The models' CPU kernels (hpcgnn.train.kernels) against PyTorch/PyG references."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hpcgnn.errors import InputError

pytest.importorskip("hpcgnn._ext")
from hpcgnn import _ext  # noqa: E402
from hpcgnn.train.kernels import csr_mean, dropout, mean_adjacency  # noqa: E402
from hpcgnn.train.model import SAGE  # noqa: E402


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_rate_scale_and_gradient(p):
    torch.manual_seed(0)
    x = (torch.rand(1_000_003) + 1.0).requires_grad_(True)      # odd length: the kernel's tail
    y = dropout(x, p, training=True)
    kept = y != 0
    n = x.numel()
    sd = (p * (1 - p) / n) ** 0.5
    assert abs((1 - kept.float().mean().item()) - p) < 6 * sd
    q = round(p * 65536) / 65536              # the probability the 16-bit draws drop with
    assert torch.allclose(y[kept], x[kept] / (1 - q), rtol=1e-6, atol=0)
    assert abs(y.mean().item() / x.mean().item() - 1) < 6 * sd / (1 - p) + 1e-3     # unbiased
    g = torch.randn(n)
    y.backward(g)
    assert torch.allclose(x.grad, torch.where(kept, g / (1 - q), torch.zeros(())), rtol=1e-6, atol=0)
    # no pattern along the tensor: each quarter keeps its share too
    for q in kept.float().chunk(4):
        assert abs((1 - q.mean().item()) - p) < 12 * sd


def test_dropout_follows_torch_seed_and_eval():
    x = torch.ones(4096, 64)
    torch.manual_seed(7)
    a = dropout(x, 0.5)
    torch.manual_seed(7)
    b = dropout(x, 0.5)
    c = dropout(x, 0.5)
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert not dropout(x, 1.0).any()
    d = dropout(x.double(), 0.5)            # other dtypes: PyTorch's dropout
    assert d.dtype == torch.float64 and set(d.unique().tolist()) <= {0.0, 2.0}


def _bipartite(seed, num_src, num_dst, num_edges, sort):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    dst = torch.randint(0, num_dst - 3, (num_edges,), generator=g)       # the last 3 receive nothing
    if sort:
        o = torch.argsort(dst, stable=True)
        src, dst = src[o], dst[o]
    return torch.stack([src, dst])


@pytest.mark.parametrize("sort", [True, False])
def test_sage_layer_matches_pyg_edge_index(sort):
    """Aggregating along the CSR adjacency gives PyG's edge_index result and gradients."""
    from torch_geometric.nn import SAGEConv

    torch.manual_seed(1)
    ns, nd = 500, 120
    ei = _bipartite(3, ns, nd, 3000, sort)
    model = SAGE(16, 8, 5, 2, dropout=0.0)
    x = torch.randn(ns, 16, requires_grad=True)
    out = model.layer(0, x, ei, num_dst=nd)
    ref_conv = SAGEConv(16, 8)
    ref_conv.load_state_dict(model.convs[0].state_dict())
    x2 = x.detach().clone().requires_grad_(True)
    ref = F.relu(ref_conv((x2, x2[:nd]), ei))
    assert torch.allclose(out, ref, atol=1e-6)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-6)
    for a, b in zip(model.convs[0].parameters(), ref_conv.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)
    adj = mean_adjacency(ei, nd, ns)
    assert adj.layout == torch.sparse_csr and adj.shape == (nd, ns)
    assert torch.equal(adj.crow_indices()[-4:], torch.full((4,), ei.shape[1]))    # empty rows
    # features without gradient (a first layer) take the other branch: same result
    with torch.no_grad():
        assert torch.allclose(model.layer(0, x.detach(), ei, num_dst=nd), ref, atol=1e-6)
    # with_root: each neighbour row followed by its root row (a mean over itself), so
    # the product viewed as (nd, 2F) is [mean | root] row by row
    both = mean_adjacency(ei, nd, ns, with_root=True)
    assert both.shape == (2 * nd, ns) and both._nnz() == ei.shape[1] + nd
    xs = torch.randn(ns, 3)
    y = torch.sparse.mm(both, xs, "mean").view(nd, 6)
    assert torch.equal(y[:, 3:], xs[:nd]) and torch.allclose(y[:, :3], torch.sparse.mm(adj, xs, "mean"))
    # the compiled mean (inputs without gradient) equals PyTorch's, one thread or two
    for threads in (1, 2):
        out = torch.empty(2 * nd, 3)
        _ext.csr_mean(both.crow_indices().numpy(), both.col_indices().numpy(), xs.numpy(), out.numpy(), threads)
        assert torch.allclose(out.view(nd, 6), y, atol=1e-6)
    assert torch.allclose(csr_mean(adj, xs), torch.sparse.mm(adj, xs, "mean"), atol=1e-6)
    bad = both.col_indices().clone()
    bad[5] = ns
    with pytest.raises(ValueError, match="outside"):
        _ext.csr_mean(both.crow_indices().numpy(), bad.numpy(), xs.numpy(), out.numpy(), 1)
    with pytest.raises(InputError, match="num_dst <= num_src"):
        mean_adjacency(ei[:, :0], 5, 4, with_root=True)


@pytest.mark.parametrize("with_root", [False, True])
def test_mean_adjacency_without_the_compiled_pass(with_root):
    """The path a GPU takes (PyTorch's operations; here int32 edges take it on the CPU)
    builds the compiled pass's CSR, and csr_mean's PyG fallback gives the same mean."""
    g = torch.Generator().manual_seed(3)
    nd, ns = 7, 12
    ei = torch.stack([torch.randint(0, ns, (40,), generator=g), torch.randint(0, nd, (40,), generator=g)])
    ei = ei[:, torch.argsort(ei[1], stable=True)]
    want = mean_adjacency(ei, nd, ns, with_root=with_root)
    got = mean_adjacency(ei.to(torch.int32), nd, ns, with_root=with_root)
    assert torch.equal(got.crow_indices(), want.crow_indices()) and torch.equal(got.col_indices(), want.col_indices())
    x = torch.randn(ns, 5, generator=g, dtype=torch.float64)          # float64: not the compiled mean
    got64 = mean_adjacency(ei.to(torch.int32), nd, ns, torch.float64, with_root=with_root)
    assert torch.allclose(csr_mean(got64, x), csr_mean(want, x.float()).double(), atol=1e-5)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        adj = mean_adjacency(ei.to(dev), nd, ns, with_root=with_root)
        assert adj.layout == torch.sparse_csr and adj.device.type == dev
        assert torch.allclose(csr_mean(adj, x.float().to(dev)).cpu(), csr_mean(want, x.float()), atol=1e-5)
    empty = mean_adjacency(torch.zeros(2, 0, dtype=torch.int32), 4, 4)
    assert empty._nnz() == 0 and empty.shape == (4, 4)
    # a GPU's mean: PyG's sum over the degree (what spmm does off the CPU)
    deg = (want.crow_indices()[1:] - want.crow_indices()[:-1]).clamp(min=1).unsqueeze(1)
    assert torch.allclose(torch.sparse.mm(got, x.float()) / deg, csr_mean(want, x.float()), atol=1e-5)
    # edges in any order, and ids out of range, on that path too
    shuffled = ei[:, torch.randperm(ei.shape[1], generator=g)].to(torch.int32)
    again = mean_adjacency(shuffled, nd, ns, with_root=with_root)
    assert torch.equal(again.crow_indices(), want.crow_indices())
    assert torch.allclose(csr_mean(again, x.float()), csr_mean(want, x.float()), atol=1e-5)
    bad = ei.to(torch.int32).clone()
    bad[0, 3] = ns
    with pytest.raises(InputError, match="outside"):
        mean_adjacency(bad, nd, ns, with_root=with_root)


def test_relu_dropout_is_relu_then_the_same_dropout():
    from hpcgnn.train.kernels import relu_dropout

    x = torch.randn(3001, 7)
    torch.manual_seed(4)
    ref = dropout(F.relu(x), 0.4)
    torch.manual_seed(4)
    xa = x.clone().requires_grad_(True)
    got = relu_dropout(xa, 0.4)
    assert torch.equal(got, ref)                      # same draws, same numbers
    g = torch.randn_like(got)
    got.backward(g)
    want = torch.where(ref > 0, g / (1 - round(0.4 * 65536) / 65536), torch.zeros(()))
    assert torch.allclose(xa.grad, want, rtol=1e-6, atol=0)
    assert torch.equal(relu_dropout(x, 0.4, training=False), F.relu(x))
    t = x.t()                                         # non-contiguous input
    torch.manual_seed(5)
    a = relu_dropout(t, 0.5)
    torch.manual_seed(5)
    assert torch.equal(a, dropout(F.relu(t.contiguous()), 0.5))


def test_mean_adjacency_rejects_ids_out_of_range_and_follows_dtype():
    with pytest.raises(InputError, match="outside"):
        mean_adjacency(torch.tensor([[0, 100000], [0, 1]]), 2, 3)
    with pytest.raises(InputError, match="outside"):
        mean_adjacency(torch.tensor([[0, 1], [0, 5]]), 3, 3)
    for bad in ([[0, 1], [-1, 0]], [[-1, 1], [0, 0]]):              # negative ids, either side
        with pytest.raises(InputError, match="outside"):
            mean_adjacency(torch.tensor(bad), 3, 3, with_root=True)
    ei = torch.tensor([[0, 1, 2], [0, 0, 1]])
    adj = mean_adjacency(ei, 2, 3, torch.float64)
    assert adj.dtype == torch.float64
    model = SAGE(4, 3, 2, 1, dropout=0.0).double()
    assert model.layer(0, torch.randn(3, 4, dtype=torch.float64), ei, num_dst=2).shape == (2, 2)


def test_dropout_backward_refuses_double_backward():
    x = torch.rand(100, requires_grad=True)
    y = dropout(x, 0.5)
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


def test_csr_mean_kernel_on_many_rows_and_threads():
    """Enough rows for the OpenMP split (>= 1024), rows without entries, and the
    result equal to PyTorch's mean for 1 to 3 threads."""
    torch.manual_seed(3)
    ns, nd = 4000, 3000
    ei = _bipartite(5, ns, nd, 40000, True)
    adj = mean_adjacency(ei, nd, ns)
    x = torch.randn(ns, 33)
    ref = torch.sparse.mm(adj, x, "mean")
    assert int((adj.crow_indices()[1:] == adj.crow_indices()[:-1]).sum()) > 0     # some empty rows
    for threads in (1, 2, 3):
        out = torch.full((nd, 33), float("nan"))
        _ext.csr_mean(adj.crow_indices().numpy(), adj.col_indices().numpy(), x.numpy(), out.numpy(), threads)
        assert torch.allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("dim", [1, 16, 33, 64, 100, 256, 257])
def test_csr_mean_in_registers_gives_the_same_numbers(dim):
    """Output rows summed in AVX-512 registers (rows of up to 256 floats, masked
    tails) and in memory: bitwise the same, over a tensor and over row addresses
    (on a CPU without AVX-512 both runs take the memory path)."""
    torch.manual_seed(dim)
    ns, nd = 700, 500
    ei = _bipartite(6, ns, nd, 6000, True)
    adj = mean_adjacency(ei, nd, ns)
    ip, ix = adj.crow_indices().numpy(), adj.col_indices().numpy()
    x = torch.randn(ns, dim)
    addr = x.numpy().ctypes.data + np.arange(ns, dtype=np.uintp) * np.uintp(4 * dim)
    outs = []
    try:
        for on in (True, False):
            _ext.csr_mean_use_registers(on)
            for kernel, src in ((_ext.csr_mean, x.numpy()), (_ext.csr_mean_rows, addr)):
                out = torch.full((nd, dim), float("nan"))
                kernel(ip, ix, src, out.numpy(), 1)
                outs.append(out)
    finally:
        _ext.csr_mean_use_registers(True)
    assert all(torch.equal(o, outs[0]) for o in outs[1:])
    assert torch.allclose(outs[0], torch.sparse.mm(adj, x, "mean"), atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_csr_mean_gradient_matches_pytorch(threads):
    """csr_mean's backward (scatter by column blocks when threaded) gives PyTorch's
    gradient, with repeated sources, empty rows and a width that is no multiple of
    the column block."""
    torch.manual_seed(4)
    ns, nd, f = 3000, 2000, 200
    adj = mean_adjacency(_bipartite(6, ns, nd, 30000, True), nd, ns)
    x = torch.randn(ns, f, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    w = torch.randn(nd, f)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        (csr_mean(adj, x) * w).sum().backward()
    finally:
        torch.set_num_threads(old)
    (torch.sparse.mm(adj, x2, "mean") * w).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-5)


@pytest.mark.parametrize("dim", [13, 64])
def test_bias_relu_dropout_matches_the_unfused_ops(dim):
    """The fused in-place bias+relu+dropout draws the mask relu_dropout draws (same
    seed; widths that straddle the 4-element draws too) and gives the same gradients
    for the input and the bias."""
    from hpcgnn.train.kernels import bias_relu_dropout, relu_dropout

    torch.manual_seed(5)
    a = torch.randn(301, dim, requires_grad=True)
    bias = torch.randn(dim, requires_grad=True)
    a2, bias2 = a.detach().clone().requires_grad_(True), bias.detach().clone().requires_grad_(True)
    w = torch.randn(301, dim)
    torch.manual_seed(7)
    out = bias_relu_dropout(a * 1.0, bias, p=0.4)          # a product's fresh output
    torch.manual_seed(7)
    ref = relu_dropout(a2 * 1.0 + bias2, p=0.4)
    assert torch.equal(out, ref)
    assert 0.3 < float((ref == 0).float().mean()) < 0.9
    (out * w).sum().backward()
    (ref * w).sum().backward()
    assert torch.allclose(a.grad, a2.grad) and torch.allclose(bias.grad, bias2.grad, atol=1e-4)
    with torch.no_grad():                                   # evaluation: relu(h + bias)
        assert torch.equal(bias_relu_dropout(a * 1.0, bias, p=0.4, training=False), F.relu(a + bias))
    torch.manual_seed(7)                                    # a leaf is not written over: same numbers
    leaf = (a2 * 1.0).detach().requires_grad_(True)
    assert torch.equal(bias_relu_dropout(leaf, bias, p=0.4), ref) and torch.equal(leaf, a2 * 1.0)
    torch.manual_seed(7)                                    # nor a view of one
    view = leaf[:150]
    assert torch.equal(bias_relu_dropout(view, bias, p=0.4), ref[:150]) and torch.equal(leaf, a2 * 1.0)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dim", [13, 200])
def test_bias_relu_dropout_mean_equals_the_two_functions(threads, dim):
    """The fused activation + mean gives bitwise the numbers of bias_relu_dropout
    then csr_mean: output, and the gradients of the product and the bias (the bias
    summed in the same 128-row float blocks, for any thread count), with sources
    no edge reads (zero gradient) and repeated ones."""
    from hpcgnn.train.kernels import bias_relu_dropout, bias_relu_dropout_mean

    torch.manual_seed(8)
    ns, nd = 1500, 700
    adj = mean_adjacency(_bipartite(9, ns, nd, 5000, True), nd, ns, with_root=True)
    a = torch.randn(ns, dim, requires_grad=True)
    bias = torch.randn(dim, requires_grad=True)
    a2, bias2 = a.detach().clone().requires_grad_(True), bias.detach().clone().requires_grad_(True)
    w = torch.randn(2 * nd, dim)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(7)
        out = bias_relu_dropout_mean(a * 1.0, bias, adj, p=0.3)
        (out * w).sum().backward()
    finally:
        torch.set_num_threads(old)
    torch.manual_seed(7)
    ref = csr_mean(adj, bias_relu_dropout(a2 * 1.0, bias2, p=0.3))
    (ref * w).sum().backward()
    assert torch.equal(out, ref)
    assert torch.equal(a.grad, a2.grad) and torch.equal(bias.grad, bias2.grad)
    unread = torch.ones(ns, dtype=torch.bool)
    unread[adj.col_indices()] = False
    assert int(unread.sum()) > 0 and float(a.grad[unread].abs().sum()) == 0.0
    with torch.no_grad():                                       # evaluation: the two functions
        assert torch.equal(bias_relu_dropout_mean(a * 1.0, bias, adj, p=0.3, training=False),
                           csr_mean(adj, F.relu(a + bias)))


def test_bias_relu_dropout_mean_marks_the_product_written_over():
    """The activation is written over the product: autograd knows (a backward that
    needs the product's old values fails loudly instead of using the new ones)."""
    from hpcgnn.train.kernels import bias_relu_dropout_mean

    a, w, b = torch.randn(50, 8), torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    ei = torch.stack([torch.randint(0, 50, (100,)), torch.sort(torch.randint(0, 20, (100,)))[0]])
    adj = mean_adjacency(ei, 20, 50, with_root=True)
    bias_relu_dropout_mean(a @ w, b, adj).sum().backward()        # alone: fine
    assert w.grad is not None and b.grad is not None
    h = a @ w
    other = (h * h).sum()                                         # saves h for its backward
    out = bias_relu_dropout_mean(h, b, adj)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (out.sum() + other).backward()


def test_csr_mean_backward_refuses_mismatched_activation():
    adj = mean_adjacency(_bipartite(2, 50, 20, 100, True), 20, 50)
    ip, ix = adj.crow_indices().numpy(), adj.col_indices().numpy()
    g, gx = np.zeros((20, 8), np.float32), np.zeros((50, 8), np.float32)
    with pytest.raises(ValueError, match="act is"):
        _ext.csr_mean_backward(ip, ix, g, gx, 1, act=np.zeros((49, 8), np.float32))
    with pytest.raises(ValueError, match="bias_grad needs act"):
        _ext.csr_mean_backward(ip, ix, g, gx, 1, bias_grad=np.zeros(8))
    with pytest.raises(ValueError, match="bias_grad needs act"):
        _ext.csr_mean_backward(ip, ix, g, gx, 1, act=np.zeros((50, 8), np.float32), bias_grad=np.zeros(7))


@pytest.mark.parametrize("full", [False, True])
def test_sage_training_step_defers_the_activation_with_the_same_numbers(full):
    """SAGE.forward hands each hidden layer's bias, relu and dropout to the next
    layer's aggregation; the output and every gradient equal those of calling
    ``layer`` one by one (which applies them at once), on sampled blocks (3 layers:
    a middle layer both receives and defers) and on a full graph."""
    g = torch.Generator().manual_seed(11)
    ncum = [0, 10, 50, 200, 400]                 # seeds, then the nodes first reached at hops 1, 2, 3

    def hop(k, n):                               # edges into hop k-1's nodes from hops <= k
        dst = torch.sort(torch.randint(ncum[k - 1], ncum[k], (n,), generator=g))[0]
        return torch.stack([torch.randint(0, ncum[k + 1], (n,), generator=g), dst])

    edges = [hop(1, 60), hop(2, 300), hop(3, 1200)]
    ei = torch.cat(edges, 1)
    ecum = [0, 60, 360, 1560]
    x = torch.randn(400, 12, generator=g)
    m = SAGE(12, 32, 5, 3, dropout=0.4)
    m2 = SAGE(12, 32, 5, 3, dropout=0.4)
    m2.load_state_dict(m.state_dict())
    torch.manual_seed(3)
    out = m(x, ei) if full else m(x, ei, [10, 40, 150, 200], [60, 300, 1200])
    out.square().sum().backward()
    torch.manual_seed(3)
    h = x
    for i in range(3):
        h = m2.layer(i, h, ei) if full else m2.layer(i, h, ei[:, : ecum[3 - i]], num_dst=ncum[3 - i])
    h.square().sum().backward()
    assert out.shape == ((400, 5) if full else (10, 5))
    assert torch.equal(out, h)
    for p1, p2 in zip(m.parameters(), m2.parameters()):
        assert torch.equal(p1.grad, p2.grad)


@pytest.mark.parametrize("with_root", [False, True])
def test_mean_adjacency_compiled_csr_equals_the_reference(with_root):
    """The compiled one-pass CSR (edges sorted by destination) equals one built from
    the edge list by PyTorch; unsorted edges take the sorting path and give the same
    matrix; an empty edge list gives empty rows (each root row its own entry)."""
    ei = _bipartite(12, 900, 400, 6000, True)
    ref = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), torch.ones(ei.shape[1]), (400, 900),
                                  check_invariants=True).coalesce()
    adj = mean_adjacency(ei, 400, 900, with_root=with_root)
    dense = adj.to_dense()
    assert dense.shape == ((800 if with_root else 400), 900)
    if with_root:
        assert torch.equal(dense[1::2, :400], torch.eye(400)) and not dense[1::2, 400:].any()
        dense = dense[0::2]
    assert torch.equal(dense, ref.to_dense())
    perm = torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(1))
    unsorted = mean_adjacency(ei[:, perm], 400, 900, with_root=with_root)
    assert torch.equal(unsorted.to_dense(), adj.to_dense())
    x = torch.randn(900, 7)
    assert torch.allclose(csr_mean(unsorted, x), csr_mean(adj, x), atol=1e-6)
    empty = mean_adjacency(torch.zeros(2, 0, dtype=torch.int64), 5, 9, with_root=with_root)
    if with_root:
        assert empty.crow_indices().tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]
        assert empty.col_indices().tolist() == [0, 1, 2, 3, 4]
    else:
        assert empty.crow_indices().tolist() == [0] * 6 and empty.col_indices().numel() == 0
