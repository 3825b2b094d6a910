"""Generate and partition a graph in one MPI job; serial METIS on the same graph as
the same-run baseline.  Prints one JSON object.

    mpirun -n 2 python bench/partition_bench.py                 # products-sized (2.45M nodes)
    mpirun -n 2 python bench/partition_bench.py --num-nodes 200000 --avg-degree 20 --feat-dim 64

Reports: wall time of generate and of partition split into its phases, peak RSS of
each rank, bytes written, ParMETIS' edge cut; and for serial METIS (a child process
of rank 0, after the parallel job's numbers are taken): time, peak RSS and cut.  The
ratios compare against that baseline; DGL's published numbers for a graph of the same
size (../shared/TARGETS.md) are printed alongside for reference only.  With
``--dgl-venv`` (bench/dgl_peer/setup.sh) DGL's own ``partition_graph`` (METIS, one
process, training nodes balanced) partitions the same graph in the same run too.
KaMinPar (bench/kaminpar_baseline.py, ``pip install kaminpar``; node counts
balanced within 3%) is the quality peer where it is installed: its cut, time and
peak RSS, and ``cut_ratio_vs_kaminpar``.
"""
import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph

DGL_REFERENCE = {"partition_s": 198.0, "peak_rss_gib": 14.3, "edge_cut_fraction": 0.331}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num-nodes", type=int, default=2_450_000)
    p.add_argument("--avg-degree", type=float, default=25.3)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--num-classes", type=int, default=47)
    p.add_argument("--num-parts", type=int, default=2)
    p.add_argument("--balance-ntypes", nargs="*", default=["train_mask"])
    p.add_argument("--workdir", default=None)
    p.add_argument("--skip-metis", action="store_true")
    p.add_argument("--skip-kaminpar", action="store_true",
                   help="leave out KaMinPar, the quality peer (run when 'pip install kaminpar' is there)")
    p.add_argument("--dgl-venv", help="a virtual environment with DGL (bench/dgl_peer/setup.sh): also partition "
                                      "the same graph with DGL's partition_graph in this run")
    p.add_argument("--coarsen", choices=["auto", "none", "lp"], default="auto",
                   help="partition_graph(coarsen=...): auto (default) is lp at this size")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    work = a.workdir or (tempfile.mkdtemp(prefix="hpcgnn-bench-") if rank == 0 else None)
    if rank == 0:
        os.makedirs(work, exist_ok=True)          # --workdir may name a directory not made yet
    work = comm.bcast(work, root=0)
    raw = os.path.join(work, "graph.h5")
    out = os.path.join(work, "parts")

    comm.Barrier()
    t0 = time.perf_counter()
    generate_graph(raw, comm, a.num_nodes, a.avg_degree, a.feat_dim, a.num_classes, seed=0, overwrite=True)
    comm.Barrier()
    t1 = time.perf_counter()
    cfg_path = partition_graph(raw, out, a.num_parts, comm=comm, balance_ntypes=a.balance_ntypes, overwrite=True,
                               coarsen=a.coarsen)
    comm.Barrier()
    t2 = time.perf_counter()
    rss = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, root=0)
    if rank == 0:
        with open(cfg_path) as f:
            cfg = json.load(f)
        res = {
            "benchmark": "partition", "ranks": comm.Get_size(), "num_nodes": cfg["num_nodes"],
            "num_edges": cfg["num_edges"], "feat_dim": a.feat_dim, "num_parts": a.num_parts,
            "coarsen": cfg["coarsen"], "coarsening": cfg["stats"].get("coarsening", {}),
            "generate_s": round(t1 - t0, 2), "partition_s": round(t2 - t1, 2),
            "partition_phases_s": cfg["stats"]["timings_s"],
            "peak_rss_gib_per_rank": [round(x, 3) for x in rss],
            "bytes_written": cfg["stats"]["bytes_written"],
            "edge_cut_fraction": round(cfg["edge_cut"] / cfg["num_edges"], 4),
            "balance": {k: round(max(pp["weights"][k] for pp in cfg["parts"]) /
                                 (sum(pp["weights"][k] for pp in cfg["parts"]) / a.num_parts), 4)
                        for k in cfg["parts"][0]["weights"]},
        }
        if not a.skip_metis:
            cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "metis_baseline.py"), raw,
                   str(a.num_parts), "--balance", *a.balance_ntypes]
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
            m = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
            res["metis_serial"] = m
            res["speedup_vs_metis_serial"] = round(m["total_s"] / res["partition_s"], 2)
            res["cut_ratio_vs_metis"] = round(res["edge_cut_fraction"] / max(m["edge_cut_fraction"], 1e-9), 3)
            res["memory_ratio_vs_metis_serial"] = round(max(rss) / max(m["peak_rss_gib"], 1e-9), 3)
        if not a.skip_kaminpar and importlib.util.find_spec("kaminpar") is not None:
            cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "kaminpar_baseline.py"), raw,
                   str(a.num_parts)]
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
            k = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
            res["kaminpar"] = k
            res["cut_ratio_vs_kaminpar"] = round(res["edge_cut_fraction"] / max(k["edge_cut_fraction"], 1e-9), 3)
        if a.dgl_venv:
            cmd = [os.path.join(a.dgl_venv, "bin", "python"), os.path.join(os.path.dirname(__file__), "dgl_peer",
                   "partition.py"), raw, os.path.join(work, "dgl_parts"), "--parts", str(a.num_parts)]
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
            run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            d = json.loads([ln for ln in run.stdout.splitlines() if ln.startswith("{")][-1])
            res["dgl"] = d
            res["speedup_vs_dgl"] = round(d["partition_s"] / res["partition_s"], 2)
            res["memory_ratio_vs_dgl"] = round(max(rss) / max(d["peak_rss_gib"], 1e-9), 3)
        res["dgl_reference"] = DGL_REFERENCE
        res["speedup_vs_dgl_reference"] = round(DGL_REFERENCE["partition_s"] / res["partition_s"], 2)
        print(json.dumps(res), flush=True)
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    comm.Barrier()


if __name__ == "__main__":
    main()
