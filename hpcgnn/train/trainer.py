"""The model-agnostic training runtime: any ``torch.nn.Module``, any loader of
hpcgnn batches, a loss (or step) function.

:class:`Trainer` gives every training script what ``hpcgnn train`` has: DDP between
the trainers (gloo on CPUs, NCCL on GPUs) bootstrapped from MPI, the run directory
locked for the job, checkpoints every N steps and on SIGUSR1/SIGTERM with a bitwise
resume (model, optimizer, RNG states, loader position, distributed tables),
``max_steps``/``epoch_steps``, a per-epoch JSON line on stdout plus ``log.jsonl``,
``metrics.csv`` and ``curve.png``, a progress bar, and periodic evaluation; a NaN or
infinite loss on any trainer stops every trainer at that step
(:class:`~hpcgnn.errors.NonFiniteLoss`, no checkpoint of that state).  It
knows nothing about the model: the three built-in tasks (node classification, link
prediction, R-GCN) are clients of it, as a user's script is::

    trainer = Trainer(model, lr=0.003, run_dir="runs/gat")
    def loss_fn(model, b):
        out = model(b.x, b.adjs)
        return F.cross_entropy(out, b.y[: b.batch_size].long())
    trainer.fit(loader, loss_fn, epochs=3,
                evaluate=lambda epoch: {"val_acc": trainer.accuracy(val_loader, predict)})
    trainer.finish({"test_acc": trainer.accuracy(test_loader, predict)})
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import torch

from .. import logs
from ..comm import peers, watchdog
from ..comm.rma import readstats
from ..comm.agree import agreed
from ..comm.collectives import allreduce, barrier
from ..errors import InputError, NonFiniteLoss
from ..comm.context import current_context
from .common import (allsum, check_run_dir, newest_checkpoint, partitions_digest, pick_device,
                     wrap_ddp)
from .loop import Checkpoints, progress_bar, run_steps, stop_message
from .runlog import RunLog

LOG = logs.get("train")

#: the loader statistics an epoch row reports (the slowest trainer's)
_TIMES = ("wait_s", "sample_s", "fetch_s")


@dataclass
class FitResult:
    """What :meth:`Trainer.fit` did: ``epochs`` (the rows logged), ``step`` (optimizer
    steps in total, resumed ones included), ``stopped`` (a signal or ``max_steps``
    ended the run; a checkpoint was written), ``resumed_from`` (the checkpoint)."""
    epochs: list = field(default_factory=list)
    step: int = 0
    stopped: bool = False
    resumed_from: str | None = None


class Trainer:
    """Collective over the trainers (create it on every trainer, with the same
    settings).  ``model``: any ``nn.Module``; it is moved to ``device`` (``auto``: a
    GPU per trainer when CUDA is available, else the CPU) and wrapped in DDP
    (:attr:`ddp`).  ``optimizer``: an optimizer over the model's parameters, a
    callable ``params -> optimizer``, or None for Adam with ``lr``.  ``meta``: what
    a checkpoint must match to be resumed (with the model's class and parameter
    shapes, the trainer count and, given ``graph``, its partitioning); ``tensors``:
    distributed tables (``DistEmbedding.weight``, optimizer state) saved with each
    checkpoint.  ``name``: how trainer 0's messages start."""

    def __init__(self, model: torch.nn.Module, optimizer=None, *, lr: float = 0.003, run_dir: str = "runs/train",
                 device: str = "auto", ctx=None, checkpoint_every: int = 0, max_steps: int = 0,
                 epoch_steps: int = 0, resume: bool = False, progress: str = "auto", graph=None,
                 find_unused_parameters: bool = False, meta: dict | None = None, tensors: dict | None = None,
                 name: str = "hpcgnn", lr_given: bool = True):
        ctx = ctx or current_context(required=f"{name}: Trainer", trainer=True)
        if not ctx.is_trainer:
            raise InputError(f"{name}: Trainer runs on trainer ranks, after hpcgnn.initialize(...)")
        self.ctx, self.tc, self.name = ctx, ctx.trainer_comm, name
        self.model, self.run_dir = model, run_dir
        self.settings = SimpleNamespace(checkpoint_every=int(checkpoint_every), max_steps=int(max_steps),
                                        epoch_steps=int(epoch_steps), resume=bool(resume), lr=lr,
                                        progress=progress, given={"lr"} if lr_given else set(),
                                        watch=peers.Watch(("server", "sampler"), watchdog.timeout_s()))
        with agreed(self.tc):
            if progress not in ("auto", "on", "off"):
                raise InputError(f"{name}: progress must be auto, on or off, got {progress!r}")
            if self.tc.Get_rank() == 0:
                check_run_dir(run_dir)
        self.device = pick_device(device, ctx)
        self.links = readstats.LinkWatch()
        self.ddp, self.timer, self.backend = wrap_ddp(ctx, model, self.device, find_unused_parameters)
        if optimizer is None:
            optimizer = torch.optim.Adam(self.ddp.parameters(), lr=lr)
        elif callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = optimizer(self.ddp.parameters())
        self.optimizer = optimizer
        self.meta = {"model": _model_signature(model), "trainers": self.tc.Get_size(), **(meta or {})}
        if graph is not None:
            self.meta.setdefault("graph_name", graph.graph_name)
            self.meta.setdefault("num_nodes", graph.num_nodes())
            self.meta.setdefault("num_edges", graph.num_edges())
            self.meta.setdefault("partitions", partitions_digest(graph))
        self.tensors = tensors
        self.log: RunLog | None = None
        self.result = FitResult()
        self._accuracy_given = True     # loss_fn returned (loss, correct, count)

    @property
    def rank(self) -> int:
        """This trainer's rank among the trainers."""
        return self.tc.Get_rank()

    def allsum(self, values) -> list[float]:
        """Collective over the trainers: ``values`` summed over every trainer."""
        return [float(v) for v in allsum(self.tc, values)]

    def say(self, text: str) -> None:
        """Trainer 0 prints ``name: text``."""
        if self.rank == 0:
            LOG.info(f"{self.name}: {text}")

    def fit(self, loader, loss_fn: Callable | None = None, *, epochs: int = 1, step_fn: Callable | None = None,
            evaluate: Callable | None = None, eval_every: int = 1, eval_keys: tuple = (),
            describe: str = "") -> FitResult:
        """Collective over the trainers: train ``epochs`` epochs of ``loader`` (an
        hpcgnn loader; a resumed run continues where its checkpoint stopped).

        ``loss_fn(ddp_model, batch)`` returns the loss, or ``(loss, correct, count)``
        for a training accuracy in the epoch rows; the runtime zeroes the gradients,
        runs the backward pass and the optimizer step.  ``step_fn(batch) -> (loss,
        correct, count)`` instead does all of a step itself (several optimizers,
        sparse updates).  ``evaluate(epoch) -> dict`` (collective; e.g.
        ``{"val_acc": ...}``) runs every ``eval_every`` epochs and its values join the
        epoch's row; ``eval_keys`` (e.g. ``("val_acc",)``) are in every row, None where
        the epoch was not evaluated (one set of columns in metrics.csv).
        ``describe``: words for the start line.

        A loss that is NaN or infinite on any trainer ends the run on every trainer at
        that step: :class:`~hpcgnn.errors.NonFiniteLoss` (one line naming the step,
        epoch and trainer) is raised on each, and no checkpoint is written of the
        state that step left (the last good one stays)."""
        if (loss_fn is None) == (step_fn is None):
            raise InputError(f"{self.name}: fit takes a loss_fn or a step_fn (one of them)")
        step_fn = step_fn or self._default_step(loss_fn)
        ckpt = Checkpoints(self.tc, self.run_dir, self.meta, self.model, self.optimizer, loader,
                           tensors=self.tensors)
        step, start_epoch, resumed = ckpt.start(self.settings, say=self.say)
        self.log = RunLog(self.run_dir, self.rank == 0, append=resumed is not None, keep_before=start_epoch)
        self.say(f"{describe + ', ' if describe else ''}{self.tc.Get_size()} trainer(s), backend {self.backend}, "
                 f"layout '{self.ctx.layout}', loader mode {loader.mode}, {len(loader)} steps/epoch"
                 + (f", resumed from {resumed} at step {step}" if resumed else ""))
        res = FitResult(step=step, resumed_from=resumed)
        with ckpt.last_words(step):        # a peer's death: the step held is saved
            for epoch in range(start_epoch, epochs):
                t_epoch = time.perf_counter()
                self.timer.seconds = 0.0
                r = run_steps(loader, step_fn, self.tc, self.settings, res.step, ckpt,
                              bar=progress_bar(self.settings, self.rank == 0, len(loader), epoch), device=self.device)
                res.step, res.stopped = r.step, r.stopped
                if r.nonfinite:
                    self._stop_on_nonfinite_loss(r, epoch)
                if res.stopped and not r.epoch_complete:
                    break
                row = self._epoch_row(epoch, loader.stats, r, time.perf_counter() - t_epoch)
                row.update(dict.fromkeys(eval_keys))
                if evaluate is not None and eval_every > 0 and (epoch + 1) % eval_every == 0:
                    row.update(evaluate(epoch))
                if self.rank == 0:
                    print(json.dumps({"kind": "epoch", **row}), flush=True)
                self.log.epoch(row)
                res.epochs.append(row)
                if res.stopped:             # stopped on the epoch's last step: closed, now stop
                    break
        if res.stopped:
            self.log.flush()
            if self.rank == 0:
                LOG.info(stop_message(self.name, res.step, self.settings))
        self.result = res
        return res

    def _stop_on_nonfinite_loss(self, r, epoch: int) -> None:
        """Collective over the trainers: raise on each the :class:`NonFiniteLoss` of
        the lowest trainer whose loss was not finite."""
        self.log.flush()
        last = newest_checkpoint(self.tc, self.run_dir)
        with agreed(self.tc):
            if not math.isfinite(r.last_loss):
                raise NonFiniteLoss(f"{self.name}: the loss is {r.last_loss} at step {r.step} (epoch {epoch}) on "
                                    f"trainer {self.rank}; every trainer stopped there, no checkpoint written "
                                    f"(the last good one: {last or 'none'})")

    def _default_step(self, loss_fn: Callable) -> Callable:
        def step(b):
            out = loss_fn(self.ddp, b)
            self._accuracy_given = isinstance(out, tuple)
            loss, correct, count = out if self._accuracy_given else (out, 0, _batch_count(b))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return loss, correct, count
        return step

    def _epoch_row(self, epoch: int, st: dict, r, seconds: float) -> dict:
        tot = allsum(self.tc, [r.loss_sum, r.correct, r.seen, st.get("sampled_edges", 0), st.get("h2d_bytes", 0)])
        slow = allreduce(self.tc, [seconds, r.compute_s, self.timer.seconds, r.host_s, r.busy_s or 0.0]
                         + [st.get(k, 0.0) for k in _TIMES], "max")
        row = {"epoch": epoch, "loss": tot[0] / max(tot[2], 1),
               "train_acc": tot[1] / max(tot[2], 1) if self._accuracy_given else None,
               "epoch_s": slow[0], "steps": st.get("batches", 0),
               "sampled_edges_per_s": tot[3] / max(slow[0], 1e-9), "compute_s": slow[1], "allreduce_s": slow[2],
               "host_s": slow[3], "gpu_busy_s": slow[4] if r.busy_s is not None else None,
               "h2d_bytes": int(tot[4]) if self.device.type != "cpu" else None}
        row.update(zip(_TIMES, slow[5:]))
        # of the feature rows held on other hosts, the share the cache served (a sum every
        # trainer takes part in: one trainer may have read no remote row this epoch)
        c = allsum(self.tc, [st.get("cache_hits", 0), st.get("cache_remote_lookups", 0)])
        if c[1]:
            row["cache_hit_rate"] = c[0] / c[1]
        links = readstats.gather_links(self.tc, readstats.take())    # rows read from other hosts, by link
        if links:
            row["remote_reads"] = links
            row["slowest_read_s"] = max(v["slowest_s"] for v in links.values())
            for line in self.links.check(epoch, links) if self.rank == 0 else ():
                LOG.warning(line)
        return row

    @torch.no_grad()
    def accuracy(self, loader, predict: Callable) -> float | None:
        """Collective over the trainers: the share of right answers over ``loader``'s
        batches (padding batches, which repeat a trainer's ids, counted once), where
        ``predict(model, batch) -> (predicted classes, true classes)``; None when no
        trainer had a batch."""
        was = self.model.training
        self.model.eval()
        right = total = 0
        for b in loader:
            if b.extra.get("padding"):
                continue
            pred, y = predict(self.model, b)
            right += int((pred.to(y.device) == y).sum())
            total += len(y)
        self.model.train(was)
        c, n = allsum(self.tc, [right, total])
        return float(c / n) if n else None

    def finish(self, result: dict, save_model: bool = True) -> dict:
        """Collective over the trainers: log the final ``result`` (``log.jsonl`` and a
        ``{"kind": "final", ...}`` line on stdout), and save the model's
        ``state_dict`` to ``run_dir/model.pt`` (trainer 0).  Returns ``result``."""
        if self.log is None:
            self.log = RunLog(self.run_dir, self.rank == 0, append=True)
        result = {**result, "steps": self.result.step}
        if self.rank == 0 and save_model:
            torch.save({k: v.cpu() for k, v in self.model.state_dict().items()},
                       os.path.join(self.run_dir, "model.pt"))
        self.log.final(result)
        if self.rank == 0:
            print(json.dumps({"kind": "final", **result}), flush=True)
        return result

    def close(self) -> None:
        """Collective: end the launch (``ctx.finalize()``: servers and samplers exit)."""
        barrier(self.tc)
        self.ctx.finalize()


def _batch_count(b) -> int:
    label = getattr(b, "edge_label", None)
    return len(label) if label is not None else int(getattr(b, "batch_size", 1))


def _model_signature(model: torch.nn.Module) -> str:
    """The model's class and parameter shapes: a checkpoint of another model is
    refused on resume."""
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    return json.dumps({"class": f"{type(model).__module__}.{type(model).__qualname__}", "shapes": shapes},
                      sort_keys=True)

