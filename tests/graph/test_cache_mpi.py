"""The hot-row feature cache: bitwise the same rows with and without it, only rows
of other nodes' partitions cached, hottest first, within the budget; writing drops
it; loaders with a cache give the same batches."""
import numpy as np
import pytest
import torch

import hpcgnn
from conftest import served_layout
from hpcgnn.comm.mpi import MPI
from hpcgnn.graph import DistGraph
from hpcgnn.graph.cache import hotness_from_sampler
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler

from harness import make_graph

world = MPI.COMM_WORLD
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(180)
def test_row_cache(shared_tmp):
    size = world.Get_size()
    if size == 1:
        _, cfg = make_graph(shared_tmp, 2, None)
        g = DistGraph("g", part_config=cfg)
        c = g.ndata["feat"].enable_cache(1 << 20, graph=g)
        assert len(c) == 0 and c.remote_rows == 0          # one process holds everything: nothing remote
        g._ctx.finalize()
        return
    layout, rpn, nparts = served_layout(size)
    _, cfg = make_graph(shared_tmp, nparts, world)
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    g = DistGraph("g")
    feat = g.ndata["feat"]
    n = g.num_nodes()
    rng = np.random.default_rng(ctx.rank)
    ids = rng.integers(0, n, 5000)
    ref = feat[ids].clone()
    row_bytes = feat[[0]].numpy().nbytes
    c = feat.enable_cache(200 * row_bytes, graph=g)
    mine = g.get_partition_book().partid
    book = g.get_partition_book()
    remote = np.asarray(book.nid2partid(c.ids)) != mine if len(c) else []
    assert np.all(remote)                                   # only other nodes' rows
    expect = min(200, c.remote_rows)
    assert len(c) == expect
    got = feat[ids]
    assert torch.equal(got, ref)                            # bitwise the same
    hits = c.hits
    assert torch.equal(feat.row_refs(ids).materialize(), ref)   # rows read in place: cache, shm, fetched
    assert c.hits > hits or not len(c)                     # the cache served its rows
    from hpcgnn.comm.rma.rowstore import RowStore

    saved = RowStore.direct_shm_reads                       # and with every remote read through MPI_Get
    RowStore.direct_shm_reads = False
    try:
        assert torch.equal(feat[ids], ref)
        assert torch.equal(feat.row_refs(ids).materialize(), ref)
    finally:
        RowStore.direct_shm_reads = saved
    st = c.stats()
    if c.remote_rows:
        assert st["hits"] > 0 and st["remote_fetched"] == st["remote_lookups"] - st["hits"]
        deg = np.asarray(g.out_degrees(c.ids))             # in-edge sampling reaches a node per out-edge
        cand = np.flatnonzero(np.asarray(book.nid2partid(np.arange(n))) != mine)
        assert deg.min() >= np.sort(np.asarray(g.out_degrees(cand)))[-len(c)]   # hottest first
    # sampler-based hotness: every sampled node counted once per batch
    s = NeighborSampler([3, 2])
    h = hotness_from_sampler(g, s, np.arange(0, n, 7), batch_size=64, batches=3, rng=1)
    assert h.shape == (n,) and h.sum() > 0
    # writing drops the cache
    feat.disable_cache()
    ids2 = np.arange(min(n, 300))
    loaders = [DistNodeDataLoader(g, ids2, s, batch_size=50, seed=3, mode="inline", cache_bytes=cb)
               for cb in (0, 100 * row_bytes)]
    for a, b in zip(*loaders):
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    # a cache in a device's memory (a GPU when there is one; the same code on "cpu"):
    # batches assembled on the device, bitwise the same rows
    for dev in DEVICES:
        feat.disable_cache()
        c = feat.enable_cache(200 * row_bytes, graph=g, device=dev)
        got = feat.gather_to(ids, dev)
        assert got.device.type == dev and torch.equal(got.cpu(), ref)
        assert c.stats()["device"].startswith(dev) and (c.stats()["hits"] > 0 or c.remote_rows == 0)
        assert torch.equal(feat[ids], ref)                  # plain reads stay right
        feat.disable_cache()
        on = DistNodeDataLoader(g, ids2, s, batch_size=50, seed=3, mode="thread", cache_bytes=100 * row_bytes,
                                device=dev)
        plain = DistNodeDataLoader(g, ids2, s, batch_size=50, seed=3, mode="inline")
        for a, b in zip(on, plain):
            assert a.x.device.type == dev and a.y.device.type == dev
            assert torch.equal(a.x.cpu(), b.x) and torch.equal(a.y.cpu(), b.y)
        feat.disable_cache()
    g.barrier()
    ctx.finalize()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_is_among_the_cache_devices():
    assert "cuda" in DEVICES


@pytest.mark.mpi(min_size=4)
@pytest.mark.timeout(180)
def test_typed_features_on_a_device_are_served_by_its_cache(shared_tmp):
    """Features of some node types only (papers), batches assembled on a device: the
    cache there served nothing (every row was read from the store and moved)."""
    import json
    import os

    from hpcgnn.datasets import generate_hetero_graph
    from hpcgnn.partition import partition_graph

    size = world.Get_size()
    if size % 2:
        pytest.skip("two-rank virtual nodes")
    layout, rpn, nparts = served_layout(size)
    raw = os.path.join(shared_tmp, "mag.h5")
    generate_hetero_graph(raw, world, 3000, 8, 8, 4, seed=5, chunk_nodes=512)
    cfg = partition_graph(raw, os.path.join(shared_tmp, "magparts"), nparts, comm=world)
    with open(cfg) as f:
        conf = json.load(f)
    assert conf["node_feats"]["feat"].get("ntypes")           # papers only
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg, serve=False)
    if not ctx.is_trainer:
        ctx.service.serve()
        ctx.finalize()
        return
    g = DistGraph(conf["graph_name"])
    seeds = np.flatnonzero(np.asarray(g.get_partition_book().map_to_per_ntype(np.arange(g.num_nodes()))[0]) == 0)
    seeds = seeds[ctx.trainer_comm.Get_rank()::ctx.trainer_comm.Get_size()][:400]
    s = NeighborSampler([5, 5])
    feat = g.ndata["feat"]
    row_bytes = feat[[int(seeds[0])]].numpy().nbytes
    for dev in DEVICES:
        feat.disable_cache()
        on = DistNodeDataLoader(g, seeds, s, batch_size=100, seed=3, mode="inline", cache_bytes=500 * row_bytes,
                                device=dev)
        plain = DistNodeDataLoader(g, seeds, s, batch_size=100, seed=3, mode="inline")
        for a, b in zip(on, plain):
            assert a.x.device.type == dev and torch.equal(a.x.cpu(), b.x) and torch.equal(a.n_id, b.n_id)
        st = feat.cache.stats()
        assert st["rows"] > 0 and st["hits"] > 0, st
        kept = np.asarray(g.get_partition_book().map_to_per_ntype(feat.cache.ids)[0])
        assert (kept == 0).all()                           # papers only: the other rows are never read
        feat.disable_cache()
    g.barrier()
    ctx.finalize()
