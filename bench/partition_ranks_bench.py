"""Partition quality and cost against the rank count (issue 42): one generated graph
partitioned by ``hpcgnn partition`` at several rank counts, and by serial METIS and
KaMinPar, in one run.  Prints one JSON object.

    python bench/partition_ranks_bench.py                               # 200k nodes, 4M edges
    python bench/partition_ranks_bench.py --num-nodes 2000000 --avg-degree 20 --ranks 2,4,8,16,32
    python bench/partition_ranks_bench.py --ids local --num-classes 256 --homophily 0.95   # strong locality

Run it with ``python``, not under ``mpirun``: each rank count is a child ``mpirun
--oversubscribe -n R`` (on a small machine the ranks share its cores: judge the wall
time only up to the core count). ``--ids``: the generator's vertex ids (an affine
permutation of the class-ordered positions: no locality), a copy with ids in class order
(locality), or both (default). For each rank count: the edge cut as a fraction of the
input edges and its ratio to the 2-rank cut and to KaMinPar's; the graph handed to
ParMETIS after ``--coarsen`` (``coarse_nodes``, ``coarse_edges``), the first level's
clusters (``clusters_first_level``, the count clustering across rank blocks keeps
independent of the ranks) and their ratios to the 2-rank ones; each rank's clustering
work (adjacency entries scanned, values sent to other ranks and by what for, exchanges:
the largest rank's and the mean), beside what one exchange of every ghost's label sends
(``lp_full_exchange_values_...``: the floor of label propagation with ghost labels,
which on a graph without locality does not fall with the ranks) and how many such
exchanges the values sent come to (``lp_full_exchanges_sent_max_rank``); the wall time;
the peak RSS summed over the ranks, and per directed edge of the symmetric view, also
beyond what the same command takes on a 2000-node graph at that rank count
(``..._beyond_tiny``: the interpreters, MPI and HDF5 every rank holds whatever the
graph).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"partition_ranks_bench: {' '.join(cmd)} failed:\n{res.stdout[-2000:]}{res.stderr[-3000:]}")
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


def local_copy(raw: str, path: str, seed: int) -> None:
    """A copy of the generated graph ``raw`` whose vertex ids are the generator's
    positions (classes in consecutive id ranges: ids with locality): edges relabelled,
    every node column permuted."""
    import h5py
    import numpy as np

    from hpcgnn.datasets.synthetic import SyntheticModel, SyntheticSpec

    shutil.copy(raw, path)
    with h5py.File(path, "r+") as f:
        n = int(f.attrs["num_nodes"])
        model = SyntheticModel(SyntheticSpec(num_nodes=n, avg_degree=1, feat_dim=1, num_classes=16, seed=seed))
        new = ((model.a * np.arange(n, dtype=np.uint64) + model.b) % model.n).astype(np.int64)   # id -> position
        for name in ("edges/src", "edges/dst"):
            f[name][:] = new[f[name][:]]
        for name, d in f["nodes/data"].items():
            col = d[:]
            out = np.empty_like(col)
            out[new] = col
            d[:] = out


def _partition(raw: str, parts: str, r: int, a) -> dict:
    return _run(MPIRUN + ["-n", str(r)] + HPCGNN + ["partition", raw, "-o", parts, "-k", str(a.num_parts),
                                                    "--coarsen", a.coarsen, "--json", "--overwrite"])


def sweep(raw: str, work: str, a, tiny: str) -> dict:
    """The peers and every rank count on one raw graph (and on the ``tiny`` one: what
    the ranks hold whatever the graph, subtracted in ``..._beyond_tiny``)."""
    out = {"runs": {}}
    if not a.skip_peers:
        out["metis_serial"] = _run([sys.executable, os.path.join(HERE, "metis_baseline.py"), raw,
                                    str(a.num_parts)])
        try:
            out["kaminpar"] = _run([sys.executable, os.path.join(HERE, "kaminpar_baseline.py"), raw,
                                    str(a.num_parts)])
        except SystemExit as e:            # not installed: said, and the rest still measured
            out["kaminpar"] = {"error": str(e).splitlines()[-1]}
    for r in [int(x) for x in a.ranks.split(",")]:
        parts = os.path.join(work, f"parts{r}")
        res = _partition(raw, parts, r, a)
        base = _partition(tiny, parts + "-tiny", r, a)["peak_rss_bytes_sum"]
        out["runs"][str(r)] = {
            "edge_cut_fraction": round(res["edge_cut"] / res["num_edges"], 4),
            "coarse_nodes": res.get("coarse_nodes"), "coarse_edges": res.get("coarse_edges"),
            "clusters_first_level": (res.get("coarsening_levels") or [{}])[0].get("clusters"),
            "levels": len(res.get("coarsening_levels") or []),
            "id_ranges_kept": res.get("id_ranges_kept"),
            "partition_s": round(sum(res["timings_s"].values()), 2),
            "peak_rss_bytes_sum": res["peak_rss_bytes_sum"],
            "peak_rss_bytes_per_directed_edge": round(res["peak_rss_bytes_sum"] / (2 * res["num_edges"]), 1),
            "peak_rss_bytes_sum_tiny": base,
            "peak_rss_bytes_per_directed_edge_beyond_tiny":
                round((res["peak_rss_bytes_sum"] - base) / (2 * res["num_edges"]), 1),
        }
        counted = res.get("coarsening_work") or {}
        for k, per in sorted(counted.items()):    # each rank's clustering work: the largest and the mean
            out["runs"][str(r)][f"lp_{k}_max_rank"] = max(per)
            out["runs"][str(r)][f"lp_{k}_mean_rank"] = round(sum(per) / len(per))
        if counted.get("full_exchange_values"):     # the values sent in full exchanges of every label
            out["runs"][str(r)]["lp_full_exchanges_sent_max_rank"] = round(max(
                v / max(1, f) for v, f in zip(counted["values_sent"], counted["full_exchange_values"])), 2)
        shutil.rmtree(parts, ignore_errors=True)
        shutil.rmtree(parts + "-tiny", ignore_errors=True)
    runs = out["runs"]
    first = runs[min(runs, key=int)]
    kcut = out.get("kaminpar", {}).get("edge_cut_fraction")
    for row in runs.values():
        row["cut_ratio_vs_fewest_ranks"] = round(row["edge_cut_fraction"] / max(first["edge_cut_fraction"], 1e-9), 3)
        for k in ("coarse_nodes", "clusters_first_level", "lp_values_sent_max_rank",
                  "lp_full_exchange_values_max_rank"):
            if row.get(k) and first.get(k):
                row[f"{k}_ratio_vs_fewest_ranks"] = round(row[k] / first[k], 3)
        if kcut:
            row["cut_ratio_vs_kaminpar"] = round(row["edge_cut_fraction"] / kcut, 3)
    return out


MPIRUN = ["mpirun", "--oversubscribe"]
HPCGNN = [sys.executable, "-m", "hpcgnn"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num-nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=20)
    p.add_argument("--num-parts", type=int, default=4)
    p.add_argument("--num-classes", type=int, default=16)
    p.add_argument("--homophily", type=float, default=0.5,
                   help="the generator's share of edges inside a class (with --ids local: the locality)")
    p.add_argument("--ranks", default="2,4,8")
    p.add_argument("--ids", choices=["random", "local", "both"], default="both",
                   help="the generator's ids (no locality), ids in class order (locality), or both graphs")
    p.add_argument("--coarsen", choices=["auto", "none", "lp"], default="lp")
    p.add_argument("--workdir", default=None)
    p.add_argument("--skip-peers", action="store_true", help="leave out serial METIS and KaMinPar")
    a = p.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="hpcgnn-ranks-bench-")
    os.makedirs(work, exist_ok=True)
    raw = os.path.join(work, "graph.h5")
    gen = _run(MPIRUN + ["-n", "2"] + HPCGNN + ["generate", raw, "--num-nodes", str(a.num_nodes), "--avg-degree",
                                                str(a.avg_degree), "--feat-dim", "1", "--num-classes",
                                                str(a.num_classes), "--homophily", str(a.homophily),
                                                "--seed", "0", "--json", "--overwrite"])
    tiny = os.path.join(work, "tiny.h5")
    _run(MPIRUN + ["-n", "1"] + HPCGNN + ["generate", tiny, "--num-nodes", "2000", "--avg-degree", str(a.avg_degree),
                                          "--feat-dim", "1", "--num-classes", "16", "--seed", "0", "--json",
                                          "--overwrite"])
    out = {"benchmark": "partition_ranks", "num_nodes": gen["num_nodes"], "num_edges": gen["num_edges"],
           "num_classes": a.num_classes, "homophily": a.homophily,
           "num_parts": a.num_parts, "coarsen": a.coarsen, "graphs": {}}
    for ids in (["random", "local"] if a.ids == "both" else [a.ids]):
        path = raw
        if ids == "local":
            path = os.path.join(work, "graph_local.h5")
            # a child process: importing hpcgnn starts MPI here, and the mpiruns that follow
            # would not start from a process that is already an MPI job
            subprocess.run([sys.executable, "-c", f"import partition_ranks_bench as b; b.local_copy({raw!r}, "
                            f"{path!r}, 0)"], cwd=HERE, check=True)
        out["graphs"][ids] = sweep(path, work, a, tiny)
    print(json.dumps(out), flush=True)
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
