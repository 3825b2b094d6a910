"""Node classification with GraphSAGE on a partitioned graph, under one MPI launch.

Run on every rank (``mpirun -n R python examples/node_classification.py ...`` or
``hpcgnn train ...``); servers and samplers serve inside :func:`hpcgnn.initialize`,
trainers train with DDP (gloo on CPUs, NCCL on GPUs) bootstrapped from MPI:

1. split the training, validation and test nodes over the trainers (``node_split``);
2. per epoch, train on ``DistNodeDataLoader`` mini-batches and measure the time
   spent waiting for batches, computing, and in the gradient allreduce; validate on
   sampled neighbourhoods;
3. at the end, compute every node's output by layer-wise full-graph inference and
   report validation and test accuracy.

Trainer 0 writes ``log.jsonl``, ``metrics.csv``, ``curve.png`` and the final
``model.pt`` (a ``state_dict``) to the run directory and prints ``test accuracy:``
with 4 decimals last.  Checkpoints: every ``checkpoint_every`` steps, and at the
next step after SIGUSR1/SIGTERM (then the job exits cleanly with status 0);
``--resume`` continues from the newest one.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..comm.agree import agreed
from ..comm.mpi import LOCK, MPI
from ..errors import InputError
from ..graph import node_split
from ..graph.row_refs import RowRefs
from ..sampling import DistNodeDataLoader, NeighborSampler
from .common import (check_run_dir, labelled_ids, labelled_mask, partitions_digest, pick_device,
                     print_accuracies, run_or_exit, seed_all, settings_or_exit, start, wrap_ddp)
from .common import allreduce as _allreduce
from .common import allsum as _allsum
from .config import TrainConfig, parse_args
from .inference import layerwise_inference
from .loop import Checkpoints, progress_bar, run_steps, stop_message
from .model import SAGE
from .runlog import RunLog


def _is_integer(dtype) -> bool:
    if isinstance(dtype, torch.dtype):
        return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
    return np.dtype(dtype).kind in "iu"


def _check_inputs(cfg: TrainConfig, g, tc) -> tuple:
    """Every trainer raises the same InputError before any training step."""
    with agreed(tc):
        for key in ("feat", "label", "train_mask", "val_mask", "test_mask"):
            name = getattr(cfg, key)
            if name not in g.ndata:
                raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} has no node feature {name!r} "
                                 f"(setting {key}); it has {sorted(g.ndata)}")
        feat, label = g.ndata[cfg.feat], g.ndata[cfg.label]
        if len(feat.shape) != 2:
            raise InputError(f"{cfg.part_config}: node feature {cfg.feat!r} (setting feat) has shape "
                             f"{tuple(feat.shape)}; it must be one row of features per node (2-D)")
        if len(label.shape) != 1 or not _is_integer(label.dtype):
            raise InputError(f"{cfg.part_config}: node feature {cfg.label!r} (setting label) has shape "
                             f"{tuple(label.shape)} and dtype {label.dtype}; it must be one integer class per node")
        if g.edge_dir != "in":
            raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} was partitioned with edge_dir="
                             f"{g.edge_dir!r}; training samples in-edges: repartition it with --edge-dir in")
        if tc.Get_rank() == 0:
            check_run_dir(cfg.run_dir)
    book = g.get_partition_book()
    masks = {}
    with agreed(tc):
        for key in ("train_mask", "val_mask", "test_mask"):
            _check_mask(g, cfg, key, tc)
            masks[key] = node_split(labelled_mask(g, getattr(cfg, key), cfg.label), book).numpy()
        total = int(_allsum(tc, [len(masks["train_mask"])])[0])
        if total < tc.Get_size():
            raise InputError(f"{cfg.part_config}: {total} training nodes ({cfg.train_mask}) for "
                             f"{tc.Get_size()} trainers; every trainer needs at least one")
    return masks["train_mask"], masks["val_mask"], masks["test_mask"]


def _check_mask(g, cfg, key: str, tc) -> None:
    """A mask setting must name a 0/1 column (a label or feature column would make
    every nonzero node a training node); this trainer checks its slice of it."""
    name = getattr(cfg, key)
    col = g.ndata[name]
    if col.dtype == torch.bool:
        return
    if len(col.shape) != 1 or not _is_integer(col.dtype):
        raise InputError(f"{cfg.part_config}: node data {name!r} (setting {key}) has shape {tuple(col.shape)} "
                         f"and dtype {col.dtype}; a mask is one 0/1 value per node")
    n, r, T = g.num_nodes(), tc.Get_rank(), tc.Get_size()
    lo, hi = n * r // T, n * (r + 1) // T
    v = np.asarray(col[np.arange(lo, hi)]) if hi > lo else np.zeros(0, np.int8)
    bad = np.flatnonzero((v != 0) & (v != 1))
    if len(bad):
        raise InputError(f"{cfg.part_config}: node data {name!r} (setting {key}) is not a 0/1 mask: value "
                         f"{v[bad[0]]} at node {lo + int(bad[0])}")


def _num_classes(g, cfg, tc) -> int:
    pc = g.get_partition_config()
    n = pc.get("num_classes") or pc.get("attrs", {}).get("num_classes")
    if n:
        return int(n)
    lab = g.ndata[cfg.label]
    lo, hi = g.num_nodes() * tc.Get_rank() // tc.Get_size(), g.num_nodes() * (tc.Get_rank() + 1) // tc.Get_size()
    m = int(torch.as_tensor(lab[np.arange(lo, hi)]).max().item()) if hi > lo else 0
    with LOCK:
        return int(tc.allreduce(m, op=MPI.MAX)) + 1


def _feature_rows(cfg: TrainConfig, ctx, device) -> str:
    """``cfg.feature_rows``, with ``auto`` decided: ``refs`` on a CPU when the
    loader has no core of its own (fewer than 2 cores per rank on this node, or no
    prefetch thread): the first layer then reads the rows in place, sparing the
    copy; else ``copy`` (the gather stays on the loader's thread, off the step)."""
    if device.type != "cpu":
        return "copy"
    if cfg.feature_rows != "auto":
        return cfg.feature_rows
    per_rank = (os.cpu_count() or 1) / max(1, ctx.local_size)
    return "refs" if cfg.prefetch == 0 or per_rank < 2 else "copy"


def _model_input(x, device):
    """A batch's ``x`` as the model takes it: rows read in place stay so on a CPU."""
    if isinstance(x, RowRefs) and x.dtype == torch.float32 and device.type == "cpu":
        return x
    if isinstance(x, RowRefs):
        x = x.materialize()
    return x.float().to(device, non_blocking=True)


@torch.no_grad()
def _sampled_accuracy(model, loader, device) -> tuple[int, int]:
    model.eval()
    correct = total = 0
    for b in loader:
        if b.extra.get("padding"):       # repeats this trainer's ids: counted once only
            continue
        out = model(_model_input(b.x, device), b.edge_index.to(device, non_blocking=True),
                    b.num_sampled_nodes, b.num_sampled_edges)
        # b.y lives where the loader assembled the batch (the GPU when device is cuda)
        correct += int((out.argmax(1) == b.y[: b.batch_size].to(out.device).long()).sum())
        total += b.batch_size
    model.train()
    return correct, total


def run(cfg: TrainConfig) -> dict | None:
    """Train and evaluate; returns the final metrics on trainers (servers and
    samplers serve inside ``hpcgnn.initialize`` and never return)."""
    ctx, tc, g = start(cfg)
    me = tc.Get_rank()
    name = g.graph_name
    train_ids, val_ids, test_ids = _check_inputs(cfg, g, tc)
    num_classes = _num_classes(g, cfg, tc)
    train_ids, val_ids, test_ids = labelled_ids(g, cfg, tc, num_classes, (train_ids, val_ids, test_ids))
    in_dim = int(g.ndata[cfg.feat].shape[1])

    seed_all(cfg.seed)
    model = SAGE(in_dim, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout)
    device = pick_device(cfg.device, ctx)
    ddp, timer, backend = wrap_ddp(ctx, model, device)
    opt = torch.optim.Adam(ddp.parameters(), lr=cfg.lr)
    sampler = NeighborSampler(cfg.fanouts)
    on_gpu = device if device.type == "cuda" else None     # batches (and the cache) assembled on the GPU
    rows = _feature_rows(cfg, ctx, device)
    train_loader = DistNodeDataLoader(g, train_ids, sampler, cfg.batch_size, shuffle=True, drop_last=False,
                                      seed=cfg.seed, prefetch=cfg.prefetch, feat=cfg.feat, label=cfg.label,
                                      cache_bytes=cfg.cache_bytes, device=on_gpu, labels="seeds",
                                      feature_rows=rows)
    with LOCK:
        every_trainer_has_val = tc.allreduce(int(len(val_ids) > 0), op=MPI.MIN) == 1
    val_loader = DistNodeDataLoader(g, val_ids, sampler, cfg.batch_size, seed=cfg.seed + 1,
                                    prefetch=cfg.prefetch, feat=cfg.feat, label=cfg.label, device=on_gpu,
                                    labels="seeds", feature_rows=rows) \
        if every_trainer_has_val else None      # else validation comes from the final inference only
    meta = {"graph_name": name, "num_nodes": g.num_nodes(), "num_edges": g.num_edges(),
            "partitions": partitions_digest(g),
            "model": json.dumps({"dims": model.dims, "kind": "SAGE"}), "fanouts": json.dumps(cfg.fanouts),
            "batch_size": cfg.batch_size, "seed": cfg.seed, "trainers": tc.Get_size()}

    ckpt = Checkpoints(tc, cfg.run_dir, meta, model, opt, train_loader)
    step, start_epoch, resumed_from = ckpt.start(cfg)
    log = RunLog(cfg.run_dir, me == 0, append=resumed_from is not None, keep_before=start_epoch)
    if me == 0:
        print(f"hpcgnn train: {g}, {tc.Get_size()} trainer(s), backend {backend}, layout '{ctx.layout}', "
              f"loader mode {train_loader.mode}, features {train_loader.task.feature_rows}, "
              f"{len(train_loader)} steps/epoch"
              + (f", resumed from {resumed_from} at step {step}" if resumed_from else ""), flush=True)

    def train_step(b):
        out = ddp(_model_input(b.x, device), b.edge_index.to(device, non_blocking=True),
                  b.num_sampled_nodes, b.num_sampled_edges)
        y = b.y[: b.batch_size].long().to(device, non_blocking=True)
        loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, (out.argmax(1) == y).sum(), b.batch_size

    stopped = False
    epoch_rows = []
    for epoch in range(start_epoch, cfg.epochs):
        t_epoch = time.perf_counter()
        timer.seconds = 0.0
        r = run_steps(train_loader, train_step, tc, cfg, step, ckpt,
                      bar=progress_bar(cfg, me == 0, len(train_loader), epoch))
        step, stopped = r.step, r.stopped
        if stopped and not r.epoch_complete:
            break
        st = train_loader.stats
        tot = _allsum(tc, [r.loss_sum, r.correct, r.seen, st["sampled_edges"]])
        slow = _allreduce(tc, [time.perf_counter() - t_epoch, st["wait_s"], r.compute_s, timer.seconds,
                               st["sample_s"], st["fetch_s"]], MPI.MAX)
        row = {"epoch": epoch, "loss": tot[0] / max(tot[2], 1), "train_acc": tot[1] / max(tot[2], 1),
               "val_acc": None, "epoch_s": slow[0], "steps": st["batches"],
               "sampled_edges_per_s": tot[3] / max(slow[0], 1e-9),
               "wait_s": slow[1], "compute_s": slow[2], "allreduce_s": slow[3],
               "sample_s": slow[4], "fetch_s": slow[5]}
        if cfg.cache_bytes:         # of the feature rows held on other nodes, the share the cache served
            c = _allsum(tc, [st["cache_hits"], st["cache_remote_lookups"]])
            row["cache_hit_rate"] = c[0] / max(c[1], 1)
        if val_loader is not None and cfg.eval_every > 0 and (epoch + 1) % cfg.eval_every == 0:
            c, n = _sampled_accuracy(model, val_loader, device)
            c, n = _allsum(tc, [c, n])
            row["val_acc"] = c / max(n, 1)
        if me == 0:
            print(json.dumps({"kind": "epoch", **row}), flush=True)
        log.epoch(row)
        epoch_rows.append(row)
        if stopped:                 # stopped on the epoch's last step: closed, now stop
            break

    if stopped:
        log.flush()
        if me == 0:
            print(stop_message("hpcgnn train", step, cfg), flush=True)
        ctx.finalize()
        return {"stopped": True, "step": step, "model": model}

    t0 = time.perf_counter()
    logits = layerwise_inference(model, g, cfg.feat, cfg.infer_batch_size, device=device)
    result = {}
    for key, ids in (("val_acc", val_ids), ("test_acc", test_ids)):
        pred = logits[ids].argmax(1) if len(ids) else torch.zeros(0, dtype=torch.long)
        y = torch.as_tensor(g.ndata[cfg.label][ids]).long() if len(ids) else torch.zeros(0, dtype=torch.long)
        c, n = _allsum(tc, [int((pred == y).sum()), len(ids)])
        result[key] = c / n if n else None          # no labelled node in that set: no score
    logits.free()
    result["inference_s"] = time.perf_counter() - t0
    if me == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(cfg.run_dir, "model.pt"))
    result["steps"] = step
    log.final(result)
    if me == 0:
        print(json.dumps({"kind": "final", **result}), flush=True)
        print_accuracies(result, "no labelled nodes in the set")
    ctx.finalize()
    result["model"] = model
    result["epochs"] = epoch_rows
    return result


def main(argv=None, prog: str = "node_classification.py") -> int:
    cfg = settings_or_exit(parse_args, argv, prog)
    if cfg is None:
        return 2
    return run_or_exit(run, cfg, prog)


if __name__ == "__main__":
    sys.exit(main())
