"""Neighbor sampling in a served launch at 1-4 ranks (virtual nodes of 2 ranks when
the size is even and >= 4, one partition per node): sampled edges exist in the raw
graph, batches carry the right features, and seeds owned by this trainer's node and
by another node (read through RMA) give the same distribution - in fact the same
draws for the same seed."""
import os

import numpy as np
import pytest
import torch

import hpcgnn
from conftest import served_layout
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.comm.rma.rowstore import RowStore
from hpcgnn.sampling import NeighborSampler, sample_neighbors

from harness import Oracle, check_minibatch, check_sample_neighbors, chi2_bound, inclusion_stat, make_graph

world = MPI.COMM_WORLD


def _layout():
    return served_layout(world.Get_size())


def _checks(g, o, comm):
    me = comm.Get_rank()
    rng = np.random.default_rng(100 + me)
    seeds = rng.choice(o.n, 200, replace=False)
    for fanout in (0, 2, 5, -1):
        check_sample_neighbors(g, o, seeds, fanout, seed=me)
    fanouts = [4, 3, 2]
    b = NeighborSampler(fanouts, seed=me).sample(g, seeds[:48]).fetch_features(g)
    check_minibatch(g, o, b, seeds[:48], fanouts)
    wb = NeighborSampler([3, 2], prob="weight", seed=me).sample(g, seeds[:48]).fetch_features(g)
    check_minibatch(g, o, wb, seeds[:48], [3, 2])

    # per partition (first and last: local to one trainer, remote to another):
    # inclusion frequencies against fanout / degree, and identical draws everywhere
    fanout, T = 3, 800
    P = len(o.node_bounds) - 1
    draws = []
    for p in sorted({0, P - 1}):
        lo, hi = o.node_bounds[p], o.node_bounds[p + 1]
        cand = lo + np.flatnonzero(o.deg[lo:hi] > 5)[:25]
        _, _, eid = sample_neighbors(g, np.repeat(cand, T), fanout, rng=1234)
        eid = eid.numpy()
        pos = np.repeat(np.arange(len(cand)), np.minimum(o.deg[cand], fanout) * T)
        stat, dof = inclusion_stat(eid, pos, g._t.csr.gather(cand).tolist(), fanout, T)
        assert stat < chi2_bound(dof), (p, stat, dof)
        draws.append(eid)
    everyone = comm.allgather([d.tobytes() for d in draws])
    assert all(x == everyone[0] for x in everyone), "same seed, different draws on different trainers"

    # the device path's CPU twin: this host's seeds by torch ops, the others through RMA
    dev = NeighborSampler(fanouts, seed=me, device="cpu")
    check_minibatch(g, o, dev.sample(g, seeds[:48]).fetch_features(g), seeds[:48], fanouts)
    host, mine = (NeighborSampler([-1, -1], device=d).sample(g, seeds[:16]) for d in (None, "cpu"))
    assert torch.equal(host.edge_index, mine.edge_index) and torch.equal(host.e_id, mine.e_id)
    os.environ["HPCGNN_DEVICE_READS"] = "mapped"          # rows gathered "by the device"
    try:
        feat = g.ndata["feat"]
        feat._mapped.clear()                              # mapped again under this pass's routes
        assert torch.equal(feat.gather_to(seeds, "cpu"), torch.from_numpy(o.feat[seeds]))
        assert len(feat._mapped["cpu"].spans) == len(feat.open_store().direct_views())
        lab = g.ndata["label"]
        lab._mapped.clear()
        assert torch.equal(lab.gather_to(seeds, "cpu"), torch.from_numpy(o.label[seeds]))
    finally:
        del os.environ["HPCGNN_DEVICE_READS"]

    with pytest.raises(InputError, match="out of range"):
        sample_neighbors(g, [o.n + 3], 2)
    with pytest.raises(InputError, match="partitioned with edge_dir='in'"):
        NeighborSampler([2], edge_dir="out").sample(g, [0])
    with pytest.raises(InputError, match="not an edge feature"):
        sample_neighbors(g, [0], 2, prob="missing")


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(180)
def test_sampling_in_a_served_launch(shared_tmp):
    size = world.Get_size()
    if size == 1:        # one process: the standalone path over 2 partitions
        raw, cfg = make_graph(shared_tmp, 2, None)
        g = DistGraph("g", part_config=cfg)
        _checks(g, Oracle(raw, cfg), MPI.COMM_SELF)
        g._ctx.finalize()
        return
    layout, rpn, nparts = _layout()
    raw, cfg = make_graph(shared_tmp, nparts, world)
    oracle = Oracle(raw, cfg)
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg, serve=False)
    if ctx.is_trainer:
        g = DistGraph("g")
        assert not g.standalone
        if nparts > 1:   # the other node's partition is reached through a window, not directly
            assert sorted(g._t.csr.routes().values())[-1] in ("rma", "shm-rma")
        _checks(g, oracle, ctx.trainer_comm)
        # again with every non-direct read forced through MPI_Get (virtual nodes share a
        # host, so by default the other node's rows are read from mapped memory)
        saved = RowStore.direct_shm_reads
        RowStore.direct_shm_reads = False
        try:
            _checks(g, oracle, ctx.trainer_comm)
            st = g.ndata["feat"].open_store()       # the other node's rows came by RMA, into tensors too
            assert nparts == 1 or len(st.direct_views()) < len(st.bounds) - 1
        finally:
            RowStore.direct_shm_reads = saved
        g.barrier()
    else:
        ctx.service.serve()
    ctx.finalize()
    assert ctx.finalized
