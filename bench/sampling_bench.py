"""Neighbor-sampling throughput on one partition: the compiled kernel against a plain
vectorised NumPy implementation of the same sampling, same graph, same run.

A generated graph (products-sized by default: 2,449,029 nodes, average degree 51;
``--nodes``/``--degree`` for smaller) is partitioned into one partition and opened as
a standalone DistGraph (every read is a direct shared-memory read).  Batches of
``--batch`` random seeds are sampled with fanouts ``--fanouts`` (default 15,10,5,
without replacement, PyG hop-wise: each hop expands the nodes first reached at the
previous hop) and relabelled to local ids.  One thread (OMP_NUM_THREADS=1), so the
rates are per core.  Prints one JSON object:

* ``kernel``: ``hpcgnn._ext.sample_ranges`` + ``Relabeler`` on the partition's CSR
  arrays (what a sampler does once the ranges are in hand);
* ``sampler``: ``NeighborSampler.sample`` end to end (RowStore reads of the ranges
  and endpoints included);
* ``numpy``: the same hops in vectorised NumPy (random keys + lexsort for the
  without-replacement draw, ``np.unique`` for the relabel) - the floor;
* ``dgl`` (with ``--dgl-venv``): DGL's ``NeighborSampler.sample_blocks`` on the same
  CSR and seeds in the DGL environment (bench/dgl_peer/sampling.py), one core;
* ``device`` (with ``--device cuda``, or ``cpu`` for the torch-ops twin):
  ``NeighborSampler(device=...)`` end to end on the same seeds (the partition's CSR
  in device memory or mapped), its rate against ``sampler``'s, and ``contract_ok``:
  every seed of every hop got ``min(degree, fanout)`` distinct edges of its own
  (checked on the first batches).  Target on one GPU: 50 M sampled edges/s.

    OMP_NUM_THREADS=1 python bench/sampling_bench.py --nodes 300000 --degree 25
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from hpcgnn import _ext  # noqa: E402
from hpcgnn.datasets import generate_graph  # noqa: E402
from hpcgnn.graph import DistGraph  # noqa: E402
from hpcgnn.partition import partition_graph  # noqa: E402
from hpcgnn.sampling import NeighborSampler  # noqa: E402


_TABLE = {}


def kernel_sample(indptr, indices, seeds, fanouts, rng):
    """Compiled path on local CSR arrays; returns the number of sampled edges."""
    expected = min(len(indptr) - 1, len(seeds) * int(np.cumprod([1] + fanouts).sum()))
    r = _TABLE.get("r")
    if r is None:
        r = _TABLE["r"] = _ext.Relabeler(expected)
    r.reset(expected)
    r.map(seeds)
    frontier, total = seeds, 0
    for f in fanouts:
        rows = np.empty((len(frontier), 2), np.int64)
        rows[:, 0] = indptr[frontier]
        rows[:, 1] = indptr[frontier + 1]
        eids, counts = _ext.sample_ranges(rows.reshape(-1), f, False, int(rng.integers(2**62)))
        before = len(r)
        r.map(indices[eids])
        np.repeat(np.arange(len(frontier)), counts)         # the target side of edge_index
        total += len(eids)
        frontier = r.nodes()[before:]
    return total


def numpy_sample(indptr, indices, seeds, fanouts, rng):
    """The same sampling, vectorised NumPy; returns the number of sampled edges."""
    nodes = seeds.copy()
    frontier, total = seeds, 0
    for f in fanouts:
        first, end = indptr[frontier], indptr[frontier + 1]
        deg = end - first
        take = np.minimum(deg, f)
        # candidates of every seed, a random key each; keep the f smallest keys per seed
        owner = np.repeat(np.arange(len(frontier)), deg)
        starts = np.cumsum(deg) - deg
        pos = np.arange(int(deg.sum())) - np.repeat(starts, deg)
        keys = rng.random(len(owner))
        order = np.lexsort((keys, owner))
        rank = np.arange(len(order)) - np.repeat(starts, deg)
        chosen = order[rank < np.repeat(take, deg)]
        eids = first[owner[chosen]] + pos[chosen]
        nbr = indices[eids]
        # relabel: unique in first-appearance order after the existing nodes
        allv = np.concatenate([nodes, nbr])
        uniq, first_idx, inv = np.unique(allv, return_index=True, return_inverse=True)
        order_u = np.argsort(first_idx, kind="stable")
        before = len(nodes)
        nodes = uniq[order_u]
        local = np.empty_like(order_u)
        local[order_u] = np.arange(len(order_u))
        local[inv[before:]]                                 # the neighbors' local ids
        total += len(eids)
        frontier = nodes[before:]
    return total


def rate(fn, g_args, batches, seeds_of):
    edges, t0 = 0, time.perf_counter()
    for i in range(batches):
        edges += fn(*g_args, seeds_of(i))
    dt = time.perf_counter() - t0
    return {"edges": edges, "seconds": round(dt, 4), "batches_per_s": round(batches / dt, 2),
            "edges_per_s_per_core": round(edges / dt)}


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--nodes", type=int, default=2_449_029, help="nodes of the generated graph (default %(default)s)")
    ap.add_argument("--degree", type=float, default=51.0, help="its average degree (default %(default)s)")
    ap.add_argument("--fanouts", default="15,10,5", help="per hop, seeds first (default %(default)s)")
    ap.add_argument("--batch", type=int, default=1024, help="seeds per batch (default %(default)s)")
    ap.add_argument("--batches", type=int, default=20, help="batches timed per sampler (default %(default)s)")
    ap.add_argument("--numpy-batches", type=int, default=5, help="batches of the NumPy floor (default %(default)s)")
    ap.add_argument("--dir", default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true", help="reuse the partitioned graph already in --dir")
    ap.add_argument("--device", help="also sample by this device (cuda; cpu: the torch-ops twin)")
    ap.add_argument("--dgl-venv", help="a virtual environment with DGL (bench/dgl_peer/setup.sh): also time "
                                       "DGL's sampler on the same CSR and seeds in this run")
    a = ap.parse_args()
    fanouts = [int(x) for x in a.fanouts.split(",")]
    tmp = a.dir or tempfile.mkdtemp(prefix="hpcgnn-sbench-")
    if not a.dir:                                    # its graph goes with it (a products-sized one: GBs)
        atexit.register(shutil.rmtree, tmp, True)
    raw = os.path.join(tmp, "g.h5")
    t = time.perf_counter()
    cfg = os.path.join(tmp, "p1", "bench.json")
    if not (a.reuse and os.path.exists(cfg)):
        generate_graph(raw, None, a.nodes, a.degree, 8, 4, seed=1, name="bench", overwrite=True)
        cfg = partition_graph(raw, os.path.join(tmp, "p1"), 1, comm=None, overwrite=True)
    setup_s = time.perf_counter() - t
    g = DistGraph("bench", part_config=cfg)
    lp = g.local_partition
    indptr = np.ascontiguousarray(lp["indptr"], dtype=np.int64)
    lo, hi = g._t.indices.local_range
    indices = g._t.indices.local_rows[: hi - lo]           # the partition's CSR in window memory
    n = g.num_nodes()
    srng = np.random.default_rng(0)
    seed_sets = [srng.choice(n, a.batch, replace=False) for _ in range(max(a.batches, a.numpy_batches))]
    rng = np.random.default_rng(1)
    kernel_sample(indptr, indices, seed_sets[0], fanouts, rng)          # warm up
    t = time.perf_counter()
    _TABLE["r"].reset(min(n, a.batch * int(np.cumprod([1] + fanouts).sum())))
    table_alloc_s = time.perf_counter() - t
    res_k = rate(lambda *x: kernel_sample(*x, fanouts, rng), (indptr, indices), a.batches, lambda i: seed_sets[i])
    sampler = NeighborSampler(fanouts, seed=2)
    res_s = rate(lambda s: sampler.sample(g, s).num_edges, (), a.batches, lambda i: seed_sets[i])
    res_n = rate(lambda *x: numpy_sample(*x, fanouts, rng), (indptr, indices), a.numpy_batches,
                 lambda i: seed_sets[i])
    out = {"bench": "sampling", "graph": {"nodes": n, "edges": g.num_edges(), "avg_degree": round(g.num_edges() / n, 2),
                                          "setup_s": round(setup_s, 1)},
           "fanouts": fanouts, "batch": a.batch, "threads": int(os.environ.get("OMP_NUM_THREADS", "1")),
           "relabel_table_reset_s": round(table_alloc_s, 4), "kernel": res_k, "sampler": res_s, "numpy": res_n,
           "kernel_over_numpy": round(res_k["edges_per_s_per_core"] / res_n["edges_per_s_per_core"], 2),
           "sampler_over_numpy": round(res_s["edges_per_s_per_core"] / res_n["edges_per_s_per_core"], 2),
           "target_edges_per_s_per_core": 8_000_000}
    if a.device:
        out["device"] = device_sampling(g, fanouts, a.device, a.batches, seed_sets, indptr)
        out["device_over_sampler"] = round(out["device"]["edges_per_s"] / res_s["edges_per_s_per_core"], 2)
        out["target_device_edges_per_s"] = 50_000_000
    if a.dgl_venv:
        out["dgl"] = dgl_sampling(a, tmp, indptr, indices, seed_sets[:a.batches])
        out["kernel_over_dgl"] = round(res_k["edges_per_s_per_core"] / out["dgl"]["edges_per_s_per_core"], 2)
        out["sampler_over_dgl"] = round(res_s["edges_per_s_per_core"] / out["dgl"]["edges_per_s_per_core"], 2)
        out["target_over_dgl"] = 2.0
    print(json.dumps(out))
    g._ctx.finalize()


def device_sampling(g, fanouts, device, batches, seed_sets, indptr) -> dict:
    """``NeighborSampler(device=device)`` on the seed sets: rate (a warm-up batch
    first, the device synchronised before the clock stops) and the contract."""
    import torch

    s = NeighborSampler(fanouts, seed=2, device=device)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    t = time.perf_counter()
    s.sample(g, seed_sets[0])
    sync()
    first_s = time.perf_counter() - t
    edges, t0 = 0, time.perf_counter()
    for i in range(batches):
        edges += s.sample(g, seed_sets[i]).num_edges
    sync()
    dt = time.perf_counter() - t0
    ok = all(contract_ok(s.sample(g, seed_sets[i]), fanouts, indptr) for i in range(min(3, batches)))
    return {"device": str(s.device), "csr_placement": s.local_csr(g).placement, "edges": edges,
            "seconds": round(dt, 4), "first_batch_s": round(first_s, 4), "edges_per_s": round(edges / dt),
            "contract_ok": ok}


def contract_ok(b, fanouts, indptr) -> bool:
    """Every node of hop h got min(degree, fanouts[h]) distinct edges, each its own."""
    n_id, ei, e_id = b.n_id.cpu().numpy(), b.edge_index.cpu().numpy(), b.e_id.cpu().numpy()
    ncum = np.cumsum([0] + b.num_sampled_nodes)
    ecum = np.cumsum([0] + b.num_sampled_edges)
    for h, f in enumerate(fanouts):
        dst, eid = ei[1, ecum[h]:ecum[h + 1]], e_id[ecum[h]:ecum[h + 1]]
        v = n_id[ncum[h]:ncum[h + 1]]
        deg = indptr[v + 1] - indptr[v]
        got = np.bincount(dst - ncum[h], minlength=len(v))
        if not np.array_equal(got, np.minimum(deg, f) if f >= 0 else deg):
            return False
        own = n_id[dst]
        if not ((eid >= indptr[own]) & (eid < indptr[own + 1])).all():
            return False
        if len(np.unique(eid)) != len(eid):
            return False
    return True


def dgl_sampling(a, tmp, indptr, indices, seed_sets) -> dict:
    """DGL's sampler (bench/dgl_peer/sampling.py) on the same CSR and seeds, one core."""
    d = os.path.join(tmp, "dgl_sampling")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "indptr.npy"), indptr)
    np.save(os.path.join(d, "indices.npy"), np.asarray(indices, dtype=np.int64))
    np.save(os.path.join(d, "seeds.npy"), np.stack(seed_sets).astype(np.int64))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dgl_peer", "sampling.py")
    res = subprocess.run([os.path.join(a.dgl_venv, "bin", "python"), script, d, "--fanouts", a.fanouts],
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if res.returncode != 0:
        raise SystemExit("sampling_bench: the DGL sampler failed:\n" + res.stderr[-3000:])
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


if __name__ == "__main__":
    main()
