"""Node classification on a heterogeneous graph with an R-GCN (``--model rgat``: an
R-GAT), under one MPI launch, trained by the runtime (:class:`~hpcgnn.train.trainer.Trainer`).

Run on every rank (``mpirun -n R python examples/rgcn.py ...`` or ``hpcgnn train
--task rgcn ...``).  The seeds are the nodes of one type (``seed_type``, default:
the type the label describes) whose training mask is set; each hop samples up to
``fanouts[h]`` in-edges of *every* edge type per node (DGL's rule for an int
fanout on a heterogeneous graph); batches are split by type
(:meth:`~hpcgnn.sampling.MiniBatch.to_hetero`) and fed to
:class:`~hpcgnn.train.hetero_model.RGCN` trained with DDP.  Types without features
start from learned vectors.  Validation and test accuracy are measured on sampled
neighbourhoods of the validation and test seeds (every trainer its share).

Trainer 0 writes ``log.jsonl``/``metrics.csv``/``curve.png`` and ``model.pt`` to the
run directory and prints ``test accuracy:`` last.  Checkpoints, ``--resume`` and
SIGUSR1/SIGTERM behave as in :mod:`hpcgnn.train.node_classification`.
"""
from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import torch.nn.functional as F

from ..comm.agree import agreed
from ..comm.collectives import allgather
from ..errors import InputError
from ..graph import node_split
from ..sampling import DistNodeDataLoader, NeighborSampler
from .common import (allsum, check_run_dir, finalize_and_report, labelled_ids, labelled_mask, print_accuracies,
                     run_or_exit, seed_all, settings_or_exit, start)
from .config import HELP, TrainConfig, parse_settings
from .hetero_model import RGCN
from .trainer import Trainer


@dataclasses.dataclass
class RGCNConfig(TrainConfig):
    fanouts: list = dataclasses.field(default_factory=lambda: [10, 10])
    hidden: int = 64
    batch_size: int = 256
    lr: float = 0.01
    seed_type: str = ""
    run_dir: str = "runs/rgcn"
    model: str = "rgcn"


RGCN_HELP = dict(HELP, seed_type="node type to classify (default: the type the label describes)",
                 model="rgcn (SAGEConv per edge type) or rgat (GATConv per edge type, as MLPerf's GNN benchmark)",
                 fanouts="in-edges per node per edge type, per hop, seeds first, e.g. 10,10")


def parse_args(argv=None, prog: str = "rgcn.py") -> RGCNConfig:
    cfg = parse_settings(RGCNConfig, RGCN_HELP, argv, prog, "Train an R-GCN on a partitioned heterogeneous "
                         "graph (run under mpirun/srun; see docs/training.md).")
    for name in ("epochs", "batch_size", "hidden"):
        if getattr(cfg, name) < 1:
            raise InputError(f"{prog}: {name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.model not in ("rgcn", "rgat"):
        raise InputError(f"{prog}: model must be rgcn or rgat on a typed graph, got {cfg.model!r}")
    return cfg


def _setup(cfg: RGCNConfig, g, tc):
    """Every trainer raises the same InputError before training: the seed type and
    the per-trainer splits of the training, validation and test seeds."""
    conf = g.get_partition_config()
    with agreed(tc):
        for key in ("label", "train_mask", "val_mask", "test_mask"):
            if getattr(cfg, key) not in g.ndata:
                raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} has no node data "
                                 f"{getattr(cfg, key)!r} (setting {key}); it has {sorted(g.ndata)}")
        if cfg.feat not in ("", "feat") and cfg.feat not in g.ndata:     # "" or a missing default: no features
            raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} has no node data {cfg.feat!r} "
                             f"(setting feat); it has {sorted(g.ndata)}")
        if len(g.ntypes) < 2 and len(g.canonical_etypes) < 2:
            raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} is homogeneous; train it with "
                             "`hpcgnn train --task node` (examples/node_classification.py)")
        if g.get_partition_book().etypes == ["_E"]:
            raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} has node types but no edge types; "
                             "partition a raw graph with /edges/type and the etypes attribute")
        seed_type = cfg.seed_type or (conf["node_feats"][cfg.label].get("ntypes") or [g.ntypes[0]])[0]
        if seed_type not in g.ntypes:
            raise InputError(f"{cfg.part_config}: seed_type {seed_type!r} is not a node type of "
                             f"{g.graph_name!r} ({g.ntypes})")
        if g.edge_dir != "in":
            raise InputError(f"{cfg.part_config}: graph {g.graph_name!r} was partitioned with edge_dir="
                             f"{g.edge_dir!r}; training samples in-edges: repartition it with --edge-dir in")
        if tc.Get_rank() == 0:
            check_run_dir(cfg.run_dir)
    book = g.get_partition_book()
    ids = {}
    with agreed(tc):
        for key in ("train_mask", "val_mask", "test_mask"):
            a = node_split(labelled_mask(g, getattr(cfg, key), cfg.label), book).numpy()
            t, _ = book.map_to_per_ntype(a)
            ids[key] = a[t == book.ntype_id(seed_type)]
        total = int(allsum(tc, [len(ids["train_mask"])])[0])
        if total < tc.Get_size():
            raise InputError(f"{cfg.part_config}: {total} training {seed_type} nodes ({cfg.train_mask}) for "
                             f"{tc.Get_size()} trainers; every trainer needs at least one")
    in_dims = {t: int(g.ndata[cfg.feat].shape[1])
               for t in (conf["node_feats"].get(cfg.feat, {}).get("ntypes") or g.ntypes)} \
        if cfg.feat in g.ndata else {}
    return seed_type, ids["train_mask"], ids["val_mask"], ids["test_mask"], in_dims


def _forward(model, b, g, cfg, device):
    hb = b.to_hetero(g, cfg.feat if cfg.feat in g.ndata else None, cfg.label)
    x = {t: v.to(device, non_blocking=True) for t, v in hb.x_dict.items()}
    ei = {k: v.to(device, non_blocking=True) for k, v in hb.edge_index_dict.items()}
    out = model(x, ei, hb.num_nodes_dict(), hb.seed_type, hb.batch_size)
    return out, hb.y.long().to(device, non_blocking=True)


def _every_trainer_some(tc, ids: np.ndarray):
    """Collective: this trainer's evaluation ids, so that every trainer has some (a
    loader needs ids on every trainer): the shares as they are, or, when a trainer has
    none, all of them dealt round robin; None when there are fewer than trainers."""
    counts = allgather(tc, len(ids))
    if min(counts) > 0:
        return ids
    if sum(counts) < tc.Get_size():
        return None
    every = np.concatenate(allgather(tc, np.asarray(ids, dtype=np.int64)))
    return every[tc.Get_rank()::tc.Get_size()]


def _predict(g, cfg, device):
    def predict(model, b):
        out, y = _forward(model, b, g, cfg, device)
        return out.argmax(1), y
    return predict


def run(cfg: RGCNConfig) -> dict | None:
    ctx, tc, g = start(cfg)
    seed_type, train_ids, val_ids, test_ids, in_dims = _setup(cfg, g, tc)
    num_classes = int(g.get_partition_config().get("num_classes") or 0)
    with agreed(tc):
        if num_classes < 2:
            raise InputError(f"{cfg.part_config}: num_classes is not set in the partition configuration")
    train_ids, val_ids, test_ids = labelled_ids(g, cfg, tc, num_classes, (train_ids, val_ids, test_ids))
    seed_all(cfg.seed)
    model = RGCN(in_dims, g.ntypes, g.canonical_etypes, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout,
                 conv="gat" if cfg.model == "rgat" else "sage")
    meta = {"fanouts": json.dumps(cfg.fanouts), "batch_size": cfg.batch_size, "seed": cfg.seed,
            "seed_type": seed_type, "model_name": cfg.model}
    trainer = Trainer(model, lr=cfg.lr, run_dir=cfg.run_dir, device=cfg.device, ctx=ctx,
                      checkpoint_every=cfg.checkpoint_every, max_steps=cfg.max_steps, epoch_steps=cfg.epoch_steps,
                      resume=cfg.resume, progress=cfg.progress, graph=g, meta=meta, find_unused_parameters=True,
                      name="hpcgnn rgcn", lr_given="lr" in getattr(cfg, "given", {"lr"}))
    device = trainer.device
    sampler = NeighborSampler(cfg.fanouts)
    feat = cfg.feat if cfg.feat in g.ndata else None
    on_gpu = device if device.type == "cuda" else None
    loader = DistNodeDataLoader(g, train_ids, sampler, cfg.batch_size, shuffle=True, seed=cfg.seed,
                                prefetch=cfg.prefetch, feat=feat, label=cfg.label, cache_bytes=cfg.cache_bytes,
                                device=on_gpu)
    evals = {}
    for i, (k, ids) in enumerate((("val_acc", val_ids), ("test_acc", test_ids))):
        ids = _every_trainer_some(tc, ids)          # None: fewer labelled nodes than trainers
        evals[k] = None if ids is None else \
            DistNodeDataLoader(g, ids, sampler, cfg.batch_size, seed=cfg.seed + 1 + i, prefetch=cfg.prefetch,
                               feat=feat, label=cfg.label, device=on_gpu)
    predict = _predict(g, cfg, device)

    def loss_fn(m, b):
        out, y = _forward(m, b, g, cfg, device)
        return F.cross_entropy(out, y), (out.argmax(1) == y).sum(), len(y)

    def evaluate(epoch):
        return {"val_acc": None if evals["val_acc"] is None else trainer.accuracy(evals["val_acc"], predict)}

    fit = trainer.fit(loader, loss_fn, epochs=cfg.epochs, evaluate=evaluate, eval_every=cfg.eval_every,
                      eval_keys=("val_acc",),
                      describe=f"{g}, model {cfg.model}, types {g.ntypes}, {len(g.canonical_etypes)} edge types, "
                      f"seeds {seed_type}")
    if fit.stopped:
        memory = finalize_and_report(ctx, tc.Get_rank() == 0)
        return {"stopped": True, "step": fit.step, "model": model, "memory": memory}
    result = trainer.finish({k: None if ld is None else trainer.accuracy(ld, predict) for k, ld in evals.items()})
    first = tc.Get_rank() == 0
    result["memory"] = finalize_and_report(ctx, first)
    if first:                                    # the accuracy stays the last line
        print_accuracies(result, "fewer labelled nodes in the set than trainers")
    result.update(model=model, epochs=fit.epochs)
    return result


def main(argv=None, prog: str = "rgcn.py") -> int:
    cfg = settings_or_exit(parse_args, argv, prog)
    if cfg is None:
        return 2
    return run_or_exit(run, cfg, prog)


if __name__ == "__main__":
    sys.exit(main())
