"""``hpcgnn generate``: write a synthetic class-structured graph in the raw format
(``--hetero``: a MAG-like graph with paper/author/institution/field nodes).

Parallel: run it under ``mpirun -n R`` / ``srun``; every rank generates and writes
its own run of chunks.  The file is the same for any ``R``.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..comm.agree import agreed_over
from ..comm.mpi import world
from ..comm.rss import rss_summary
from ..datasets.synthetic import CHUNK_NODES, DEFAULT_NOISE, generate_graph
from ..datasets.synthetic_hetero import DEFAULT_NOISE as HETERO_NOISE
from ..datasets.synthetic_hetero import generate_hetero_graph
from ..errors import HpcgnnError, InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="output raw HDF5 file (written as OUT.partial, renamed when complete)")
    p.add_argument("--num-nodes", type=int, required=True, help="number of nodes N")
    p.add_argument("--avg-degree", type=float, required=True,
                   help="mean out-degree D (edges = about N*D); with --hetero the mean number of papers a "
                        "paper cites")
    p.add_argument("--feat-dim", type=int, required=True, help="node feature dimension F")
    p.add_argument("--num-classes", type=int, required=True, help="number of classes C")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--homophily", type=float, default=0.5,
                   help="fraction of edges that stay inside the source's class (default 0.5)")
    p.add_argument("--noise", type=float, default=None,
                   help=f"std of the Gaussian feature noise around unit class centroids (default {DEFAULT_NOISE}: "
                        f"a linear model on features alone gets about 47%% with 16 classes; {HETERO_NOISE} "
                        "with --hetero: about 45%% with 8 classes, 31%% with 16)")
    p.add_argument("--train-frac", type=float, default=0.6, help="fraction of nodes in train_mask (default 0.6)")
    p.add_argument("--val-frac", type=float, default=0.2, help="fraction of nodes in val_mask (default 0.2)")
    p.add_argument("--test-frac", type=float, default=0.2, help="fraction of nodes in test_mask (default 0.2)")
    p.add_argument("--edge-feat", action="store_true", help="also write /edges/data/weight (float32, in (0, 1])")
    p.add_argument("--self-loops", action="store_true",
                   help="also give every node an edge to itself (DGL's add_self_loop: GraphConv and GATConv "
                        "refuse nodes without in-edges)")
    p.add_argument("--hetero", action="store_true",
                   help="write a MAG-like heterogeneous graph: paper, author, institution and field nodes, "
                        "7 relations (reverses included), features and labels on papers only")
    p.add_argument("--name", default=None,
                   help="graph_name attribute (default 'synthetic', or 'mag' with --hetero)")
    p.add_argument("--chunk-nodes", type=int, default=CHUNK_NODES,
                   help=f"nodes per generator chunk (default {CHUNK_NODES}); part of the graph's identity, "
                        "like the seed")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary on rank 0 (with every rank's peak resident memory)")


def run(args: argparse.Namespace) -> int:
    comm = world()
    common = dict(homophily=args.homophily, train_frac=args.train_frac, val_frac=args.val_frac,
                  test_frac=args.test_frac, chunk_nodes=args.chunk_nodes, overwrite=args.overwrite)
    if args.noise is not None:
        common["noise"] = args.noise
    if args.name is not None:
        common["name"] = args.name
    for flag in ("edge_feat", "self_loops"):
        if args.hetero and getattr(args, flag):
            raise InputError(f"generate: argument --{flag.replace('_', '-')}: not supported with --hetero")
    try:
        if args.hetero:
            info = generate_hetero_graph(args.out, comm, args.num_nodes, args.avg_degree, args.feat_dim,
                                         args.num_classes, args.seed, **common)
        else:
            info = generate_graph(args.out, comm, args.num_nodes, args.avg_degree, args.feat_dim,
                                  args.num_classes, args.seed, edge_feat=args.edge_feat,
                                  self_loops=args.self_loops, **common)
    except HpcgnnError as e:
        if not agreed_over(e, comm):
            raise
        # raised alike on every rank (a full disk, bad parameters): each says so, all exit 1
        sys.stderr.write(f"hpcgnn generate: error (rank {comm.Get_rank()}/{comm.Get_size()}): {e}\n")
        sys.stderr.flush()
        return 1
    memory = rss_summary(comm)
    if comm.Get_rank() == 0 and args.json:
        print(json.dumps({**{k: v for k, v in info.items() if isinstance(v, (int, float, str, dict))}, **memory}))
    elif comm.Get_rank() == 0:
        print(f"hpcgnn generate: wrote {info['path']}: {info['num_nodes']} nodes, {info['num_edges']} edges, "
              f"{info['feat_dim']} features, {info['num_classes']} classes in {info['seconds']:.1f} s "
              f"on {info['ranks']} rank(s)")
        if args.hetero:
            print("  nodes per type: " + ", ".join(f"{k} {v}" for k, v in info["nodes_per_type"].items()))
            print("  edges per type: " + ", ".join(f"{k} {v}" for k, v in info["edges_per_type"].items()))
    return 0
