"""``hpcgnn convert``: convert an OGB dataset directory or an edge list to the raw format.

The converters run in one process (under ``mpirun`` rank 0 converts and the other
ranks wait).  They stream their input, so memory stays bounded by the arrays that
the raw format holds per node (labels, masks) and one block of rows.
"""
from __future__ import annotations

import argparse
import time

from ..comm.mpi import world
from ..datasets.convert import convert_edges, convert_ogb


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="source", metavar="SOURCE", required=True)
    o = sub.add_parser("ogb", help="an OGB node-property dataset directory (e.g. dataset/ogbn_arxiv)",
                       description="Convert DIR/raw/*.csv.gz (edge, num-node-list, num-edge-list, and if "
                                   "present node-feat, edge-feat, node-label) and DIR/split/<split>/"
                                   "{train,valid,test}.csv.gz.")
    o.add_argument("dir", help="dataset directory holding raw/ (and split/)")
    o.add_argument("out", help="output raw HDF5 file")
    o.add_argument("--split", default=None, help="split directory name under DIR/split (default: the only one)")
    e = sub.add_parser("edges", help="an edge list: .npy [E,2] or [2,E], CSV/TSV (optionally .gz), parquet",
                       description="Convert an edge list to a raw file holding only the edges.")
    e.add_argument("file", help="edge-list file")
    e.add_argument("out", help="output raw HDF5 file")
    e.add_argument("--format", dest="fmt", choices=("npy", "csv", "parquet"), default=None,
                   help="input format (default: from the file name)")
    e.add_argument("--num-nodes", type=int, default=None, help="number of nodes (default: largest id + 1)")
    e.add_argument("--src-col", default=None, help="source column: name (CSV header, parquet) or 0-based index")
    e.add_argument("--dst-col", default=None, help="destination column: name or 0-based index")
    for q in (o, e):
        q.add_argument("--name", default=None, help="graph_name attribute (default: from the input name)")
        q.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


def run(args: argparse.Namespace) -> int:
    comm = world()
    t0 = time.perf_counter()
    if args.source == "ogb":
        info = convert_ogb(args.dir, args.out, split=args.split, name=args.name, overwrite=args.overwrite,
                           comm=comm)
    else:
        info = convert_edges(args.file, args.out, fmt=args.fmt, num_nodes=args.num_nodes, src_col=args.src_col,
                             dst_col=args.dst_col, name=args.name, overwrite=args.overwrite, comm=comm)
    if comm.Get_rank() == 0:
        print(f"hpcgnn convert: wrote {info['path']}: {info['num_nodes']} nodes, {info['num_edges']} edges "
              f"in {time.perf_counter() - t0:.1f} s")
    return 0
