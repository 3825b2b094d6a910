"""Node classification on a partitioned graph, under one MPI launch: GraphSAGE by
default, or any model of the zoo (``--model gcn|gat|gin|sage-pyg``) or a user's
own ``nn.Module`` (``--model package.module:ClassName``), trained by the runtime
(:class:`~hpcgnn.train.trainer.Trainer`).

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
from ..comm.collectives import all_max, every
from ..errors import InputError
from ..graph import node_split
from ..graph.row_refs import RowRefs
from ..sampling import DistNodeDataLoader, NeighborSampler
from ..sampling.blocks import adjs_like
from .common import (check_run_dir, finalize_and_report, labelled_ids, labelled_mask, print_accuracies, run_or_exit,
                     seed_all, settings_or_exit, start)
from .common import allsum as _allsum
from .config import TrainConfig, parse_args
from .floor import model_floor
from .inference import layerwise_inference
from .trainer import Trainer
from .zoo import build_model, has_layers, input_style


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
    return all_max(tc, m) + 1


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


def _forward(model, b, device, style: str):
    """The seeds' outputs of ``model`` on batch ``b``: through the per-layer blocks,
    or the PyG way (the whole sampled graph, seeds first)."""
    if style == "edge_index":
        x = _model_input(b.x, device)
        x = x.materialize() if isinstance(x, RowRefs) else x
        return model(x, b.edge_index.to(device, non_blocking=True))[: b.batch_size]
    x = _model_input(b.x, device)
    return model(x, adjs_like(b.adjs, x))


def _predict(style: str, device):
    def predict(model, b):
        out = _forward(model, b, device, style)
        return out.argmax(1), b.y[: b.batch_size].to(out.device).long()
    return predict


def _first_step_checked(fn, cfg, tc, num_classes: int):
    """The forward ``fn(model, batch) -> output`` whose first call (every trainer's
    first step) turns a model that does not fit - a forward that fails on a batch,
    an output of the wrong shape - into one InputError on every trainer."""
    state = {"first": True}

    def call(model, b):
        if not state["first"]:
            return fn(model, b)
        state["first"] = False
        out, err = None, None
        try:
            out = fn(model, b)
        except Exception as e:                   # noqa: BLE001 - reported on every trainer below
            err = f"its forward fails on a batch ({type(e).__name__}: {e})"
        if err is None and (not isinstance(out, torch.Tensor) or out.dim() != 2 or tuple(out.shape) != (b.batch_size, num_classes)):
            err = (f"its output has shape {tuple(getattr(out, 'shape', ()))}; node classification needs one row of "
                   f"{num_classes} class scores per seed, ({b.batch_size}, {num_classes})")
        with agreed(tc):
            if err is not None:
                raise InputError(f"--model {cfg.model!r}: {err} (docs/training.md: train your own model)")
        return out
    return call


def run(cfg: TrainConfig) -> dict | None:
    """Train and evaluate; returns the final metrics on trainers (servers and
    samplers serve inside ``hpcgnn.initialize`` and never return)."""
    ctx, tc, g = start(cfg)
    train_ids, val_ids, test_ids = _check_inputs(cfg, g, tc)
    num_classes = _num_classes(g, cfg, tc)
    train_ids, val_ids, test_ids = labelled_ids(g, cfg, tc, num_classes, (train_ids, val_ids, test_ids))
    in_dim = int(g.ndata[cfg.feat].shape[1])

    seed_all(cfg.seed)
    with agreed(tc):
        model = build_model(cfg.model, in_dim, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout)
    style = input_style(model)
    meta = {"fanouts": json.dumps(cfg.fanouts), "batch_size": cfg.batch_size, "seed": cfg.seed,
            "model_name": cfg.model}
    trainer = Trainer(model, lr=cfg.lr, run_dir=cfg.run_dir, device=cfg.device, ctx=ctx,
                      checkpoint_every=cfg.checkpoint_every, max_steps=cfg.max_steps, epoch_steps=cfg.epoch_steps,
                      resume=cfg.resume, progress=cfg.progress, graph=g, meta=meta, name="hpcgnn train",
                      lr_given="lr" in getattr(cfg, "given", {"lr"}))
    device = trainer.device
    # batches (and the cache) assembled on the GPU; --sample-on device: on the CPU too (the twin)
    on_gpu = device if device.type == "cuda" or cfg.sample_on == "device" else None
    # on a GPU the trainer's own batches are sampled there too (this host's partitions)
    sampler = NeighborSampler(cfg.fanouts, device=on_gpu if cfg.sample_on != "host" else None)
    rows = _feature_rows(cfg, ctx, device) if getattr(model, "takes_row_refs", False) else "copy"
    train_loader = DistNodeDataLoader(g, train_ids, sampler, cfg.batch_size, shuffle=True, drop_last=False,
                                      seed=cfg.seed, prefetch=cfg.prefetch, feat=cfg.feat, label=cfg.label,
                                      cache_bytes=cfg.cache_bytes, device=on_gpu, labels="seeds",
                                      feature_rows=rows)
    every_trainer_has = {k: every(tc, len(ids) > 0)
                         for k, ids in (("val", val_ids), ("test", test_ids))}

    def eval_loader(ids, seed):
        return DistNodeDataLoader(g, ids, sampler, cfg.batch_size, seed=seed, prefetch=cfg.prefetch, feat=cfg.feat,
                                  label=cfg.label, device=on_gpu, labels="seeds", feature_rows=rows)
    val_loader = eval_loader(val_ids, cfg.seed + 1) if every_trainer_has["val"] else None
    predict = _predict(style, device)

    def checked(m, b):
        return _forward(m, b, device, style)
    checked = _first_step_checked(checked, cfg, tc, num_classes)

    def loss_fn(m, b):
        out = checked(m, b)
        y = b.y[: b.batch_size].long().to(device, non_blocking=True)
        return F.cross_entropy(out, y), (out.argmax(1) == y).sum(), b.batch_size

    def evaluate(epoch):
        return {"val_acc": trainer.accuracy(val_loader, predict) if val_loader is not None else None}

    fit = trainer.fit(train_loader, loss_fn, epochs=cfg.epochs,
                      evaluate=evaluate, eval_every=cfg.eval_every, eval_keys=("val_acc",),
                      describe=f"{g}, model {cfg.model}, features "
                      f"{train_loader.task.feature_rows}, sampling on {sampler.device or 'the host'}")
    if fit.stopped:
        memory = finalize_and_report(ctx, tc.Get_rank() == 0)
        return {"stopped": True, "step": fit.step, "model": model, "memory": memory}

    floor = {}
    if cfg.floor_steps:                          # the model-only floor, on the same kind of batches
        floor = model_floor(model, trainer.optimizer, eval_loader(train_ids, cfg.seed), loss_fn, cfg.floor_steps,
                            device)
    t0 = time.perf_counter()
    if has_layers(model):
        result = _layerwise_accuracy(model, g, cfg, tc, device, val_ids, test_ids)
    else:                                        # sampled neighbourhoods, as in training
        result = {"val_acc": trainer.accuracy(val_loader, predict) if val_loader is not None else None,
                  "test_acc": trainer.accuracy(eval_loader(test_ids, cfg.seed + 2), predict)
                  if every_trainer_has["test"] else None}
    result["inference_s"] = time.perf_counter() - t0
    result = trainer.finish({**result, **floor})
    first = tc.Get_rank() == 0
    result["memory"] = finalize_and_report(ctx, first)
    if first:                                    # the accuracy stays the last line
        print_accuracies(result, "no labelled nodes in the set")
    result["model"] = model
    result["epochs"] = fit.epochs
    return result


def _layerwise_accuracy(model, g, cfg, tc, device, val_ids, test_ids) -> dict:
    """Collective: validation and test accuracy of layer-wise full-graph inference."""
    logits = layerwise_inference(model, g, cfg.feat, cfg.infer_batch_size, device=device)
    result = {}
    for key, ids in (("val_acc", val_ids), ("test_acc", test_ids)):
        pred = logits[ids].argmax(1) if len(ids) else torch.zeros(0, dtype=torch.long)
        y = torch.as_tensor(g.ndata[cfg.label][ids]).long() if len(ids) else torch.zeros(0, dtype=torch.long)
        c, n = _allsum(tc, [int((pred == y).sum()), len(ids)])
        result[key] = c / n if n else None          # no labelled node in that set: no score
    logits.free()
    return result


def main(argv=None, prog: str = "node_classification.py") -> int:
    cfg = settings_or_exit(parse_args, argv, prog)
    if cfg is None:
        return 2
    return run_or_exit(run, cfg, prog)


if __name__ == "__main__":
    sys.exit(main())
