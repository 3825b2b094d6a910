"""Mini-batches made on sampler ranks (``mode="samplers"``): the trainer side, and the
frames both sides use (the sampler side is :mod:`hpcgnn.runtime.sampler`).

Protocol (all on :class:`hpcgnn.comm.batches.BatchChannel`, per loader id ``lid``,
which the trainers number alike because loaders are created collectively):

* at loader creation each trainer sends its samplers ``("register", lid, trainer,
  graph_name, task)``: the picklable task (:class:`~hpcgnn.sampling.tasks.NodeTask`
  or ``EdgeTask``) holding the trainer's ids and settings;
* per epoch, ``("epoch", lid, trainer, epoch, steps, credits)``: the steps this
  sampler produces (with ``S`` samplers, every ``S``-th) and how many batches it
  may send before the trainer takes one; every batch the trainer takes returns
  ``("credit", lid, trainer)``, so at most ``credits`` batches per trainer are in
  flight (bounded memory on both sides);
* a trainer leaving an epoch early sends ``("stop", lid, trainer)``; the sampler
  drops the rest and answers with an ``"end"`` frame after which nothing more
  comes, so the trainer drains what was in flight and both sides are clean.

A sampler interleaves the streams of all its trainers (round robin over the ones
with credit) and polls for requests and for the leader's control commands
between batches, sleeping briefly (up to 1 ms) only when it has nothing to do.
Batch ``(epoch, step)`` is the same batch the trainer would have made itself.
An exception on a sampler aborts the job (:mod:`hpcgnn.comm.failure`): no trainer
waits for a batch that will never come.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import logs
from ..comm import peers
from .batch import MiniBatch

_ARRAYS = ("n_id", "e_id", "edge_index", "x", "y", "edge_label_index", "edge_label", "input_id", "n_type", "e_type")
_SCALARS = ("batch_size", "num_sampled_nodes", "num_sampled_edges", "edge_dir", "extra")


def to_frame(b: MiniBatch):
    """The batch as a header and its arrays; bfloat16 tensors (features partitioned
    with ``--feat-dtype bf16``: NumPy has no bfloat16) travel as their int16 bits."""
    names, arrays, bf16 = [], [], []
    for k in _ARRAYS:
        v = getattr(b, k)
        if v is not None:
            if isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16:
                v = v.view(torch.int16)
                bf16.append(k)
            a = v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            names.append(k)
            arrays.append(np.ascontiguousarray(a))
    return {k: getattr(b, k) for k in _SCALARS} | {"arrays": names, "bf16": bf16}, arrays


def from_frame(header, arrays) -> MiniBatch:
    fields = {k: header[k] for k in _SCALARS}
    fields.update({k: torch.from_numpy(a) for k, a in zip(header["arrays"], arrays)})
    for k in header.get("bf16", ()):
        fields[k] = fields[k].view(torch.bfloat16)
    return MiniBatch(**fields)


log = logs.get("sampling")


class RemoteLoader:
    """Trainer side of one loader.  Created collectively by the trainers."""

    def __init__(self, ctx, g, task, depth: int):
        svc = ctx.service
        self.g, self.task = g, task
        self.gone: set[int] = set()         # sampler ranks found dead: their batches are made here
        self.channel = svc.batches
        self.lid = svc.next_loader_id()
        self.rank = ctx.rank
        self.samplers = ctx.samplers_of(ctx.rank)
        self.depth = depth
        for s in self.samplers:
            self.channel.request(s, ("register", self.lid, self.rank, g.graph_name, task))

    def epoch(self, epoch: int, start: int, steps: int) -> "_RemoteEpoch":
        return _RemoteEpoch(self, epoch, start, steps)


class _RemoteEpoch:
    def __init__(self, rl: RemoteLoader, epoch: int, start: int, steps: int):
        self.rl, self.epoch, self.start, self.steps = rl, epoch, start, steps
        self.next_step = start
        self.order = None                   # the epoch's seed order, made when a batch is made here
        S = len(rl.samplers)
        self.active = []
        for j, s in enumerate(rl.samplers):
            mine = list(range(start + j, steps, S))
            if mine and s not in rl.gone:
                rl.channel.request(s, ("epoch", rl.lid, rl.rank, epoch, mine, rl.depth))
                self.active.append(s)

    def next(self) -> MiniBatch:
        rl = self.rl
        if self.next_step >= self.steps:
            raise StopIteration
        src = rl.samplers[(self.next_step - self.start) % len(rl.samplers)]
        got = rl.channel.recv_frame(src, rl.lid) if src not in rl.gone else None
        if got is None:                     # its sampler is gone: the same batch, made here
            return self._make_here(src)
        header, arrays = got
        if header.get("kind") != "batch" or header["step"] != self.next_step or header["epoch"] != self.epoch:
            raise RuntimeError(f"hpcgnn loader: trainer {rl.rank} expected batch {self.next_step} of epoch "
                               f"{self.epoch} from sampler {src}, got {header}")
        self.next_step += 1
        # a credit only where that sampler still has steps of this epoch to send
        if self.next_step - 1 + len(rl.samplers) < self.steps and peers.state(src) != "gone":
            rl.channel.request(src, ("credit", rl.lid, rl.rank))
        return from_frame(header["batch"], arrays)

    def _make_here(self, src: int) -> MiniBatch:
        """Batch ``next_step`` made by this trainer (a batch is a function of the
        settings alone: the one the sampler would have sent), ``src`` being gone."""
        rl = self.rl
        if src not in rl.gone:
            rl.gone.add(src)
            log.warning(f"hpcgnn: {peers.describe(src)}; {peers.me()} makes that sampler's batches itself")
        if self.order is None:
            self.order = rl.task.plan.order(self.epoch)
        b = rl.task.make(rl.g, self.epoch, self.next_step, self.order)
        self.next_step += 1
        return b

    def close(self) -> None:
        rl = self.rl
        if self.next_step >= self.steps:
            return
        live = [s for s in self.active if s not in rl.gone and peers.state(s) != "gone"]
        for s in live:
            rl.channel.request(s, ("stop", rl.lid, rl.rank))
        for s in live:
            while True:
                got = rl.channel.recv_frame(s, rl.lid)
                if got is None or got[0].get("kind") == "end":
                    break
        self.next_step = self.steps
