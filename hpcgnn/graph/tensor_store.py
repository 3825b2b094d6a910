"""The storage behind :class:`~hpcgnn.graph.DistTensor`: the registry of named
tensors on the context, which ranks own which rows (the partitions' servers, or
the graph's own layout for graph-sized tensors), creation and release of the
:class:`~hpcgnn.comm.rma.rowstore.RowStore`, and the initial values."""
from __future__ import annotations

import numpy as np

from ..comm.agree import agreed
from ..comm.rma.rowstore import RowStore
from ..errors import InputError
from ..partition.book import RangePartitionBook
from .policy import PartitionPolicy

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def np_dtype(dtype) -> np.dtype:
    if torch is not None and isinstance(dtype, torch.dtype):
        try:
            return torch.empty(0, dtype=dtype).numpy().dtype
        except TypeError:
            raise InputError(f"DistTensor: dtype {dtype} has no NumPy equivalent") from None
    try:
        return np.dtype(dtype)
    except TypeError:
        raise InputError(f"DistTensor: unknown dtype {dtype!r}") from None


def torch_dtype(npdt: np.dtype):
    if torch is None:
        return None
    try:
        return torch.from_numpy(np.empty(0, dtype=npdt)).dtype
    except TypeError:
        return None


def bits_dtype(logical):
    """The torch dtype of a feature a row store holds as the bits of another dtype
    (``'bfloat16'``, as ``uint16``: NumPy has no bfloat16), else None."""
    return torch.bfloat16 if torch is not None and logical == "bfloat16" else None


def bits_as_torch(rows: np.ndarray, tdt) -> "torch.Tensor":
    """Stored bits (``uint16``) as a tensor of ``tdt`` (``torch.bfloat16``), no copy."""
    return torch.from_numpy(np.ascontiguousarray(rows).view(np.int16)).view(tdt)


def torch_as_bits(t, npdt: np.dtype) -> np.ndarray:
    """A CPU tensor of a bits dtype (``torch.bfloat16``) as its stored bits, no copy."""
    return t.detach().view(torch.int16).numpy().view(npdt)


def registry(ctx) -> dict:
    """The context's DistTensor storage entries by name (``ctx.tensors``)."""
    return ctx.tensors


def partition_owners(ctx, num_parts: int, what: str) -> list[int]:
    """World rank holding each partition: the first server of node ``p``.  Raises
    :class:`InputError` (same on every rank: pure function of the layout) when
    there are fewer nodes than partitions or a node has no server."""
    if ctx.size == 1:                 # one process (standalone): it holds every partition
        return [0] * num_parts
    if num_parts > ctx.num_hosts:
        raise InputError(f"{what}: {num_parts} partitions but the launch has {ctx.num_hosts} host(s); "
                         "one node serves each partition (launch more nodes or set ranks_per_node)")
    owners = []
    for p in range(num_parts):
        srv = ctx.ranks_of("server", host=p)
        if not srv:
            raise InputError(f"{what}: node {p} has no server rank to hold partition {p} "
                             f"(layout '{ctx.layout}')")
        owners.append(srv[0])
    return owners


def graph_policy(ctx, n: int):
    """The node (else edge) :class:`PartitionPolicy` of the graph this context holds
    when it has ``n`` nodes (edges) and that choice is unique; else None."""
    svc = getattr(ctx, "service", None)
    found = {}
    for t in (getattr(svc, "graphs", None) or {}).values():
        book = RangePartitionBook(t.config, min(ctx.host_id, t.num_parts - 1))
        cands = [PartitionPolicy("node", book), PartitionPolicy("edge", book)]
        if not book.is_homogeneous:         # or the ids of one type (DGL's per-type policies)
            cands += [PartitionPolicy(f"node:{x}", book) for x in book.ntypes if len(book.ntypes) > 1]
            cands += [PartitionPolicy(f"edge:{x}", book) for x in book.etypes if len(book.etypes) > 1]
        for pol in cands:
            if pol.get_size() == n:
                found[(pol.policy_str, tuple(pol.boundaries.tolist()))] = pol
    if len(found) != 1:
        return None
    return next(iter(found.values()))


class Entry:
    """One registered storage: the RowStore and what it was created as."""

    def __init__(self, store, shape, npdt, bounds, persistent):
        self.store, self.shape, self.npdt, self.bounds, self.persistent = store, shape, npdt, bounds, persistent
        self.policy = None        # the PartitionPolicy its first handle was created with


def served(ctx) -> bool:
    svc = getattr(ctx, "service", None)
    return bool(svc is not None and svc.serving and not svc.stopped and ctx.is_trainer
                and svc.channel.followers)


def create_entry(ctx, name, shape, dtype_str, bounds, owners, persistent) -> "Entry":
    """Collective over ``ctx.world``: allocate a tensor's storage and register it by name."""
    npdt = np.dtype(dtype_str)
    shape = tuple(shape)
    bounds = np.asarray(bounds, dtype=np.int64)
    store = RowStore.create(ctx, f"DistTensor:{name}", bounds, shape[1:], npdt, owners=list(owners))
    entry = Entry(store, shape, npdt, bounds, bool(persistent))
    registry(ctx)[name] = entry
    return entry


def free_entry(ctx, name) -> None:
    """Collective over ``ctx.world``: release a registered tensor's storage."""
    entry = registry(ctx).pop(name, None)
    if entry is not None:
        entry.store.free()


def init_values(init_func, shape, dtype, expect, name):
    vals = init_func(shape, dtype)
    if hasattr(vals, "detach"):
        vals = vals.detach().cpu().numpy()
    vals = np.asarray(vals)
    if vals.shape != tuple(expect):
        raise InputError(f"DistTensor {name!r}: init_func returned shape {vals.shape}, expected {tuple(expect)}")
    # the same rule in both modes: casts within a kind (float64 -> float32) are fine,
    # across kinds (2.9 -> an integer) are refused
    npdt = np_dtype(dtype)
    if not np.can_cast(vals.dtype, npdt, "same_kind"):
        raise InputError(f"DistTensor {name!r}: init_func returned {vals.dtype} values for a {npdt} tensor")
    return vals.astype(npdt, copy=False)


#: rows a trainer initialises per init_func call (bounds its memory)
INIT_CHUNK_BYTES = 64 << 20


def init_by_trainers(ctx, store, name, shape, dtype, init_func) -> None:
    """Trainers (collective over them): fill the rows with ``init_func``, each trainer
    an equal contiguous share, in chunks, written with one-sided puts."""
    if init_func is None:
        return
    comm = ctx.trainer_comm
    r, t = comm.Get_rank(), comm.Get_size()
    lo, hi = shape[0] * r // t, shape[0] * (r + 1) // t
    row_bytes = max(store.row_bytes, 1)
    step = max(1, INIT_CHUNK_BYTES // row_bytes)
    with agreed(comm):
        for a in range(lo, hi, step):
            b = min(hi, a + step)
            vals = init_values(init_func, (b - a,) + shape[1:], dtype, (b - a,) + shape[1:], name)
            store.scatter(np.arange(a, b, dtype=np.int64), vals)
