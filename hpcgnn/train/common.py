"""Helpers shared by the training loops: reductions over the trainers, RNG state,
and a DDP hook timing the gradient allreduce."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import random
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import hpcgnn

from .. import logs
from ..allocator import keep_freed_memory
from ..comm.agree import agreed, agreed_over
from ..comm.context import current_context, host_index
from ..comm.collectives import all_min, allgather, allreduce, collective
from ..comm.mpi import MPI
from ..comm.torch_dist import init_process_group
from ..errors import HpcgnnError, InputError
from ..graph import DistGraph
from ..graph.split import MaskReader
from ..partition.config import read_config
from . import checkpoint


def allsum(tc, values) -> np.ndarray:
    """Collective over the trainers: the elementwise sums of ``values``, as float64."""
    return allreduce(tc, values, "sum")


def labelled_mask(g, mask: str, label: str):
    """The mask ``mask`` without the nodes labelled -1 (unlabelled), as a reader for
    ``node_split``: split after leaving them out, the trainers' shares stay even
    (left out after the split, unlabelled nodes clustered in one range would leave
    one trainer few ids to cycle through)."""
    m, y = g.ndata[mask], g.ndata[label]

    def read(a, b):
        ids = np.arange(a, b, dtype=np.int64)
        return (np.asarray(m[ids]).reshape(-1) != 0) & (np.asarray(y[ids]).reshape(-1) != -1)
    return MaskReader(read)


def labelled_ids(g, cfg, tc, num_classes: int, sets: tuple) -> tuple:
    """The ids of ``sets`` (train, val, test) whose label is known: label -1 marks an
    unlabelled node (docs/format-raw.md), which is neither trained on nor scored (the
    sets come from :func:`labelled_mask` splits; this is a check); a label outside
    [-1, num_classes) is an error."""
    out = []
    with agreed(tc):
        for key, ids in zip(("train_mask", "val_mask", "test_mask"), sets):
            lab = np.asarray(g.ndata[cfg.label][ids]).astype(np.int64) if len(ids) else np.zeros(0, np.int64)
            bad = np.flatnonzero((lab < -1) | (lab >= num_classes))
            if len(bad):
                raise InputError(f"{cfg.part_config}: node data {cfg.label!r} (setting label) holds {lab[bad[0]]} "
                                 f"at node {int(ids[bad[0]])} ({getattr(cfg, key)}); classes are 0..{num_classes - 1} "
                                 "and -1 marks an unlabelled node")
            out.append(ids[lab >= 0])
    total = int(allsum(tc, [len(out[0])])[0])
    with agreed(tc):
        if total < tc.Get_size():
            raise InputError(f"{cfg.part_config}: {total} labelled training nodes ({cfg.train_mask}) for "
                             f"{tc.Get_size()} trainers; every trainer needs at least one")
    return tuple(out)


def print_accuracies(result: dict, none_means: str) -> None:
    """The last lines of a classification run: validation and test accuracy
    (``n/a`` and why, where ``result`` holds None)."""
    for what, key in (("validation", "val_acc"), ("test", "test_acc")):
        v = result[key]
        print(f"{what} accuracy: " + (f"n/a ({none_means})" if v is None else f"{v:.4f}"), flush=True)


def finalize_and_report(ctx, first: bool) -> dict:
    """Collective: end the launch; ``first`` (trainer 0) prints the peak RSS of every
    role's ranks as one JSON line, ``{"kind": "memory", "roles": {...}}``.  Returns it."""
    ctx.finalize()
    if first:
        print(json.dumps({"kind": "memory", "roles": ctx.memory}), flush=True)
    return ctx.memory


def settings_or_exit(parse, argv, prog: str):
    """``parse(argv, prog=prog)`` on every rank of the world (the same flags and
    files everywhere); bad settings end every rank with one line each and no
    traceback (returns None: exit status 2) instead of a job abort."""
    try:
        with agreed(MPI.COMM_WORLD):
            return parse(argv, prog=prog)
    except HpcgnnError as e:
        text = str(e)                       # names the rank that found it
        sys.stderr.write((text if text.startswith(prog) else f"{prog}: {text}") + "\n")
        sys.stderr.flush()
        return None


def run_or_exit(run, cfg, prog: str) -> int:
    """``run(cfg)``; an hpcgnn error (bad input, a NaN loss, a checkpoint the disk
    cannot hold) raised alike on every trainer (or
    every rank) ends the job cleanly: one line per rank, the servers released, exit
    status 1, instead of tracebacks and an abort.  Any other error still aborts the
    whole job."""
    try:
        run(cfg)
        return 0
    except HpcgnnError as e:
        ctx = current_context()
        tc = ctx.trainer_comm if ctx is not None else None
        if not (agreed_over(e, MPI.COMM_WORLD) or agreed_over(e, tc)):
            raise
        e.agreed_ranks = None            # used once
        text = str(e)
        sys.stderr.write((text if text.startswith(prog) else f"{prog}: {text}") + "\n")
        sys.stderr.flush()
        if ctx is not None:
            ctx.finalize()
        return 1


class AllreduceTimer:
    """A DDP communication hook that times the (overlapped) gradient allreduce.  On
    a GPU the allreduce runs on its own stream after the hook returns: CUDA events
    time it there, read when :attr:`seconds` is."""

    def __init__(self):
        self._seconds = 0.0
        self._events = []           # (start, end) CUDA events not read yet

    @property
    def seconds(self) -> float:
        events, self._events = self._events, []
        for start, end in events:
            end.synchronize()
            self._seconds += start.elapsed_time(end) / 1e3
        return self._seconds

    @seconds.setter
    def seconds(self, value: float) -> None:
        self._events = []
        self._seconds = value

    def hook(self, state, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer()
        buf.div_(dist.get_world_size())
        start = None
        if buf.is_cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            if start is None:
                self._seconds += time.perf_counter() - t0
            else:                   # the current stream waits for NCCL's here: the end of the allreduce
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._events.append((start, end))
            return f.value()[0]
        return fut.then(done)


def rng_state(torch_only: bool = False) -> dict:
    """The RNG states a resume restores; ``torch_only``: torch's (CPU and this GPU)
    alone, cheap enough for every step (numpy's takes ~50 us)."""
    state = {"torch": torch.get_rng_state()}
    if not torch_only:
        state.update(numpy=np.random.get_state(), python=random.getstate())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # this trainer's GPU only: a resume may see another number of GPUs
        # (srun --gpus-per-task), and the trainer draws on its own device alone
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    if "cuda" in s and torch.cuda.is_available():
        cuda = s["cuda"]
        if isinstance(cuda, (list, tuple)):     # an older checkpoint: every visible GPU's state
            i = torch.cuda.current_device()
            cuda = cuda[i] if i < len(cuda) else None
        if cuda is not None:
            torch.cuda.set_rng_state(cuda)      # the current GPU (set lazily, as CUDA starts)


def start(cfg):
    """Collective over the launch: ``hpcgnn.initialize`` with the settings' layout
    and graph (servers and samplers serve inside it and never return), torch threads
    (``cfg.threads``, or the node's cores shared among its ranks), malloc keeping
    freed memory (:mod:`hpcgnn.allocator`), and the graph:
    ``(ctx, trainer communicator, DistGraph)``."""

    ctx = hpcgnn.initialize(cfg.layout, cfg.ranks_per_node, part_config=cfg.part_config,
                            graph_name=cfg.graph_name)
    torch.set_num_threads(cfg.threads if cfg.threads > 0 else max(1, (os.cpu_count() or 1) // ctx.local_size))
    keep_freed_memory()
    name = cfg.graph_name or read_config(cfg.part_config)[0]["graph_name"]
    return ctx, ctx.trainer_comm, DistGraph(name)


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def pick_device(setting: str, ctx):
    """Collective over the trainers.  ``auto``: this trainer's GPU when CUDA is
    available (the trainers of a host take its GPUs in turn, one each), else the CPU;
    ``cpu``; ``cuda`` (an error without).  More trainers on a host than GPUs: ``auto``
    trains on the CPU (and says so), ``cuda`` is an error on every trainer (NCCL needs
    a GPU per trainer)."""
    if isinstance(setting, torch.device):
        if setting.index is not None:
            raise InputError(f"device {str(setting)!r}: give 'cuda' (each trainer takes a GPU of its host in "
                             "turn), 'cpu' or 'auto'")
        setting = setting.type
    if setting not in ("auto", "cpu", "cuda"):
        raise InputError(f"device must be auto, cpu or cuda, got {setting!r}")
    tc = ctx.trainer_comm
    want = all_min(tc, int(setting == "cuda" or (setting == "auto" and torch.cuda.is_available())))
    with agreed(tc):
        if setting == "cuda" and not torch.cuda.is_available():
            raise InputError(f"device=cuda but rank {ctx.rank} sees no CUDA device")
    if not want:           # a trainer without a GPU: every trainer stays on the CPU (one DDP backend)
        return torch.device("cpu")
    with collective(tc):
        index, count, host = host_index(tc)
    device = torch.device("cuda", index % torch.cuda.device_count())
    # the same physical GPU for two trainers of a host (e.g. 4 trainers, 1 GPU) fails in NCCL:
    # compare the chosen GPUs' UUIDs (each rank may see its own GPU as device 0 under
    # CUDA_VISIBLE_DEVICES / srun --gpus-per-task, which is fine)
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", f"{host}:{device.index}"))
    seen = allgather(tc, (host, uuid))
    shared = len(set(seen)) < len(seen)          # the same on every trainer
    if shared and setting == "auto":
        # e.g. the README's main job (2 trainers) on a workstation with one GPU
        if tc.Get_rank() == 0:
            logs.get("train").info(f"device auto: {len(seen)} trainers share {len(set(seen))} GPU(s) (NCCL needs "
                                   "one each): training on the CPU; pass device=cuda with one trainer per GPU to use them")
        return torch.device("cpu")
    with agreed(tc):
        if sum(1 for h, u in seen if h == host and u == uuid) > 1:
            raise InputError(f"{count} trainers on host {host} share GPU {uuid} (rank {ctx.rank} sees "
                             f"{torch.cuda.device_count()} GPU(s)): NCCL needs one GPU per trainer; use fewer "
                             "trainers per host, or device=cpu")
    return device


def wrap_ddp(ctx, model, device=None, find_unused_parameters: bool = False):
    """Trainers: ``(DDP model, AllreduceTimer, backend)`` over the trainer ranks; the
    model moves to ``device`` (NCCL between GPUs, gloo between CPUs).
    ``find_unused_parameters``: for models whose batches may leave parts unused
    (a relation absent from a heterogeneous batch)."""
    device = device or torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        model.to(device)
        backend = init_process_group(ctx, "nccl")
        # no device_ids: the inputs are on the GPU already, and DDP would otherwise rebuild
        # them on the way in (per-layer blocks, MiniBatch.adjs, would lose their fields)
        ddp = DistributedDataParallel(model, find_unused_parameters=find_unused_parameters)
    else:
        backend = init_process_group(ctx, "gloo")
        ddp = DistributedDataParallel(model, find_unused_parameters=find_unused_parameters)
    timer = AllreduceTimer()
    ddp.register_comm_hook(None, timer.hook)
    return ddp, timer, backend


def partitions_digest(g) -> str:
    """A short digest of the partitioned graph (its datasets' checksums, else its
    node and edge maps): a checkpoint's node-indexed state (embedding rows, loader
    positions) belongs to one partitioning of one graph."""
    pc = g.get_partition_config()
    what = pc.get("checksums") or {"node_map": pc.get("node_map"), "edge_map": pc.get("edge_map")}
    return hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def all_checkpoints(tc, run_dir: str) -> list[str]:
    """Collective over the trainers: the complete checkpoint paths, oldest first."""
    found = checkpoint.complete(run_dir) if tc.Get_rank() == 0 else None
    return tc.bcast(found, root=0)


def newest_checkpoint(tc, run_dir: str):
    """Collective over the trainers: the newest complete checkpoint path, or None."""
    found = all_checkpoints(tc, run_dir)
    return found[-1] if found else None


#: run directories this process holds locked: realpath -> open lock file
_LOCKS: dict = {}


def check_run_dir(run_dir: str) -> None:
    """Create ``run_dir``, check that it takes a file, and lock it for this job
    (InputError otherwise): a second job writing the same run_dir at the same time
    would interleave logs and prune the other's checkpoints."""
    probe = os.path.join(run_dir, ".write-test")
    try:
        os.makedirs(run_dir, exist_ok=True)
        with open(probe, "w") as fh:
            fh.write("ok")
        os.remove(probe)
    except OSError as e:
        raise InputError(f"run_dir {run_dir!r} cannot be created or written ({e.strerror})") from None
    _lock_run_dir(run_dir)


def _lock_run_dir(run_dir: str) -> None:
    """An advisory ``flock`` on ``run_dir/.lock``, held until the launch is finalized
    or this process ends (the kernel releases it even when the process is killed, so
    a requeued job never finds a stale lock).  File systems without locks are let
    through."""
    key = os.path.realpath(run_dir)
    if key in _LOCKS:
        return
    path = os.path.join(run_dir, ".lock")
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise InputError(f"run_dir {run_dir!r} is in use by another job ({holder}); give this run another "
                         "run_dir, or wait for that one to end") from None
    except OSError as e:
        fh.close()
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return
        raise
    fh.seek(0)
    fh.truncate()
    job = os.environ.get("SLURM_JOB_ID")
    fh.write(f"pid {os.getpid()} on {socket.gethostname()}" + (f", SLURM job {job}" if job else "") + "\n")
    fh.flush()
    _LOCKS[key] = fh
    ctx = current_context()
    if ctx is not None:         # released when the run's launch ends (a later run in this process may lock it)
        ctx.on_finalize(lambda: _unlock(key))


def _unlock(key: str) -> None:
    fh = _LOCKS.pop(key, None)
    if fh is not None:
        fh.close()
