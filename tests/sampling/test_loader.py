"""Data loaders on a standalone DistGraph (and, through mpirun, with sampler ranks):
plans, determinism, identical batches from every production path, edge batches
with negatives and exclusion, resume positions, bad input."""
import os
import re
import sys

import numpy as np
import pytest
import torch

from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.sampling import DistEdgeDataLoader, DistNodeDataLoader, NeighborSampler, negative_sampler
from hpcgnn.sampling.plan import EpochPlan

from harness import Oracle, make_graph

pytest.importorskip("hpcgnn._ext")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("loader"))
    raw, cfg = make_graph(tmp, 2, None)
    g = DistGraph("g", part_config=cfg)
    yield g, Oracle(raw, cfg), cfg
    g._ctx.finalize()


def test_plan_covers_every_id_once_and_pads_by_wrapping():
    ids = np.arange(100, 110)
    p = EpochPlan(ids, 4, True, False, seed=3, rank=0, steps=4)
    batches = [p.seeds(0, s) for s in range(4)]
    assert [len(b) for b in batches] == [4, 4, 2, 4]
    assert sorted(np.concatenate(batches[:3]).tolist()) == list(range(100, 110))
    assert len(set(batches[3].tolist())) == 4                      # padding: unique, from the ids
    assert not np.array_equal(p.order(0), p.order(1))              # reshuffled per epoch
    assert np.array_equal(p.seeds(1, 2), p.seeds(1, 2))            # a pure function
    assert [p.is_padding(k) for k in range(4)] == [False, False, False, True]     # evaluations skip it
    small = EpochPlan(np.arange(3), 8, False, True, 0, 0, steps=2)  # fewer ids than a batch
    assert sorted(small.seeds(0, 1).tolist()) == [0, 1, 2]


def test_buffer_ring_reuses_only_buffers_nobody_holds():
    from hpcgnn.sampling.buffers import BufferRing

    r = BufferRing(keep=2)
    a = r.take(10, (3,), np.float32)
    assert a.shape == (10, 3) and a.dtype == np.float32 and a.flags.c_contiguous
    a[:] = 1
    b = r.take(8, (3,), np.float32)                  # a is held: another buffer
    assert not np.shares_memory(a, b) and len(r) == 2
    c = r.take(5, (3,), np.float32)                  # both held, ring full: fresh memory
    assert not np.shares_memory(c, a) and not np.shares_memory(c, b) and len(r) == 2
    first = a.ctypes.data
    t = torch.from_numpy(a)                          # a tensor made from a view keeps it held
    del a
    d = r.take(10, (3,), np.float32)
    assert not np.shares_memory(d, t.numpy())
    assert (t == 1).all()
    del t
    e = r.take(9, (3,), np.float32)                  # released: reused
    assert e.ctypes.data == first
    del b, c, d, e
    f = r.take(100, (3,), np.float32)                # too small everywhere: replaced, grown
    assert f.shape == (100, 3) and len(r) == 2
    g = r.take(4, (2,), np.int64)                    # another row shape and dtype
    assert g.shape == (4, 2) and g.dtype == np.int64


def test_node_loader_batches_are_the_same_on_every_path(graph):
    g, o, _ = graph
    nids = np.arange(0, o.n, 3)
    runs = {}
    for mode in ("inline", "thread"):
        L = DistNodeDataLoader(g, nids, NeighborSampler([4, 2]), batch_size=100, shuffle=True, seed=11, mode=mode)
        runs[mode] = [b for _ in range(2) for b in L]
        assert len(runs[mode]) == 2 * len(L) == 2 * -(-len(nids) // 100)
    for a, b in zip(runs["inline"], runs["thread"]):
        for k in ("n_id", "e_id", "edge_index", "x", "y"):
            assert torch.equal(getattr(a, k), getattr(b, k)), k
    first = runs["inline"][: len(runs["inline"]) // 2]
    seeds = np.concatenate([b.seeds.numpy() for b in first])
    assert sorted(seeds.tolist()) == nids.tolist()                  # an epoch covers every id once
    for b in first:                                                 # features and labels are the graph's
        assert np.array_equal(b.x.numpy(), o.feat[b.n_id.numpy()])
        assert np.array_equal(b.y.numpy(), o.label[b.n_id.numpy()])
        o.check_edges(b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]], b.e_id)
    second = runs["inline"][len(first):]
    assert not all(torch.equal(a.seeds, b.seeds) for a, b in zip(first, second))
    L = DistNodeDataLoader(g, nids, NeighborSampler([4, 2]), batch_size=100, shuffle=True, seed=11, mode="thread",
                           labels="seeds")                         # the seeds' labels only, same batches
    for a, b in zip(first, L):
        assert torch.equal(a.x, b.x) and len(b.y) == b.batch_size < len(b.n_id)
        assert np.array_equal(b.y.numpy(), o.label[b.seeds.numpy()])


def test_loader_resumes_at_the_step_it_stopped(graph):
    g, o, _ = graph
    make = lambda: DistNodeDataLoader(g, np.arange(500), NeighborSampler([3]), batch_size=50, shuffle=True,  # noqa
                                      seed=5, mode="thread")
    L = make()
    full = [b for b in L]
    L2 = make()
    it = iter(L2)
    for _ in range(4):
        next(it)
    state = L2.state_dict()
    it.close()                                                      # early exit drains the thread
    assert state["epoch"] == 0 and state["step"] == 4
    L3 = make()
    L3.load_state_dict(state)
    rest = list(L3)
    assert len(rest) == len(full) - 4
    assert all(torch.equal(a.n_id, b.n_id) for a, b in zip(full[4:], rest))
    assert L3.state_dict()["epoch"] == 1 and L3.state_dict()["step"] == 0


def test_loader_state_after_a_break_is_where_the_next_loop_starts(graph):
    """A ``for`` left with ``break``: the next ``for`` starts the next epoch, and a
    checkpoint taken between the two resumes there too (the same next batch)."""
    g, _, _ = graph
    make = lambda: DistNodeDataLoader(g, np.arange(300), NeighborSampler([3]), batch_size=50, shuffle=True,  # noqa
                                      seed=7, mode="thread")
    L = make()
    for step, _ in enumerate(L):
        if step == 2:
            break
    state = L.state_dict()
    assert (state["epoch"], state["step"]) == (1, 0)
    live = next(iter(L))
    L2 = make()
    L2.load_state_dict(state)
    assert torch.equal(next(iter(L2)).n_id, live.n_id)


def test_loader_state_after_an_epochs_last_batch_and_finish_epoch(graph):
    """A checkpoint taken at an epoch's last batch, or after the caller ended the
    epoch early (finish_epoch: ``epoch_steps``), resumes at the next epoch's start."""
    g, _, _ = graph
    L = DistNodeDataLoader(g, np.arange(200), NeighborSampler([3]), batch_size=50, seed=5, mode="inline")
    it = iter(L)
    for _ in range(len(L)):
        next(it)
    assert L.state_dict()["epoch"] == 1 and L.state_dict()["step"] == 0
    it.close()
    it = iter(L)                      # epoch 1
    next(it)
    assert L.state_dict()["epoch"] == 1 and L.state_dict()["step"] == 1
    L.finish_epoch()
    it.close()
    assert L.state_dict()["epoch"] == 2 and L.state_dict()["step"] == 0
    L.finish_epoch()                  # nothing iterated since: stays
    assert L.state_dict()["epoch"] == 2 and L.state_dict()["step"] == 0
    assert sum(1 for _ in L) == len(L) and L.state_dict()["epoch"] == 3


def test_edge_loader_negatives_and_exclusion(graph):
    g, o, _ = graph
    eids = np.arange(0, len(o.src), 5)
    L = DistEdgeDataLoader(g, eids, NeighborSampler([5, 5]), batch_size=64, shuffle=True, seed=2,
                           negative_sampler=negative_sampler.Uniform(3), exclude="self")
    true_neg = total_neg = 0
    for b in L:
        B = len(b.input_id)
        assert b.edge_label_index.shape == (2, 4 * B)
        assert b.edge_label[:B].eq(1).all() and b.edge_label[B:].eq(0).all()
        ends = b.n_id[b.edge_label_index]
        src, dst = o.src[b.input_id.numpy()], o.dst[b.input_id.numpy()]
        assert np.array_equal(ends[0, :B].numpy(), src) and np.array_equal(ends[1, :B].numpy(), dst)
        assert np.array_equal(ends[0, B:].numpy(), np.repeat(src, 3))
        assert not np.isin(b.e_id.numpy(), b.input_id.numpy()).any()   # excluded edges never appear
        assert sum(b.num_sampled_edges) == b.num_edges
        o.check_edges(b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]], b.e_id)
        neg = list(zip(ends[0, B:].tolist(), ends[1, B:].tolist()))
        true_neg += sum(k in o.edge_key for k in neg)
        total_neg += len(neg)
    assert true_neg / total_neg < 0.02
    # without exclusion the seed edges' own endpoints do get sampled along them
    L0 = DistEdgeDataLoader(g, eids, NeighborSampler([-1]), batch_size=64, seed=2)
    assert any(np.isin(b.e_id.numpy(), b.input_id.numpy()).any() for b in L0)


def test_edge_loader_reverse_exclusion(graph):
    g, o, _ = graph
    E = len(o.src)
    rev = np.roll(np.arange(E), 1)                   # an arbitrary pairing stands in for reverse edges
    L = DistEdgeDataLoader(g, np.arange(0, E, 9), NeighborSampler([-1]), batch_size=32, seed=4,
                           exclude="reverse_id", reverse_eids=rev)
    for b in L:
        gone = np.concatenate([b.input_id.numpy(), rev[b.input_id.numpy()]])
        assert not np.isin(b.e_id.numpy(), gone).any()


def test_loader_bad_input(graph):
    g, o, _ = graph
    s = NeighborSampler([2])
    with pytest.raises(InputError, match="batch_size must be a positive integer"):
        DistNodeDataLoader(g, [1, 2], s, batch_size=0)
    with pytest.raises(InputError, match="out of range"):
        DistNodeDataLoader(g, [o.n], s, batch_size=2)
    with pytest.raises(InputError, match="must be integers"):
        DistNodeDataLoader(g, np.array([0.5]), s, batch_size=2)
    with pytest.raises(InputError, match="mode must be one of"):
        DistNodeDataLoader(g, [1], s, batch_size=2, mode="magic")
    with pytest.raises(InputError, match="no sampler rank"):
        DistNodeDataLoader(g, [1], s, batch_size=2, mode="samplers")
    with pytest.raises(InputError, match="'nope' is not a node feature"):
        DistNodeDataLoader(g, [1], s, batch_size=2, feat="nope")
    with pytest.raises(InputError, match="labels must be 'all' or 'seeds'"):
        DistNodeDataLoader(g, [1], s, batch_size=2, labels="some")
    with pytest.raises(InputError, match="needs reverse_eids"):
        DistEdgeDataLoader(g, [1], s, batch_size=2, exclude="reverse_id")
    with pytest.raises(InputError, match="exclude must be"):
        DistEdgeDataLoader(g, [1], s, batch_size=2, exclude="others")
    with pytest.raises(InputError, match="k must be a positive integer"):
        negative_sampler.Uniform(0)
    L = DistNodeDataLoader(g, [1, 2, 3], NeighborSampler([2], prob="missing"), batch_size=2, mode="thread")
    with pytest.raises(InputError, match="not an edge feature"):
        next(iter(L))                                 # raised in the prefetch thread, re-raised here


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_sampler_ranks_feed_trainers(mpirun, tmp_path):
    from hpcgnn.comm.mpi import MPI

    _, cfg = make_graph(str(tmp_path), 2, MPI.COMM_SELF)
    script = os.path.join(HERE, os.pardir, "scripts", "loader_job.py")
    # 2 virtual nodes of 3 ranks: server, sampler, trainer
    res = mpirun(6, [sys.executable, script, cfg, "servers=1,samplers=1,trainers=1", "3", "ok"], timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    # one report per trainer (mpirun may join two ranks' lines: read them by pattern)
    lines = re.findall(r"trainer \d+: mode=\w+", res.stdout)
    assert len(lines) == 2 and all("mode=samplers" in ln for ln in lines), res.stdout
    # a third epoch left unfinished when the script ends: finalize drains it, the job ends cleanly
    assert res.stdout.count("left an epoch unfinished") == 2
    # a sampler that dies mid-epoch ends the job: no trainer waits forever
    res = mpirun(6, [sys.executable, script, cfg, "servers=1,samplers=1,trainers=1", "3", "die"], timeout=240)
    assert res.returncode != 0
    assert "(sampler, node" in res.stderr and "sampler failed while producing a batch" in res.stderr


def test_a_dgl_style_loop_ports(graph, tmp_path):
    """DGL's idioms on hpcgnn's loader: ``for input_nodes, seeds, blocks in loader``,
    ``block.num_dst_nodes()``, ``block.srcdata[NID]``, DGL's fanout order, and a
    graph without the default feature names."""
    from hpcgnn.sampling import NID, MultiLayerNeighborSampler

    g, o, cfg = graph
    assert MultiLayerNeighborSampler([4, 2]).fanouts == [2, 4]          # DGL lists the input layer first
    L = DistNodeDataLoader(g, np.arange(200), MultiLayerNeighborSampler([4, 2]), batch_size=50, seed=5,
                           mode="inline")
    for input_nodes, seeds, blocks in L:
        assert torch.equal(seeds, input_nodes[:len(seeds)]) and len(blocks) == 2
        assert blocks[-1].num_dst_nodes() == len(seeds) == blocks[-1].num_dst_nodes
        assert torch.equal(blocks[0].srcdata[NID], input_nodes) and torch.equal(blocks[-1].dstdata[NID], seeds)
    b = next(iter(L))
    assert torch.equal(b.x, torch.from_numpy(o.feat[b.n_id.numpy()]))
    # a graph without 'feat'/'label': the defaults read nothing, a named one is an error
    bare = DistGraph("g", part_config=cfg)
    for name in ("feat", "label"):
        dict.pop(bare.ndata, name)                   # as a graph partitioned without them
    b = next(iter(DistNodeDataLoader(bare, np.arange(100), NeighborSampler([2]), batch_size=50, mode="inline")))
    assert b.x is None and b.y is None
    with pytest.raises(InputError, match="feat='feat' is not a node feature"):
        DistNodeDataLoader(bare, np.arange(100), NeighborSampler([2]), batch_size=50, mode="inline", feat="feat")
