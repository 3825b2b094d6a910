"""``hpcgnn partition``: partition a raw graph file into one parallel-HDF5 file.

Run under ``mpirun -n R`` / ``srun -n R`` (any ``R``, independent of the number of
parts).  Writes ``OUT/<graph_name>.h5`` and, last, ``OUT/<graph_name>.json``.
"""
from __future__ import annotations

import json
import sys

from ..comm.mpi import MPI
from ..errors import HpcgnnError, InputError


def add_arguments(p) -> None:
    p.add_argument("input", help="raw graph file (HDF5, docs/format-raw.md)")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("-k", "--num-parts", type=int, required=True, help="number of partitions")
    p.add_argument("--graph-name", default=None, help="name of the output files (default: the input's)")
    p.add_argument("--method", choices=["parmetis", "metis", "random", "frequency"], default="parmetis",
                   help="partitioning method (default parmetis; metis is an alias; frequency: seeds by hash, "
                        "every other node with the partition whose seeds read it most)")
    p.add_argument("--refine", choices=["none", "frequency"], default="none",
                   help="after parmetis/random: move non-seed nodes to the partition whose seeds read them most "
                        "(hotness-aware placement, see docs/partitioning.md)")
    p.add_argument("--fanouts", default="25,10",
                   help="the sampler the frequency placement is for: neighbours per hop, seeds first (default 25,10)")
    p.add_argument("--seeds", default="train_mask",
                   help="node mask of the nodes trainers sample from (default train_mask)")
    p.add_argument("--balance-ntypes", nargs="+", default=[], metavar="DATASET",
                   help="node datasets to balance, e.g. train_mask (each becomes a constraint)")
    p.add_argument("--balance-edges", action="store_true", help="balance the degree of the partitions too")
    p.add_argument("--num-hops", type=int, default=1, help="halo depth (default 1)")
    p.add_argument("--edge-dir", choices=["in", "out"], default="in",
                   help="store edges with their destination (in, default) or source (out)")
    p.add_argument("--return-mapping", action="store_true", help="store the original node and edge ids")
    p.add_argument("--seed", type=int, default=0, help="ParMETIS / random seed (default 0)")
    p.add_argument("--coarsen", choices=["auto", "none", "lp"], default="auto",
                   help="coarsening before ParMETIS: lp (levels of label-propagation clusters, ParMETIS on the "
                        "coarsest graph), none (ParMETIS on the whole graph), or auto (default: lp from 1M nodes "
                        "on); see docs/partitioning.md")
    p.add_argument("--ubvec", type=float, default=1.05, help="allowed imbalance per constraint (default 1.05)")
    p.add_argument("--feat-dtype", choices=["bf16", "fp16", "float32"], default=None,
                   help="store the node features (--feat-fields) at this dtype: bf16 or fp16 halve the file, the "
                        "servers' memory and the bytes every gather moves; trainers still get float32 batch.x "
                        "(default: the raw dtype; see docs/partitioning.md)")
    p.add_argument("--feat-fields", default="feat",
                   help="comma-separated node data that --feat-dtype converts (floating; default feat)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a partitioned graph already in the output directory")
    p.add_argument("--json", action="store_true", help="print a JSON summary on rank 0")


def _fanouts(text: str, rank: int) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise InputError(f"--fanouts: {text!r} must be comma-separated integers, e.g. 25,10 (rank {rank})") from None


def _coarse(info: dict) -> dict:
    """The graph ParMETIS partitioned after ``--coarsen lp`` (none without it): its
    vertices and adjacency entries, the clustering's levels with their sizes, and each
    rank's work clustering across rank blocks (adjacency entries scanned, values sent to
    other ranks and their parts, exchanges; lists in rank order: docs/partitioning.md),
    and the start from id ranges: its cut before refining (edges counted from both ends)
    and whether it was kept."""
    if not info:
        return {}
    return {"coarse_nodes": info["clusters"], "coarse_edges": info["cluster_edges"],
            "coarsening_levels": info["levels"], "coarsening_work": info.get("per_rank", {}),
            "id_range_cut": info.get("id_range_cut"), "id_ranges_kept": info.get("id_ranges_kept")}


def run(args) -> int:
    from ..partition.pipeline import partition_graph   # when run: other commands do not load the partitioner

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        path = partition_graph(args.input, args.out, args.num_parts, graph_name=args.graph_name, comm=comm,
                               part_method=args.method, balance_ntypes=args.balance_ntypes,
                               balance_edges=args.balance_edges, num_hops=args.num_hops,
                               edge_dir=args.edge_dir, return_mapping=args.return_mapping, seed=args.seed,
                               ubvec=args.ubvec, overwrite=args.overwrite,
                               coarsen=args.coarsen, refine=args.refine, fanouts=_fanouts(args.fanouts, rank),
                               seeds=args.seeds, feat_dtype=args.feat_dtype,
                               feat_fields=[f for f in args.feat_fields.replace(" ", "").split(",") if f])
    except HpcgnnError as e:
        # Agreed errors: every rank holds the same error; each prints it, all exit 1.
        sys.stderr.write(f"hpcgnn partition: error (rank {rank}/{comm.Get_size()}): {e}\n")
        sys.stderr.flush()
        return 1
    if rank == 0:
        with open(path) as f:
            conf = json.load(f)
        summary = {"config": path, "num_parts": conf["num_parts"], "num_nodes": conf["num_nodes"],
                   "num_edges": conf["num_edges"], "edge_cut": conf["edge_cut"],
                   "timings_s": conf["stats"]["timings_s"],
                   **{k: conf["stats"][k] for k in ("peak_rss_bytes_max_rank", "peak_rss_bytes_sum",
                                                    "peak_rss_bytes_per_rank", "memory_by_phase")},
                   **_coarse(conf["stats"].get("coarsening") or {})}
        if args.json:
            print(json.dumps(summary))
        else:
            print(f"partitioned {conf['graph_name']}: {conf['num_nodes']} nodes, {conf['num_edges']} edges "
                  f"into {conf['num_parts']} parts, edge cut {conf['edge_cut']}; wrote {path}")
    return 0

