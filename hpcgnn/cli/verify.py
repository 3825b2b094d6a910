"""``hpcgnn verify CONFIG.json``: check a partitioned graph without training.

Checks the JSON's digest (was it edited after partitioning?) and totals, each
partition group's counts against the JSON, the node and edge data's dtypes (and
the logical dtype of half-precision features) against the JSON, and every dataset
against the JSON's checksum.  Under ``mpirun -n R`` rank ``r`` reads partitions
``r, r + R, ...``; one rank reads them all.  Rank 0 prints one line per problem (file, dataset, partition),
then one JSON summary line; the exit status is 0 when nothing was found, 1
otherwise.  ``HPCGNN_VERIFY=0`` does not apply here: this command always checks.

``--raw RAW.h5`` adds the streaming check of the partitions against the raw graph
they were made from (:mod:`hpcgnn.partition.check`: every edge once, one owner per
node, node and edge data under the mapping; needs ``--return-mapping``): a problem is
printed by every rank on stderr, one line, and counted in the summary.  ``--json``
adds every rank's peak resident memory and the check's times to the summary.
"""
from __future__ import annotations

import json
import os
import sys
import time

import h5py

from ..comm.agree import agreed, agreed_over
from ..comm.mpi import MPI
from ..comm.rss import rss_summary
from ..errors import HpcgnnError
from ..io.h5 import open_h5
from ..partition.book import RangePartitionBook
from ..partition.check import CHUNK_ROWS, check_partition_stream
from ..partition.config import content_problems, read_config
from ..partition.verify import dataset_problem, dtype_problems, expected, structure_problems


def add_arguments(p) -> None:
    p.add_argument("config", help="partition configuration <out>/<graph_name>.json")
    p.add_argument("--raw", default=None, metavar="RAW_FILE",
                   help="also check the partitions against this raw graph, streaming (every edge once, one "
                        "owner per node, node and edge data under the mapping; needs --return-mapping)")
    p.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS,
                   help=f"rows each rank reads at a time in the --raw check (default {CHUNK_ROWS})")
    p.add_argument("--json", action="store_true",
                   help="add every rank's peak resident memory and the --raw check's times to the summary line")


def verify_parts(conf: dict, config: str, h5: str, parts) -> tuple[list[tuple[int, str]], int, int]:
    """Independent: ``(problems as (partition, line), datasets checked, bytes read)``
    for partitions ``parts`` of the graph ``conf`` describes (the JSON ``config``)."""
    book = RangePartitionBook(conf, 0)
    problems: list[tuple[int, str]] = []
    checked = nbytes = 0
    try:
        f = open_h5(h5, "r")
    except OSError as e:
        return [(-1, f"{h5}: cannot open the partition file named by {config} ({e})")], 0, 0
    with f:
        for p in parts:
            nodes = tuple(int(v) for v in book.node_ranges[p])
            edges = tuple(int(v) for v in book.edge_ranges[p])
            problems += [(p, line) for line in structure_problems(f, p, nodes, edges, h5, config)]
            grp = f.get(f"part{p}")
            want = expected(conf, p)
            if want is None:
                problems.append((p, f"{config}: no 'checksums' of a known algorithm: the datasets of partition "
                                    f"{p} cannot be checked"))
            if grp is not None:
                problems += [(p, line) for line in dtype_problems(grp, p, conf, h5, config)]
            if grp is None or want is None:
                continue                       # a missing group is a structure problem already
            for name in sorted(want):
                line = dataset_problem(grp, p, name, want[name], h5, config)
                if line:
                    problems.append((p, line))
                d = grp.get(name)
                if isinstance(d, h5py.Dataset):
                    checked += 1
                    nbytes += int(d.size) * d.dtype.itemsize
    return problems, checked, nbytes


def run(args) -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    try:
        with agreed(comm):
            conf, base = read_config(args.config, strict=False)
            book = RangePartitionBook(conf, 0)
    except (HpcgnnError, ValueError) as e:
        if rank == 0:                          # the JSON cannot be read: that one problem
            print(str(e), flush=True)
            print(json.dumps({"kind": "verify", "config": os.path.abspath(args.config), "ok": False,
                              "problems": 1}), flush=True)
        return 1
    h5 = os.path.join(base, conf["h5_file"])
    mine = range(rank, book.num_partitions(), size)
    local = verify_parts(conf, args.config, h5, mine)
    found = comm.gather(local, root=0)
    extra = _stream(comm, args) if getattr(args, "raw", None) else {}
    if getattr(args, "json", False):
        extra.update(rss_summary(comm))
    code = 0
    if rank == 0:
        code = _report(args.config, h5, conf, found, size, time.perf_counter() - t0, extra)
    return comm.bcast(code, root=0)


def _stream(comm, args) -> dict:
    """Collective: the streaming check against ``args.raw``; its summary (``raw_check``)
    and, when it failed, its one line (``raw_problem``), which every rank prints."""
    try:
        got = check_partition_stream(args.raw, args.config, comm, getattr(args, "chunk_rows", CHUNK_ROWS))
    except HpcgnnError as e:
        if not agreed_over(e, comm):
            raise
        sys.stderr.write(f"hpcgnn verify: error (rank {comm.Get_rank()}/{comm.Get_size()}): {e}\n")
        sys.stderr.flush()
        return {"raw": os.path.abspath(args.raw), "raw_problem": str(e)}
    keep = ["ok", "num_nodes", "num_edges", "fields", "half_precision", "bytes_read", "seconds", "chunk_rows"]
    if getattr(args, "json", False):
        keep += ["nodes_s", "edges_s"]
    return {"raw": got["raw"], "raw_check": {k: got[k] for k in keep}}


def _report(config: str, h5: str, conf: dict, found: list, ranks: int, seconds: float, extra: dict) -> int:
    """Rank 0: print the problems (the JSON's first, then by partition), and the summary
    (with ``extra``: the streaming check's result, the memory)."""
    lines = content_problems(config, conf)
    lines += [line for _, line in sorted({pl for problems, _, _ in found for pl in problems})]
    for line in lines:
        print(line, flush=True)
    problems = len(lines) + ("raw_problem" in extra)
    summary = {"kind": "verify", "config": os.path.abspath(config), "h5_file": h5,
               "num_parts": conf["num_parts"], "ranks": ranks, "datasets": sum(n for _, n, _ in found),
               "bytes": sum(b for _, _, b in found), "problems": problems, "ok": not problems,
               "seconds": round(seconds, 3), **extra}
    print(json.dumps(summary), flush=True)
    return 0 if not problems else 1
