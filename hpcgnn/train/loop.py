"""The step loop the training scripts share (node classification, link prediction,
R-GCN): resume from the newest checkpoint, checkpoint every N steps and on
SIGUSR1/SIGTERM (agreed by every trainer at a step boundary), ``max_steps`` and
``epoch_steps``, the per-epoch totals, and the progress bar.  What a step computes
is the script's ``step_fn``.  A loss that is not finite (NaN, inf) on any trainer
stops every trainer at that step, without a checkpoint: it is agreed in the same
allreduce as the stop signals, one per step as before."""
from __future__ import annotations

import glob
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch


from .. import logs
from ..comm import lastwords, peers, signals, watchdog
from ..comm.agree import agreed
from ..comm.collectives import all_min, any_flags, members
from ..comm.failure import lost_peer
from ..errors import InputError, PeerFailed
from . import checkpoint
from .common import all_checkpoints, newest_checkpoint, rng_state, set_rng_state


class Checkpoints:
    """Saves and restores what a resumed run needs: the model and optimizer
    (replicated: written once), each trainer's RNG states, loader position and the
    totals of the epoch so far, and ``tensors`` (distributed tables such as a
    ``DistEmbedding``'s rows)."""

    def __init__(self, tc, run_dir: str, meta: dict, model, opt, loader, tensors: dict | None = None):
        self.tc, self.run_dir, self.meta = tc, run_dir, meta
        self.model, self.opt, self.loader, self.tensors = model, opt, loader, tensors
        self.epoch_totals = None     # restored by resume(), taken by the first run_steps
        self.held = None             # (step, own state) at the last step boundary (hold())

    def save(self, step: int, epoch_totals: dict | None = None) -> None:
        """Collective over the trainers.  ``epoch_totals``: the current epoch's
        ``loss_sum``, ``correct``, ``seen`` and ``compute_s`` so far on this trainer."""
        checkpoint.save(self.tc, self.run_dir, step, self.meta,
                        {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()},
                        {"rng": rng_state(), "loader": self.loader.state_dict(),
                         "epoch_totals": epoch_totals}, tensors=self.tensors)

    def hold(self, step: int, epoch_totals: dict | None, epoch_steps: int = 0) -> None:
        """Local, at a step boundary: the step the model and optimizer now hold and
        what a resume from it needs of this trainer (torch's RNG states, the loader's
        position, the epoch's totals), for :meth:`last_words`; numpy's and Python's
        RNG states are taken as the checkpoint is written (a step draws from torch's)."""
        loader = self.loader.state_dict()
        if epoch_steps and loader["step"] >= epoch_steps:      # the epoch ends here (epoch_steps)
            loader = {**loader, "epoch": loader["epoch"] + 1, "step": 0}
        self.held = (step, {"rng": rng_state(torch_only=True), "loader": loader, "epoch_totals": epoch_totals})

    @contextmanager
    def last_words(self, step: int):
        """Run the body (the epochs) with this trainer's last words armed: when a
        peer's death ends the job (:mod:`hpcgnn.comm.lastwords`), the lowest trainer
        of each host that is still running writes the checkpoint of the step it
        holds alone (:func:`checkpoint.save_solo`)."""
        trainers = members(self.tc)
        if self.held is None:
            self.hold(step, self.epoch_totals)
        with lastwords.armed(lambda: self._solo(trainers)):
            try:
                yield
            except BaseException as exc:
                if isinstance(exc, PeerFailed) or lost_peer(exc):   # before the hook names the dead rank
                    lastwords.say(show=False)
                raise

    def _solo(self, trainers: tuple) -> str | None:
        me = peers.my_rank()
        if any(r < me and peers.state(r) == "running" for r in trainers) or watchdog.stopped_for():
            return None                  # a lower trainer of this host runs: it writes (or, woken after being
        #                                  stopped, this one's peers ended the job and saved what they held)
        step, own = self.held
        if self.tensors:
            return (f"hpcgnn: {peers.me()}: no checkpoint of step {step}: its distributed tables "
                    f"({', '.join(sorted(self.tensors))}) live on the servers; --resume continues from the last one "
                    "written")
        path = checkpoint.save_solo(self.run_dir, step, self.meta,
                                    {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()},
                                    {**own, "rng": {**rng_state(), **own["rng"]}, "solo": peers.me()},
                                    len(trainers))
        return (f"hpcgnn: {peers.me()} wrote the checkpoint of step {step} alone ({path}): --resume continues "
                "from it (a step in flight when the job ended is lost)")

    def _say(self, text: str) -> None:
        if self.tc.Get_rank() == 0:
            logs.get("train").info(f"hpcgnn train: {text}")

    def start(self, cfg, say=None) -> tuple[int, int, str | None]:
        """Collective: with ``cfg.resume``, restore the newest readable checkpoint (see
        :meth:`resume`; ``cfg.lr`` replaces the saved learning rate when the user set
        it); a fresh run refuses a run_dir that holds checkpoints (its own would be
        pruned in favour of theirs, and a later ``--resume`` would continue the
        earlier run)."""
        if cfg.resume:
            return self.resume(cfg.lr if "lr" in getattr(cfg, "given", {"lr"}) else None, say)
        found = newest_checkpoint(self.tc, self.run_dir)
        bad = glob.glob(os.path.join(self.run_dir, "checkpoints", "step-*.h5.bad"))
        with agreed(self.tc):
            if found or bad:
                what = f"newest {os.path.basename(found)}" if found else f"{len(bad)} unreadable, *.bad"
                raise InputError(f"run_dir {self.run_dir!r} holds checkpoints of an earlier run ({what}): "
                                 "continue it with --resume, or start this run in another run_dir (or remove "
                                 "its checkpoints/)")
        return 0, 0, None

    def resume(self, lr: float | None = None, say=None) -> tuple[int, int, str | None]:
        """Collective: restore the newest complete checkpoint that can be read (a
        damaged newer one is skipped, and ``say`` told so; by default trainer 0
        prints it), if any.  ``lr``: this
        run's learning rate replaces the one saved with the optimizer.  Returns
        (step, epoch to start from, its path or None)."""
        say = say or self._say
        found_all = all_checkpoints(self.tc, self.run_dir)
        for found in reversed(found_all):
            try:
                step, rep, own = checkpoint.load(self.tc, found, self.meta, tensors=self.tensors)
            except checkpoint.UnreadableCheckpoint as e:
                say(f"skipping {found}: {str(e).split(': ', 1)[-1]} (renamed to {os.path.basename(found)}.bad)")
                if self.tc.Get_rank() == 0:          # out of the way: not read again, not one of the kept
                    os.replace(found, found + ".bad")
                self.tc.Barrier()
                continue
            break
        else:
            bad = sorted(glob.glob(os.path.join(self.run_dir, "checkpoints", "step-*.h5.bad")))
            with agreed(self.tc):
                if found_all or bad:   # a partial read may have written rows; and a rerun must not start over
                    raise InputError(f"no checkpoint in {self.run_dir!r} can be read ({len(bad)} renamed to *.bad); "
                                     "start this run in another run_dir, or without --resume once they are "
                                     "moved away")
            say(f"no checkpoint in {os.path.join(self.run_dir, 'checkpoints')}: starting fresh")
            return 0, 0, None
        self.model.load_state_dict(rep["model"])
        self.opt.load_state_dict(rep["optimizer"])
        if lr is not None:
            saved = {g["lr"] for g in self.opt.param_groups}
            if saved != {lr}:
                say(f"learning rate {', '.join(str(v) for v in sorted(saved))} (checkpoint) -> {lr} (this run)")
            for g in self.opt.param_groups:
                g["lr"] = lr
        set_rng_state(own["rng"])
        self.loader.load_state_dict(own["loader"])
        if own.get("solo"):
            say(f"{os.path.basename(found)} was written by {own['solo']} alone as the job ended: every trainer "
                "continues from its state (its RNG states included)")
        if self.loader.position[1] > 0:      # resumed inside an epoch: its totals so far
            self.epoch_totals = own.get("epoch_totals")
        return step, self.loader.state_dict()["epoch"], found


@dataclass
class EpochSteps:
    """What :func:`run_steps` did in one epoch on this trainer."""
    step: int                 # the global step count after the epoch
    stopped: bool             # a signal or max_steps ended the run (checkpoint written)
    epoch_complete: bool = False   # the epoch's last step ran here (also when stopped on it)
    compute_s: float = 0.0    # time in step_fn and its loss.item() (where the host waits for a GPU)
    host_s: float = 0.0       # of it, the host's own time in step_fn (launching, Python) before that wait
    busy_s: float | None = None   # on a GPU: device time from each step's first kernel to its last
    loss_sum: float = 0.0     # sum of loss x count
    correct: int = 0
    seen: int = 0
    nonfinite: bool = False   # a trainer's loss was NaN or inf at step ``step`` (the run stops)
    last_loss: float = 0.0    # this trainer's loss at that step


def progress_bar(cfg, show_here: bool, total: int, epoch: int):
    """A tqdm bar on stderr where ``cfg.progress`` asks for one (``auto``: when
    stderr is a terminal), else None."""
    if not show_here or not (cfg.progress == "on" or (cfg.progress == "auto" and sys.stderr.isatty())):
        return None
    from tqdm import tqdm   # only with a progress bar

    return tqdm(total=total, desc=f"epoch {epoch}", file=sys.stderr, leave=False)


def run_steps(loader, step_fn, tc, cfg, step: int, ckpt: Checkpoints, bar=None, device=None) -> EpochSteps:
    """One epoch of ``loader`` (the rest of it after a resume):
    ``step_fn(batch) -> (loss tensor, correct, count)`` does the forward, backward
    and optimizer steps.  Checkpoints every ``cfg.checkpoint_every`` steps; a stop
    signal (agreed by every trainer) or ``cfg.max_steps`` checkpoints and ends the
    run; ``cfg.epoch_steps`` (where the config has it) ends every epoch after its
    first that many steps, resumed or not.  A run stopped on an epoch's last step
    has ``epoch_complete``: the script still closes that epoch (its log row and
    validation), since a resumed run starts with the next one.  On a GPU
    (``device``), CUDA events around each step time the device's share
    (``busy_s``)."""
    r = EpochSteps(step=step, stopped=False)
    if ckpt.epoch_totals:          # the part of this epoch run before the resume
        for k, v in ckpt.epoch_totals.items():
            setattr(r, k, v)
        ckpt.epoch_totals = None
    if cfg.max_steps > 0 and step >= cfg.max_steps:
        r.stopped = True          # resumed at the limit: no step beyond it (the checkpoint is there)
        return r
    epoch_steps = getattr(cfg, "epoch_steps", 0)
    events = [] if device is not None and device.type == "cuda" else None
    for b in loader:
        t0 = time.perf_counter()
        if events is not None:
            events.append(_event())
        loss, correct, count = step_fn(b)
        t1 = time.perf_counter()
        if events is not None:
            events.append(_event())
        value = loss.item()             # on a GPU: where the host waits for the step
        r.compute_s += time.perf_counter() - t0
        r.host_s += t1 - t0
        r.step += 1
        ckpt.hold(r.step, {"loss_sum": r.loss_sum + value * count, "correct": r.correct + int(correct),
                           "seen": r.seen + count, "compute_s": r.compute_s}, epoch_steps)
        signal, r.nonfinite, lost = step_flags(tc, math.isfinite(value), getattr(cfg, "watch", None), r.step)
        if r.nonfinite:                   # no checkpoint of what this step left; fit() raises
            lastwords.cancel()
            if lost is not None:
                raise PeerFailed(f"{lost} ({peers.me()} ends the job; no checkpoint: a loss was not finite)")
            r.last_loss, r.stopped = value, True
            break
        r.loss_sum += value * count
        r.correct += int(correct)
        r.seen += count
        if bar is not None:
            bar.update(1)
        epoch_over = bool(epoch_steps) and loader.position[1] >= epoch_steps
        if epoch_over:
            loader.finish_epoch()         # a checkpoint here resumes at the next epoch
        stop = signal or lost is not None or (cfg.max_steps > 0 and r.step >= cfg.max_steps)
        if lost is not None:              # a server or sampler is gone: the trainers save what they hold
            raise PeerFailed(f"{lost}; {last_checkpoint(ckpt, r)} ({peers.me()} ends the job)")
        if stop or (cfg.checkpoint_every > 0 and r.step % cfg.checkpoint_every == 0):
            ckpt.save(r.step, _totals(r))
        if stop:
            r.stopped = True
            break
        if epoch_over:
            break
    if bar is not None:
        bar.close()
    if events:                    # every step's events are done: each loss.item() waited for them
        r.busy_s = sum(a.elapsed_time(b) for a, b in zip(events[::2], events[1::2])) / 1000
    # the loader points at the next epoch's start once an epoch's last batch is out
    r.epoch_complete = r.seen > 0 and loader.position[1] == 0
    return r


def _totals(r: EpochSteps) -> dict:
    return {k: getattr(r, k) for k in ("loss_sum", "correct", "seen", "compute_s")}


def last_checkpoint(ckpt: Checkpoints, r: EpochSteps) -> str:
    """Collective over the (live) trainers, after a server or sampler died: write
    the checkpoint of step ``r.step`` (the model and optimizer the trainers hold,
    their RNG states and loader positions: nothing a server serves) and say so;
    distributed tables (embeddings) live on the servers, so a run with them writes
    none and says that."""
    lastwords.cancel()                  # the trainers save together
    if ckpt.tensors:
        return (f"no checkpoint of step {r.step}: its distributed tables ({', '.join(sorted(ckpt.tensors))}) live "
                f"on the servers; --resume continues from the last one written")
    ckpt.save(r.step, _totals(r))
    return f"checkpoint of step {r.step} written: --resume continues from it"


def _event():
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def step_flags(tc, finite: bool, watch=None, step: int = 0) -> tuple[bool, bool, str | None]:
    """Collective over the trainers, once per step: (a stop signal reached a trainer,
    a trainer's loss was not finite, what is lost), in one allreduce (what
    ``signals.agreed_stop`` alone did).  ``watch`` (:class:`~hpcgnn.comm.peers.Watch`):
    a server or sampler on a trainer's host that is gone, or stopped longer than
    ``HPCGNN_TIMEOUT``, is named in the third value on every trainer (None while all
    live); the caller writes the last checkpoint and ends the job."""
    failed = watch.failed() if watch is not None else None
    # bounded by HPCGNN_TIMEOUT: a trainer frozen mid-run is named
    flags = any_flags(tc, int(signals.requested()) | (0 if finite else 2) | (4 if failed is not None else 0))
    if flags & 4:               # which rank: the lowest any trainer saw
        failed = all_min(tc, failed if failed is not None else 1 << 62)
    lost = None
    if flags & 4:
        lost = f"{peers.describe(failed)}{_how_long(watch, failed)}; the trainers stop at step {step}"
    return bool(flags & 1), bool(flags & 2), lost


def _how_long(watch, rank: int) -> str:
    since = watch.stopped_since.get(rank) if watch is not None else None
    return "" if since is None else f", has not run for {watch.limit_s:g} s (HPCGNN_TIMEOUT)"


def stop_message(prog: str, step: int, cfg) -> str:
    why = ", ".join(signals.received())
    if not why:
        why = (f"max_steps={cfg.max_steps}" if cfg.max_steps > 0 and step >= cfg.max_steps
               else "a stop signal another trainer received")
    if "SIGTERM" in why:
        gone = peers.troubled()           # a rank of this host that died first (the launcher's reason)
        why += (f": the launcher ending the job after {'; '.join(peers.describe(r) for r in gone)}" if gone else
                ": scancel, the time limit, or the launcher ending the job after a failure on another rank")
    return f"{prog}: stopped at step {step} ({why}); checkpoint written, resume with --resume"
