"""Checkpoints in one parallel-HDF5 file per save, written by all trainers together.

``<run_dir>/checkpoints/step-<N>.h5`` holds:

* attributes: ``format`` (``hpcgnn-checkpoint``), ``version``, ``step`` and the
  run's identity (``meta``: graph name, node count, model signature, ...) that a
  resume must match;
* ``replicated``: one byte string (``torch.save``) of what every trainer holds
  alike — model and optimizer state — written by trainer 0;
* ``trainers/<r>``: trainer ``r``'s own state (RNG states, loader position);
* ``tensors/<name>``: every row of each :class:`~hpcgnn.graph.DistTensor` given
  (a ``DistEmbedding`` and its sparse optimizer's state), each trainer writing one
  contiguous slice with a collective write.

A *solo* checkpoint (:func:`save_solo`) is the one a trainer writes alone when a
peer's death ends the job: attribute ``solo_of`` (the number of trainers of the
run) and one ``trainers/0``, this trainer's own state, which a resume gives to
every trainer.

A save goes to ``step-<N>.h5.tmp`` and is renamed once every trainer has closed
it, so a crash mid-write leaves the previous checkpoint as the newest complete one
(files ending in ``.tmp`` are never read).  Saving and loading are collective over
the trainers and run inside :func:`hpcgnn.comm.collectives.exclusive` (a prefetch
thread may be reading windows meanwhile).
"""
from __future__ import annotations

import glob
import io
import os
import pickle
import re

import numpy as np
import torch

from ..comm.agree import agreed
from ..comm.collectives import allreduce, barrier, exclusive
from ..errors import HpcgnnError, InputError
from ..io import diskspace, partial
from ..io.checksum import checksum_hex, fletcher_partial
from ..io.h5 import open_h5

FORMAT, VERSION = "hpcgnn-checkpoint", 1
_NAME = re.compile(r"step-(\d+)\.h5$")


class UnreadableCheckpoint(InputError):
    """A checkpoint file that cannot be read (truncated, empty, not HDF5): a resume
    falls back to the one before."""


def _bytes(obj) -> np.ndarray:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def _obj(arr: np.ndarray):
    # onto the CPU: a GPU run's tensors keep their device's tag, which a CPU-only node
    # cannot load (and on a multi-GPU host every trainer would load trainer 0's state
    # onto its GPU); load_state_dict then copies them exactly onto the parameters' device
    return torch.load(io.BytesIO(arr.tobytes()), weights_only=False, map_location="cpu")


def _slice(n: int, rank: int, size: int) -> tuple[int, int]:
    return n * rank // size, n * (rank + 1) // size


def save(tcomm, run_dir: str, step: int, meta: dict, replicated, own, tensors: dict | None = None,
         keep: int = 2) -> str:
    """Collective over the trainers: write checkpoint ``step``; keep the newest
    ``keep`` complete ones.  Returns the path.  A disk that cannot hold it (checked,
    then its blocks reserved before any data is written) or any write error ends
    the save on every trainer alike with :class:`CheckpointError` naming the file,
    the rank and the cause; the previous checkpoint is left as it was."""
    tensors = tensors or {}
    rank = tcomm.Get_rank()
    folder = os.path.join(run_dir, "checkpoints")
    final = os.path.join(folder, f"step-{step}.h5")
    tmp = final + ".tmp"
    with exclusive():
        with agreed(tcomm):
            if rank == 0:
                os.makedirs(folder, exist_ok=True)
        rep = _bytes(replicated) if rank == 0 else None
        mine = _bytes(own)
        rep_len = tcomm.bcast(len(rep) if rep is not None else 0, root=0)
        own_lens = tcomm.allgather(len(mine))
        need = space_needed(rep_len, own_lens, tensors)
        sums = _checksums(tcomm, rep, mine, tensors)
        with agreed(tcomm):             # before any trainer enters the collective create
            if rank == 0:
                _check_room(folder, need, run_dir)
        with agreed(tcomm):
            f = open_h5(tmp, "w", tcomm)
        guard = diskspace.WriteGuard(tcomm, tmp, final, CheckpointError,
                                     lambda: f"checkpoint not written ({_kept(run_dir)})")
        _write(tcomm, f, guard, step, meta, (rep, mine, rep_len, own_lens), tensors, sums, need)
        partial.commit(tmp, final, tcomm, durable=True)
        if rank == 0:
            for old in complete(run_dir)[:-keep] if keep > 0 else []:
                os.remove(old)
            for stale in glob.glob(os.path.join(folder, "step-*.h5.tmp")):   # of saves a crash cut short
                os.remove(stale)
        barrier(tcomm)                  # the old ones are gone before any trainer lists them
    return final


#: room for a checkpoint's HDF5 headers and attributes (8 KB measured with 3 datasets)
META_BYTES = 32 << 10


def space_needed(rep_len: int, own_lens: list, tensors: dict) -> int:
    """Pure: the disk space a checkpoint takes (checked and reserved before it is
    written): its blobs and tables, and room for HDF5's headers."""
    return diskspace.estimate(rep_len + sum(own_lens) + sum(_nbytes(t) for t in tensors.values()),
                              1 + len(own_lens) + len(tensors), META_BYTES)


class CheckpointError(HpcgnnError):
    """A checkpoint could not be written (the previous one is intact)."""


def _nbytes(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(str(t.dtype).replace("torch.", "")).itemsize


def _kept(run_dir: str) -> str:
    done = complete(run_dir)
    return (f"the previous checkpoint {os.path.basename(done[-1])} is intact" if done
            else "no earlier checkpoint exists")


def _check_room(folder: str, need: int, run_dir: str) -> None:
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise CheckpointError(f"{folder}: a checkpoint needs about {need} bytes, the disk has {free} free: "
                              f"disk full, checkpoint not written ({_kept(run_dir)})")


def _write(tcomm, f, guard, step, meta, blobs, tensors, sums, need) -> None:
    """Collective: reserve the file's disk blocks, create every dataset, reserve
    again (their real extent), write, close.  Any failure ends the job on every
    trainer with one line naming the file, the trainer and the cause, and that the
    previous checkpoint is intact (:class:`hpcgnn.io.diskspace.WriteGuard`: a
    parallel HDF5 file that met an error cannot be closed)."""
    rank, size = tcomm.Get_rank(), tcomm.Get_size()
    rep, mine, rep_len, own_lens = blobs
    guard.reserve(f, need)          # before anything is flushed: nothing below can run out of space
    with guard.step("creating its datasets"):
        f.attrs["format"], f.attrs["version"], f.attrs["step"] = FORMAT, VERSION, int(step)
        for k, v in meta.items():
            f.attrs["meta:" + k] = v
        d = f.create_dataset("replicated", (rep_len,), dtype=np.uint8)
        d.attrs["checksum"] = sums["replicated"]
        ds = [f.create_dataset(f"trainers/{r}", (n,), dtype=np.uint8) for r, n in enumerate(own_lens)]
        for r, x in enumerate(ds):
            x.attrs["checksum"] = sums[f"trainers/{r}"]
        tds = {}
        for name, t in sorted(tensors.items()):
            tds[name] = f.create_dataset(f"tensors/{name}", t.shape,
                                         dtype=np.dtype(str(t.dtype).replace("torch.", "")))
            tds[name].attrs["checksum"] = sums[f"tensors/{name}"]
    guard.reserve(f, need)
    with guard.step("writing its data", collective=False):     # independent writes
        if rank == 0:
            d[:] = rep
        ds[rank][:] = mine
        for name, t in sorted(tensors.items()):
            lo, hi = _slice(t.shape[0], rank, size)
            if hi > lo:
                tds[name][lo:hi] = np.asarray(t[np.arange(lo, hi)])
    guard.close(f)


def _checksums(tcomm, rep, mine, tensors) -> dict:
    """Collective: the fletcher checksum of every dataset, the same on every trainer."""
    rank, size = tcomm.Get_rank(), tcomm.Get_size()
    out = {"replicated": tcomm.bcast(_hex(rep) if rank == 0 else None, root=0)}
    for r, h in enumerate(tcomm.allgather(_hex(mine))):
        out[f"trainers/{r}"] = h
    for name, t in sorted(tensors.items()):
        lo, hi = _slice(t.shape[0], rank, size)
        arr = np.asarray(t[np.arange(lo, hi)]) if hi > lo else np.zeros(0, np.uint8)
        row = _nbytes(t) // max(t.shape[0], 1)
        out[f"tensors/{name}"] = _sum_hex(tcomm, fletcher_partial(arr, lo * row))
    return out


def _hex(arr: np.ndarray) -> str:
    return checksum_hex(*fletcher_partial(arr, 0))


def _sum_hex(tcomm, part) -> str:
    s = allreduce(tcomm, part, "sum", dtype=np.uint64)
    return checksum_hex(int(s[0]), int(s[1]))


def save_solo(run_dir: str, step: int, meta: dict, replicated, own, trainers: int) -> str:
    """Independent (no MPI: a peer is dead): write checkpoint ``step`` from this
    process alone, ``own`` standing for every trainer's state.  Another trainer
    may write the same step at once (one per host): each writes its own temporary
    file and the rename is atomic.  Returns the path."""
    folder = os.path.join(run_dir, "checkpoints")
    final = os.path.join(folder, f"step-{step}.h5")
    tmp = os.path.join(folder, f"step-{step}.solo{os.getpid()}.h5.tmp")
    os.makedirs(folder, exist_ok=True)
    rep, mine = _bytes(replicated), _bytes(own)
    try:
        with open_h5(tmp, "w", None) as f:
            f.attrs["format"], f.attrs["version"], f.attrs["step"] = FORMAT, VERSION, int(step)
            f.attrs["solo_of"] = int(trainers)
            for k, v in meta.items():
                f.attrs["meta:" + k] = v
            for name, arr in (("replicated", rep), ("trainers/0", mine)):
                f.create_dataset(name, data=arr).attrs["checksum"] = _hex(arr)
        partial.commit(tmp, final, durable=True)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return final


def complete(run_dir: str) -> list[str]:
    """Complete checkpoints of ``run_dir``, oldest first."""
    paths = glob.glob(os.path.join(run_dir, "checkpoints", "step-*.h5"))
    return sorted((p for p in paths if _NAME.search(p)), key=lambda p: int(_NAME.search(p).group(1)))


def load(tcomm, path: str, meta: dict, tensors: dict | None = None):
    """Collective over the trainers: ``(step, replicated, own)`` of checkpoint
    ``path``, after checking its format and that every ``meta`` entry matches
    (InputError naming the file and the field otherwise); fills ``tensors``.  A
    solo checkpoint gives every trainer the one own state it holds."""
    tensors = tensors or {}
    rank, size = tcomm.Get_rank(), tcomm.Get_size()
    parts = {}
    with exclusive():
        with agreed(tcomm):
            try:
                f = open_h5(path, "r", None)
            except OSError as e:
                text = str(e)
                if any(w in text for w in ("signature not found", "truncated", "bad object header",
                                           "addr overflow", "bad superblock")):
                    raise UnreadableCheckpoint(f"{path}: not a readable checkpoint ({e})") from None
                # permissions, file locks, a stale handle: the file may be fine, so no fallback
                raise InputError(f"{path}: cannot open the checkpoint ({e})") from None
            with f:
                if f.attrs.get("format") != FORMAT:
                    raise UnreadableCheckpoint(f"{path}: not an hpcgnn checkpoint (attribute 'format' is "
                                               f"{f.attrs.get('format')!r})")
                for k, v in meta.items():
                    got = f.attrs.get("meta:" + k)
                    same = np.array_equal(np.asarray(got), np.asarray(v)) if got is not None else False
                    if not same:
                        shown = got.item() if isinstance(got, np.generic) else got      # 2, not np.int64(2)
                        raise InputError(f"{path}: checkpoint field {k!r} is {shown!r}, this run has {v!r} "
                                         "(a checkpoint of another model, settings or graph: resume with the "
                                         "settings that wrote it, or start in a new run_dir)")
                solo = f.attrs.get("solo_of")
                written = int(solo) if solo is not None else len(f["trainers"])
                mine = "trainers/0" if solo is not None else f"trainers/{rank}"
                if mine not in f or written != size:
                    raise InputError(f"{path}: written by {written} trainers, this run has {size}")
                if solo is not None and tensors:
                    raise InputError(f"{path}: written by one trainer alone, without the distributed tables "
                                     f"({', '.join(sorted(tensors))}) this run has")
                for name, t in tensors.items():
                    if f"tensors/{name}" not in f or f[f"tensors/{name}"].shape != tuple(t.shape):
                        raise InputError(f"{path}: no tensor {name!r} of shape {tuple(t.shape)}")
                try:
                    step = int(f.attrs["step"])
                    replicated = _obj(_verified(f, "replicated", path))
                    own = _obj(_verified(f, mine, path))
                    for name, t in sorted(tensors.items()):
                        lo, hi = _slice(t.shape[0], rank, size)
                        rows = f[f"tensors/{name}"][lo:hi]
                        parts[name] = (fletcher_partial(rows, lo * (_nbytes(t) // max(t.shape[0], 1))),
                                       f[f"tensors/{name}"].attrs.get("checksum"))
                        if hi > lo:
                            t[np.arange(lo, hi)] = rows
                except (OSError, KeyError, EOFError, RuntimeError, pickle.UnpicklingError) as e:
                    raise UnreadableCheckpoint(f"{path}: damaged checkpoint ({type(e).__name__}: {e})") from None
        with agreed(tcomm):
            for name, (part, want) in sorted(parts.items()):     # same names, same order on every trainer
                got = _sum_hex(tcomm, part)
                if want is not None and got != want:
                    raise UnreadableCheckpoint(f"{path}: dataset '/tensors/{name}' checksum {got} differs from "
                                               f"the one saved with it ({want}): damaged checkpoint")
        for t in tensors.values():
            t.barrier()
    return step, replicated, own


def _verified(f, name: str, path: str) -> np.ndarray:
    """Dataset ``name``'s bytes, checked against the checksum saved with them
    (checkpoints written before checksums have none)."""
    arr = f[name][:]
    want = f[name].attrs.get("checksum")
    if want is not None and _hex(arr) != want:
        raise UnreadableCheckpoint(f"{path}: dataset '/{name}' checksum {_hex(arr)} differs from the one saved "
                                   f"with it ({want}): damaged checkpoint")
    return arr
