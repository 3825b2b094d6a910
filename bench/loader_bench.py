"""Distributed sampling and data loading, 2 partitions, in one served launch.

    mpirun -n 4 python bench/loader_bench.py --part-config PARTS/NAME.json
    mpirun -n 4 python bench/loader_bench.py --nodes 300000 --degree 25     # generate + partition first

Runs as 2 virtual nodes of 2 ranks (a server holding one partition and a trainer
each; ``--layout``/``--ranks-per-node`` to change).  Every trainer, at the same time:

* ``kernel`` (a): the compiled kernel + relabel on the whole graph's CSR copied
  into this process (no communication) - the single-partition rate;
* ``distributed`` (b): ``NeighborSampler.sample`` on the 2-partition DistGraph
  (local partition from shared memory, the other through the window), seeds from
  this trainer's share of the training nodes;
* ``numpy``: the same hops in vectorised NumPy on the local CSR (the floor);
* ``loader``: ``DistNodeDataLoader`` feeding a real model step (3-layer GraphSAGE,
  hidden ``--hidden``, Adam) through the default path (prefetch thread, or
  sampler ranks when the layout has them): batches/s and the fraction of the step
  the trainer waited for a batch.

Rates are per trainer process = per core (one OpenMP thread each).  Prints one
JSON object (trainer 0) with per-trainer means and the ratio ``distributed /
kernel`` (target >= 0.5) and the wait fraction (target <= 5%).
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hpcgnn  # noqa: E402
from hpcgnn.comm.mpi import MPI  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sampling_bench import kernel_sample, numpy_sample, rate  # noqa: E402


def prepare(a, world):
    """The partition config: given, or generated and partitioned (2 parts) here."""
    if a.part_config:
        return a.part_config
    from hpcgnn.datasets import generate_graph
    from hpcgnn.partition import partition_graph

    tmp = world.bcast(a.dir or (tempfile.mkdtemp(prefix="hpcgnn-lbench-") if world.Get_rank() == 0 else None))
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, world, a.nodes, a.degree, a.feat_dim, a.classes, seed=1, name="bench", overwrite=True)
    return partition_graph(raw, os.path.join(tmp, "p2"), 2, comm=world, overwrite=True)


def whole_csr(g):
    """The whole graph's CSR (global edge ids are contiguous per node)."""
    n = g.num_nodes()
    rows = g._t.csr.gather(np.arange(n))
    indptr = np.append(rows[:, 0], rows[-1, 1]).astype(np.int64)
    indices = g._t.indices.gather(np.arange(g.num_edges()))
    return indptr, indices


def model_step(model, opt, b):
    import torch.nn.functional as F

    out = model(b.x.float(), b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
    loss = F.cross_entropy(out, b.y[: b.batch_size].long())
    opt.zero_grad()
    loss.backward()
    opt.step()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part-config")
    ap.add_argument("--nodes", type=int, default=300_000)
    ap.add_argument("--degree", type=float, default=25.0)
    ap.add_argument("--feat-dim", type=int, default=100)
    ap.add_argument("--classes", type=int, default=47)
    ap.add_argument("--dir")
    ap.add_argument("--layout", default="servers=1,samplers=0,trainers=1")
    ap.add_argument("--ranks-per-node", type=int, default=None)
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--numpy-batches", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--loader-batches", type=int, default=30)
    a = ap.parse_args()
    world = MPI.COMM_WORLD
    cfg = prepare(a, world)
    rpn = a.ranks_per_node or (world.Get_size() // 2)
    ctx = hpcgnn.initialize(a.layout, rpn, part_config=cfg)
    from hpcgnn.graph import DistGraph, node_split
    from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler
    from hpcgnn.train.model import SAGE

    torch.set_num_threads(1)
    tc = ctx.trainer_comm
    g = DistGraph(ctx.service.graphs and next(iter(ctx.service.graphs)))
    fanouts = [int(x) for x in a.fanouts.split(",")]
    train = node_split(g.ndata["train_mask"], g.get_partition_book()).numpy()
    rng = np.random.default_rng(tc.Get_rank())
    seed_sets = [rng.choice(train, min(a.batch, len(train)), replace=False)
                 for _ in range(max(a.batches, a.numpy_batches))]
    indptr, indices = whole_csr(g)
    tc.Barrier()
    res = {}
    kernel_sample(indptr, indices, seed_sets[0], fanouts, rng)          # warm up (relabel table)
    res["kernel"] = rate(lambda s: kernel_sample(indptr, indices, s, fanouts, rng), (), a.batches,
                         lambda i: seed_sets[i])
    tc.Barrier()
    sampler = NeighborSampler(fanouts, seed=2)
    sampler.sample(g, seed_sets[0])
    res["distributed"] = rate(lambda s: sampler.sample(g, s).num_edges, (), a.batches, lambda i: seed_sets[i])
    tc.Barrier()
    res["numpy"] = rate(lambda s: numpy_sample(indptr, indices, s, fanouts, rng), (), a.numpy_batches,
                        lambda i: seed_sets[i])
    del indptr, indices
    tc.Barrier()
    C = int(g.get_partition_config().get("num_classes") or 47)
    model = SAGE(int(g.ndata["feat"].shape[1]), a.hidden, C, len(fanouts))
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    loader = DistNodeDataLoader(g, train, sampler, a.batch, shuffle=True, seed=3)
    steps, t0 = 0, time.perf_counter()
    for b in loader:
        model_step(model, opt, b)
        steps += 1
        if steps == a.loader_batches:
            break
    dt = time.perf_counter() - t0
    res["loader"] = {"mode": loader.mode, "batches": steps, "seconds": round(dt, 3),
                     "batches_per_s": round(steps / dt, 2), "wait_s": round(loader.stats["wait_s"], 4),
                     "wait_fraction": round(loader.stats["wait_s"] / dt, 4)}
    every = tc.gather(res, root=0)
    if tc.Get_rank() == 0:
        def mean(part, key):
            return round(float(np.mean([r[part][key] for r in every])), 4)

        k, d, n = (mean(p, "edges_per_s_per_core") for p in ("kernel", "distributed", "numpy"))
        out = {"bench": "loader", "graph": {"nodes": g.num_nodes(), "edges": g.num_edges(),
                                            "parts": g._t.num_parts},
               "layout": str(ctx.layout), "trainers": tc.Get_size(), "fanouts": fanouts, "batch": a.batch,
               "kernel_edges_per_s_per_core": k, "distributed_edges_per_s_per_core": d,
               "numpy_edges_per_s_per_core": n,
               "distributed_over_kernel": round(d / k, 3), "target_distributed_over_kernel": 0.5,
               "kernel_over_numpy": round(k / n, 1),
               "loader_mode": every[0]["loader"]["mode"], "loader_batches_per_s": mean("loader", "batches_per_s"),
               "trainer_wait_fraction": max(r["loader"]["wait_fraction"] for r in every),
               "target_wait_fraction": 0.05, "per_trainer": every}
        print(json.dumps(out), flush=True)
    ctx.finalize()


if __name__ == "__main__":
    main()
