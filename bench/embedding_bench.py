"""SparseAdagrad on a DistEmbedding: rows updated per second, against the same
update done in-process on a local tensor (same run, one thread).

    mpirun -n 4 python bench/embedding_bench.py      # 2 virtual nodes of server + trainer

Trainers update random batches of rows (half on their own node, half remote, at
random) of a 1M x 100 table; the baseline applies the identical Adagrad arithmetic
to an in-process tensor with index operations.  Prints one JSON object.
"""
import argparse
import json
import time

import numpy as np
import torch

import hpcgnn
from hpcgnn.graph import DistEmbedding, SparseAdagrad


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(1)
    ctx = hpcgnn.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
    emb = DistEmbedding(a.rows, a.dim, name="bench_emb")
    opt = SparseAdagrad([emb], lr=0.01)
    rng = np.random.default_rng(ctx.rank)
    batches = [torch.from_numpy(rng.integers(0, a.rows, a.batch)) for _ in range(a.steps)]
    grads = [torch.randn(a.batch, a.dim) for _ in range(a.steps)]

    def dist_step(i):
        rows = emb(batches[i])
        rows.backward(grads[i])
        opt.step()

    ctx.trainer_comm.Barrier()
    t0 = time.perf_counter()
    for i in range(a.steps):
        dist_step(i)
    t_dist = time.perf_counter() - t0

    w = torch.zeros(a.rows, a.dim)
    state = torch.zeros(a.rows, a.dim)

    def local_step(i):
        ids = batches[i]
        uids, inv = torch.unique(ids, return_inverse=True)
        g = torch.zeros(len(uids), a.dim).index_add_(0, inv, grads[i])
        s = state[uids] + g * g
        state[uids] = s
        w.index_add_(0, uids, -0.01 * g / (s.sqrt() + 1e-10))

    t0 = time.perf_counter()
    for i in range(a.steps):
        local_step(i)
    t_local = time.perf_counter() - t0
    rows = a.steps * a.batch
    res = ctx.trainer_comm.gather({"dist_rows_per_s": rows / t_dist, "local_rows_per_s": rows / t_local}, root=0)
    if ctx.trainer_comm.Get_rank() == 0:
        d = sum(r["dist_rows_per_s"] for r in res) / len(res)
        l_ = sum(r["local_rows_per_s"] for r in res) / len(res)
        print(json.dumps({"benchmark": "sparse_adagrad", "trainers": len(res), "rows": a.rows, "dim": a.dim,
                          "batch": a.batch, "dist_rows_per_s_per_trainer": round(d),
                          "local_rows_per_s": round(l_), "ratio_vs_local": round(d / l_, 3)}), flush=True)
    ctx.finalize()


if __name__ == "__main__":
    main()
