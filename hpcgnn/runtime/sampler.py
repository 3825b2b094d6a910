"""A sampler rank's loop: it makes its trainers' mini-batches and sends them, with
the protocol of :mod:`hpcgnn.sampling.remote`, between the leader's commands."""
from __future__ import annotations

from collections import deque

import numpy as np

from ..comm.mpi import MPI
from ..comm.progress import IdleBackoff
from ..graph.dist_graph import DistGraph
from ..sampling.remote import to_frame


class _Stream:
    __slots__ = ("lid", "trainer", "epoch", "steps", "credits")

    def __init__(self, lid, trainer, epoch, steps, credits):
        self.lid, self.trainer, self.epoch = lid, trainer, epoch
        self.steps, self.credits = deque(steps), credits


class SamplerWorker:
    """The serve loop of a sampler rank (the protocol: :mod:`hpcgnn.sampling.remote`)."""

    def __init__(self, service, max_idle_s: float):
        self.svc = service
        self.max_idle_s = max_idle_s
        self.ctx = service.ctx
        self.channel = service.batches
        self.tasks: dict[tuple[int, int], tuple] = {}     # (lid, trainer) -> (graph, task)
        self.graphs: dict[str, object] = {}
        self.streams: deque[_Stream] = deque()
        self.sending: list[tuple[list, list]] = []        # (requests, arrays kept alive)
        self.order_cache: dict[tuple[int, int, int], np.ndarray] = {}

    def serve(self) -> None:
        wait = IdleBackoff(self.max_idle_s)
        try:
            while True:
                busy = False
                cmd = self.svc.channel.poll()
                if cmd is not None:
                    if not self.svc.run_command(*cmd):
                        self._flush()
                        return
                    busy = True
                msg = self.channel.poll_request()
                if msg is not None:
                    self._handle(msg)
                    busy = True
                if self._produce_one():
                    busy = True
                self.sending = [(r, a) for r, a in self.sending if not self.channel.done(r)]
                wait(busy)
        finally:
            wait.close()

    def _handle(self, msg) -> None:
        kind, lid, trainer = msg[0], msg[1], msg[2]
        if kind == "register":
            name, task = msg[3], msg[4]
            if name not in self.graphs:
                self.graphs[name] = DistGraph.attach(self.ctx, name)
            self.tasks[(lid, trainer)] = (self.graphs[name], task)
        elif kind == "epoch":
            epoch, steps, credits = msg[3], msg[4], msg[5]
            self.streams.append(_Stream(lid, trainer, epoch, steps, credits))
        elif kind == "credit":
            for st in self.streams:
                if st.lid == lid and st.trainer == trainer:
                    st.credits += 1
                    break
        elif kind == "stop":
            self.streams = deque(st for st in self.streams if not (st.lid == lid and st.trainer == trainer))
            reqs = self.channel.send_frame(trainer, lid, {"kind": "end"}, [])
            self.sending.append((reqs, []))
        else:
            raise RuntimeError(f"hpcgnn sampler {self.ctx.rank}: unknown request {kind!r} from rank {trainer}")

    def _produce_one(self) -> bool:
        for _ in range(len(self.streams)):
            st = self.streams[0]
            self.streams.rotate(-1)
            if st.credits <= 0:
                continue
            step = st.steps.popleft()
            st.credits -= 1
            if not st.steps:
                self.streams.remove(st)
            g, task = self.tasks[(st.lid, st.trainer)]
            key = (st.lid, st.trainer, st.epoch)
            order = self.order_cache.get(key)
            if order is None:
                self.order_cache = {k: v for k, v in self.order_cache.items() if k[:2] != key[:2]}
                order = self.order_cache[key] = task.plan.order(st.epoch)
            b = task.make(g, st.epoch, step, order)
            header, arrays = to_frame(b)
            reqs = self.channel.send_frame(st.trainer, st.lid,
                                           {"kind": "batch", "epoch": st.epoch, "step": step, "batch": header},
                                           arrays)
            self.sending.append((reqs, arrays))
            return True
        return False

    def _flush(self) -> None:
        for reqs, _ in self.sending:
            if reqs:
                MPI.Request.Waitall(reqs)
        self.sending = []
