"""Hot-feature cache: remote feature rows fetched and gather time per batch.

    HPCGNN_SHM_READS=rma mpirun -n 4 python bench/cache_bench.py --part-config runs/products/parts/products.json

2 virtual nodes of [server, trainer] (one partition each).  Each trainer samples
``--batches`` batches of its training nodes (fanouts ``--fanouts``, batch
``--batch``) and gathers their features, with a cache of 0%, 5% and 20% of the
feature bytes of the other partition (the hottest nodes by in-degree, or by access
counts from sampling with ``--hotness sampler``).  ``HPCGNN_SHM_READS=rma`` makes
reads of the other virtual node's rows go through MPI ``Get`` as they would across
real nodes (by default they are read from mapped memory on one host).  Same
batches for every budget.  Prints one JSON object (trainer 0): per budget the
remote rows fetched per batch, the fraction served by the cache, gather seconds per
batch, and the reduction against no cache.
"""
import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import hpcgnn  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--fanouts", default="25,10")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--budgets", default="0,0.05,0.2", help="fractions of the remote feature bytes")
    ap.add_argument("--hotness", choices=("degree", "sampler"), default="degree")
    a = ap.parse_args()
    ctx = hpcgnn.initialize("servers=1,samplers=0,trainers=1", 2, part_config=a.part_config)
    from hpcgnn.graph import DistGraph, node_split
    from hpcgnn.graph.cache import hotness_from_sampler
    from hpcgnn.sampling import NeighborSampler

    tc = ctx.trainer_comm
    name = next(iter(ctx.service.graphs))
    g = DistGraph(name)
    feat = g.ndata["feat"]
    fanouts = [int(x) for x in a.fanouts.split(",")]
    sampler = NeighborSampler(fanouts)
    train = node_split(g.ndata["train_mask"], g.get_partition_book()).numpy()
    rng = np.random.default_rng(tc.Get_rank())
    tc.Barrier()
    t = time.perf_counter()
    batches = [sampler.sample(g, rng.choice(train, a.batch, replace=False), rng=i).n_id.numpy()
               for i in range(a.batches)]
    sample_s = (time.perf_counter() - t) / a.batches
    hot = hotness_from_sampler(g, sampler, train, a.batch, 20, rng=7) if a.hotness == "sampler" else None
    row_bytes = feat[[0]].numpy().nbytes
    results = []
    for frac in [float(x) for x in a.budgets.split(",")]:
        feat.disable_cache()
        probe = feat.enable_cache(0, hotness=hot, graph=g)
        budget = int(frac * probe.remote_rows * row_bytes)
        t = time.perf_counter()
        c = feat.enable_cache(budget, hotness=hot, graph=g)
        fill_s = time.perf_counter() - t
        tc.Barrier()
        t = time.perf_counter()
        for ids in batches:
            feat[ids]
        dt = time.perf_counter() - t
        st = c.stats()
        results.append({"budget_fraction": frac, "cached_rows": st["rows"], "cache_mb": round(st["bytes"] / 2**20, 1),
                        "fill_s": round(fill_s, 2), "remote_rows_per_batch": st["remote_lookups"] / a.batches,
                        "remote_fetched_per_batch": st["remote_fetched"] / a.batches,
                        "hit_rate_of_remote": round(st["hit_rate_of_remote"], 4),
                        "gather_s_per_batch": round(dt / a.batches, 5), "sample_s_per_batch": round(sample_s, 5),
                        "steps_per_epoch": -(-len(train) // a.batch)})
    every = tc.gather(results, root=0)
    if tc.Get_rank() == 0:
        rows = []
        for i, r in enumerate(every[0]):
            merged = dict(r)
            for key in ("remote_rows_per_batch", "remote_fetched_per_batch", "gather_s_per_batch",
                        "hit_rate_of_remote", "sample_s_per_batch"):
                merged[key] = round(float(np.mean([e[i][key] for e in every])), 5)
            rows.append(merged)
        base = rows[0]
        for r in rows:        # an epoch without the model: every step samples and gathers one batch
            r["steps_per_epoch"] = max(e[0]["steps_per_epoch"] for e in every)
            r["sample_gather_epoch_s"] = round(r["steps_per_epoch"] * (r["sample_s_per_batch"] +
                                                                       r["gather_s_per_batch"]), 3)
            r["remote_bytes_reduction"] = round(base["remote_fetched_per_batch"] / max(r["remote_fetched_per_batch"], 1e-9), 2)
            r["gather_speedup"] = round(base["gather_s_per_batch"] / r["gather_s_per_batch"], 2)
        print(json.dumps({"bench": "cache", "graph": {"nodes": g.num_nodes(), "edges": g.num_edges()},
                          "fanouts": fanouts, "batch": a.batch, "hotness": a.hotness,
                          "reads": os.environ.get("HPCGNN_SHM_READS", "direct"), "budgets": rows,
                          "target_remote_bytes_reduction": 1.6}), flush=True)
    ctx.finalize()


if __name__ == "__main__":
    main()
