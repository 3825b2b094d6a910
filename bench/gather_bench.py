"""Random-row gather from a RowStore against ``torch.index_select`` in the same run.

A 2M x 100 float32 table (``--rows``, ``--dim``) is held by the servers of 2 virtual
nodes of server + trainer (4 ranks).  Trainer 0 gathers 10k and 100k random rows
from its own node (shared memory, direct) and from the other node (RMA), and the
same number of random rows with ``torch.index_select`` from an in-process tensor;
one thread everywhere.  The other ranks wait as servers do when serving
(``--server-wait serve``: polling MPI, sleeping only while no socket traffic comes) or
in a blocking barrier (``block``).  Prints one JSON object (ratios: > 1 is faster than
index_select).

``--feat-dtype bf16|fp16`` (issue 30) also holds the same rows rounded to that
half precision (as ``hpcgnn partition --feat-dtype`` stores features) and gathers the
same ids from both tables, interleaved repeat by repeat: under ``"half"``, the bytes
each gather moves and the time of the half gather, and of the half gather plus the
upcast to float32 that the loader does, against the float32 gather
(``time_vs_float32``: < 1 is faster), both into reused buffers.

    mpirun -n 4 --mca mpi_yield_when_idle 1 python bench/gather_bench.py
    mpirun -n 4 --mca mpi_yield_when_idle 1 python bench/gather_bench.py --rows 200000 --feat-dtype bf16
    # RMA across hosts emulated over TCP:
    HPCGNN_SHM_SCOPE=node mpirun -n 4 --mca btl self,tcp --mca osc sm,pt2pt \\
        --mca mpi_yield_when_idle 1 python bench/gather_bench.py
"""
import argparse
import json
import os
import time

import numpy as np
import torch

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm.mpi import MPI, library_version
from hpcgnn.comm.rma import datatypes
from hpcgnn.comm.progress import serve_until
from hpcgnn.comm.rma.rowstore import RowStore
from hpcgnn.partition.featdtype import NAMES, STORAGE, FeatConversion


def timed(fn, repeats):
    """Best time of ``fn(0) .. fn(repeats-1)`` (on a shared machine the minimum is the
    stable statistic; each ratio's times are the best over its block and its
    interleaved repeats)."""
    ts = []
    for i in range(repeats):
        t = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t)
    return min(ts)


def half_comparison(st, sth, logical, local_ids, remote_ids, repeats):
    """The same ids from the float32 table ``st`` and its half-precision copy ``sth``
    (``logical``: ``bfloat16`` or ``float16``), interleaved repeat by repeat, each
    into a reused buffer; the half rows also made float32 (the loader's upcast)."""
    m, d = len(local_ids[0]), st.row_shape[0]
    out32, out16 = np.empty((m, d), np.float32), np.empty((m, d), sth.dtype)
    up = torch.empty((m, d), dtype=torch.float32)
    view = torch.from_numpy(out16.view(np.int16)).view(torch.bfloat16) if logical == "bfloat16" \
        else torch.from_numpy(out16)
    res = {}
    for where, ids in (("local", local_ids), ("remote", remote_ids)):
        t = {"float32": [], "half": [], "half_upcast": []}
        for i in range(repeats):
            t["float32"].append(timed(lambda _: st.gather(ids[i], out=out32), 1))
            t["half"].append(timed(lambda _: sth.gather(ids[i], out=out16), 1))
            t["half_upcast"].append(timed(lambda _: (sth.gather(ids[i], out=out16), up.copy_(view)), 1))
        assert torch.equal(up, torch.from_numpy(out32).to(view.dtype).float())      # the rows rounded
        best = {k: min(v) for k, v in t.items()}
        res[where] = {"float32_s": round(best["float32"], 6),
                      "time_vs_float32": round(best["half"] / best["float32"], 3),
                      "with_upcast_time_vs_float32": round(best["half_upcast"] / best["float32"], 3),
                      "time_vs_float32_interleaved_median":
                          round(float(np.median(np.array(t["half"]) / np.array(t["float32"]))), 3)}
    return {"bytes_float32": int(out32.nbytes), "bytes_half": int(out16.nbytes), **res}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--server-wait", choices=("serve", "block"), default="serve",
                    help="how the other ranks wait: as servers do when serving (polling MPI, "
                         "sleeping while no socket traffic comes; default) or in a blocking barrier")
    ap.add_argument("--feat-dtype", choices=("bf16", "fp16"), default=None,
                    help="also compare a half-precision copy of the table (bytes moved, gather time)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    world = MPI.COMM_WORLD
    if world.Get_size() != 4:
        raise SystemExit("gather_bench: run with 4 ranks (2 virtual nodes of server + trainer)")
    ctx = hpcgnn.comm.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
    n, d = args.rows, args.dim
    half = n // 2
    st = RowStore.create(ctx, "bench", [0, half, n], (d,), np.float32)
    lo, hi = st.local_range
    if hi > lo:
        st.local_rows[:] = np.random.default_rng(lo).standard_normal((hi - lo, d), dtype=np.float32)
    st.barrier()
    sth = None
    if args.feat_dtype:                  # the same rows rounded, as hpcgnn partition --feat-dtype stores them
        conv = FeatConversion("feat", NAMES[args.feat_dtype], np.dtype(np.float32))
        sth = RowStore.create(ctx, "bench-half", [0, half, n], (d,), STORAGE[conv.logical])
        if hi > lo:
            sth.local_rows[:] = conv.convert(st.local_rows, "bench")
        sth.barrier()
    result = None
    if ctx.rank == ctx.ranks_of("trainer")[0]:
        ref = torch.from_numpy(np.random.default_rng(0).standard_normal((n, d), dtype=np.float32))
        mine = ctx.host_id
        rng = np.random.default_rng(1)
        result = {"bench": "gather", "rows_total": n, "dim": d, "dtype": "float32", "threads": 1,
                  "mpi": library_version(), "server_wait": args.server_wait, "shm_scope": os.environ.get("HPCGNN_SHM_SCOPE", "host"),
                  "routes": {str(k): v for k, v in st.routes().items()},
                  "datatype_builder": "ext" if datatypes._ext_hindexed_blocks is not None else "mpi4py",
                  "sizes": {}, "half": {"feat_dtype": args.feat_dtype, "sizes": {}} if sth is not None else None}
        for m in (int(s) for s in args.sizes.split(",")):
            # fresh ids every repeat (as mini-batches are): nothing stays cache-hot
            local_ids = [rng.integers(mine * half, (mine + 1) * half, m) for _ in range(args.repeats)]
            remote_ids = [rng.integers((1 - mine) * half, (2 - mine) * half, m) for _ in range(args.repeats)]
            tl_ids = [torch.from_numpy(i) for i in local_ids]
            probe = remote_ids[0][:5]
            assert np.array_equal(st.gather(probe), st.gather(probe))
            base = timed(lambda i: torch.index_select(ref, 0, tl_ids[i]), args.repeats)
            local = timed(lambda i: st.gather(local_ids[i]), args.repeats)
            remote = timed(lambda i: st.gather(remote_ids[i]), args.repeats)
            base = min(base, timed(lambda i: torch.index_select(ref, 0, tl_ids[i]), args.repeats))
            # the same three interleaved, repeat by repeat (a load burst hits all of them):
            # the median of the per-repeat ratios
            inter = {"base": [], "local": [], "remote": []}
            for i in range(args.repeats):
                inter["base"].append(timed(lambda _: torch.index_select(ref, 0, tl_ids[i]), 1))
                inter["local"].append(timed(lambda _: st.gather(local_ids[i]), 1))
                inter["remote"].append(timed(lambda _: st.gather(remote_ids[i]), 1))
            med = {k: float(np.median(np.array(inter["base"]) / np.array(inter[k]))) for k in ("local", "remote")}
            # the best of every repeat of each (blocks and interleaved alike), so that a
            # load burst over one block does not decide a ratio
            base = min(base, *inter["base"])
            local = min(local, *inter["local"])
            remote = min(remote, *inter["remote"])
            out = np.empty((m, d), np.float32)
            local_out = timed(lambda i: st.gather(local_ids[i], out=out), args.repeats)
            remote_out = timed(lambda i: st.gather(remote_ids[i], out=out), args.repeats)
            gb = m * d * 4 / 1e9
            result["sizes"][str(m)] = {
                "index_select_GBps": round(gb / base, 3),
                "local_GBps": round(gb / local, 3), "remote_GBps": round(gb / remote, 3),
                "local_ratio": round(base / local, 3), "remote_ratio": round(base / remote, 3),
                "local_ratio_out_reused": round(base / local_out, 3),
                "remote_ratio_out_reused": round(base / remote_out, 3),
                "local_ratio_interleaved_median": round(med["local"], 3),
                "remote_ratio_interleaved_median": round(med["remote"], 3),
            }
            if sth is not None:
                result["half"]["sizes"][str(m)] = half_comparison(st, sth, NAMES[args.feat_dtype], local_ids,
                                                                  remote_ids, args.repeats)
        print(json.dumps(result), flush=True)
    done = world.Ibarrier()
    if result is not None or args.server_wait == "block":
        done.Wait()          # a blocking wait spins in MPI, keeping RMA progressing
    else:                    # servers (and the idle trainer) wait as servers serve
        serve_until(done)
    ctx.finalize()


if __name__ == "__main__":
    main()
