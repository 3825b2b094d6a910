"""``node_split`` / ``edge_split``: each trainer's share of a masked id set.

Independent (no communication) and deterministic: every trainer computes its own
share from the mask, the partition book, its trainer rank and the trainer count.
Together the shares of trainers ``0 .. num_trainers-1`` cover the masked ids exactly
once.

**Trainers and partitions.**  Trainer ``i`` of ``T`` sits on partition
``home(i) = i * P // T`` (``P`` partitions), i.e. trainer ranks are dealt to
partitions in order, as the launch places them: with ``t`` trainers per node and
node ``p`` serving partition ``p``, trainers ``p*t .. p*t+t-1`` are on partition
``p``.

**force_even=True** (default, DGL's behaviour): the masked ids, in ascending order
(which is partition order, since partitions are id ranges), are cut into ``T``
contiguous blocks; trainer ``i`` gets positions ``[i*M//T, (i+1)*M//T)`` of the
``M`` masked ids.  Share sizes differ by at most one.  Because blocks follow
partition order, a trainer's block comes from its own partition as far as the
masked ids are spread over partitions like the trainers are; the rest spills
into the neighbouring partition.

**force_even=False**: partition ``p``'s masked ids go to the trainers whose home
is ``p``, cut into contiguous blocks the same way (so every id is local to its
trainer); a partition no trainer calls home (``T < P``) goes to trainer
``p * T // P``.  Shares can then be unequal.

**node_trainer_ids** (an int array or DistTensor of length ``N``, values in
``[0, T)``): trainer ``i`` gets exactly the masked ids ``j`` with
``node_trainer_ids[j] == i`` (``force_even`` is then ignored).

The mask is a NumPy boolean array or torch tensor of length ``N``, or a 1-D
:class:`DistTensor` (nonzero means selected).  With ``ntype`` (``etype``) on a
heterogeneous graph the mask may instead hold one entry per node (edge) of that type
(a per-type array, or ``g.nodes[ntype].data[name]``): the share is then given as
per-type ids, as DGL does.  It is read in chunks of :data:`CHUNK` ids, at most
twice; memory is one chunk plus the result, never an array of all masked ids.
"""
from __future__ import annotations

import numpy as np

from ..comm.context import current_context
from ..errors import InputError
from .dist_graph import TypedTensor
from .dist_tensor import DistTensor
from .policy import PartitionPolicy

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

#: Ids of the mask read at a time.
CHUNK = 1 << 20


def _result(ids: np.ndarray):
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    return torch.from_numpy(ids) if torch is not None else ids


def _reader(arr, n: int, what: str):
    """A function ``(start, stop) -> 1-D array`` over a NumPy array, a torch tensor,
    a DistTensor or a typed view of one (``g.nodes[t].data[name]``)."""
    if isinstance(arr, (DistTensor, TypedTensor)):
        if len(arr.shape) != 1 and not (len(arr.shape) == 2 and arr.shape[1] == 1):
            raise InputError(f"{what}: a DistTensor mask must be 1-D (or N x 1), got shape {arr.shape}")
        if arr.shape[0] != n:
            raise InputError(f"{what}: has {arr.shape[0]} rows, the id space has {n}")

        def read(a, b):
            rows = arr[np.arange(a, b, dtype=np.int64)]
            rows = rows.numpy() if hasattr(rows, "numpy") else np.asarray(rows)
            return rows.reshape(-1)
        return read
    if hasattr(arr, "detach") and hasattr(arr, "numpy"):
        arr = arr.detach().cpu().numpy()
    arr = np.asarray(arr)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InputError(f"{what}: must be a 1-D array of length {n}, got shape {arr.shape}")
    return lambda a, b: arr[a:b]


def _chunks(n: int):
    for a in range(0, n, CHUNK):
        yield a, min(n, a + CHUNK)


def _masked_in(read, lo: int, hi: int, pos_lo: int, pos_hi: int, before: int = 0) -> np.ndarray:
    """Masked ids of ``[lo, hi)`` whose position among masked ids (counting from
    ``before`` at ``lo``) is in ``[pos_lo, pos_hi)``; reads chunk by chunk, counting
    first and collecting only the chunks that overlap."""
    out, seen = [], before
    if pos_hi <= pos_lo:
        return np.empty(0, dtype=np.int64)
    for a in range(lo, hi, CHUNK):
        b = min(hi, a + CHUNK)
        m = np.asarray(read(a, b)) != 0
        c = int(np.count_nonzero(m))
        if seen + c > pos_lo and seen < pos_hi:
            nz = np.flatnonzero(m) + a
            out.append(nz[max(0, pos_lo - seen):pos_hi - seen])
        seen += c
        if seen >= pos_hi:
            break
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _count(read, lo: int, hi: int) -> int:
    return sum(int(np.count_nonzero(np.asarray(read(a, b)) != 0)) for a in range(lo, hi, CHUNK)
               for b in [min(hi, a + CHUNK)])


def trainer_home(rank: int, num_trainers: int, num_parts: int) -> int:
    """The partition trainer ``rank`` sits on: ``rank * P // T``."""
    return rank * num_parts // num_trainers


def _length(arr):
    shape = getattr(arr, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    try:
        return len(arr)
    except TypeError:
        return None


def _per_type_reader(read_t, book, kind: str, tname, as_mask: bool = True):
    """A reader over the homogeneous id space from ``read_t``, a reader over the
    per-type ids of one type: ids of other types read as 0 (a mask's values as 0/1,
    trainer ids as they are)."""
    ranges = book.type_ranges(tname) if kind == "node" else book.etype_ranges(tname)
    to_per = book.map_to_per_ntype if kind == "node" else book.map_to_per_etype

    def read(a, b):
        out = np.zeros(b - a, dtype=np.int64)
        for s, e in ranges:
            lo, hi = max(a, int(s)), min(b, int(e))
            if lo < hi:
                per = to_per(np.array([lo]))[1][0]          # per-type ids of [lo, hi) are consecutive
                v = np.asarray(read_t(int(per), int(per) + hi - lo))
                if not as_mask and v.dtype.kind not in "iu":
                    raise InputError(f"trainer ids must be integers, got {v.dtype}")
                out[lo - a:hi - a] = (v != 0) if as_mask else v
        return out
    return read


def _split(mask, policy: PartitionPolicy, force_even: bool, trainer_ids, rank, num_trainers, what,
           tname=None):
    if num_trainers is None or rank is None:
        raise InputError(f"{what}: pass rank= and num_trainers= (the trainer rank and count)")
    rank, num_trainers = int(rank), int(num_trainers)
    if num_trainers < 1 or not 0 <= rank < num_trainers:
        raise InputError(f"{what}: rank {rank} outside [0, num_trainers={num_trainers})")
    n = policy.get_size()
    book, kind = policy.partition_book, policy.kind
    per_type = None
    if tname is not None and not book.is_homogeneous:
        nt = book.num_nodes_of(tname) if kind == "node" else book.num_edges_of(tname)
        if _length(mask) == nt != n:          # a per-type mask: per-type ids out
            per_type = tname
    if per_type is not None:
        if trainer_ids is not None:
            trainer_ids = _per_type_reader(_reader(trainer_ids, nt, f"{what}: the trainer ids"), book, kind,
                                           per_type, as_mask=False)
        read = _per_type_reader(_reader(mask, nt, f"{what}: the {per_type!r} mask"), book, kind, per_type)
        res = _split(MaskReader(read), policy, force_even, None if trainer_ids is None else MaskReader(trainer_ids),
                     rank, num_trainers, what)
        ids = res.numpy() if hasattr(res, "numpy") else np.asarray(res)
        to_per = book.map_to_per_ntype if kind == "node" else book.map_to_per_etype
        out = _result(to_per(ids)[1] if len(ids) else ids)
        try:            # the loaders take these as ids of that type (not as homogeneous ids)
            out.hpcgnn_per_type = (kind, per_type)
        except AttributeError:      # a NumPy array without torch: no attribute
            pass
        return out
    if tname is not None and not book.is_homogeneous and not isinstance(mask, MaskReader) \
            and _length(mask) not in (n, None):
        raise InputError(f"{what}: the mask has {_length(mask)} rows; with ntype/etype={tname!r} it needs "
                         f"one per {tname!r} ({nt}) or one per {kind} of the graph ({n})")
    read = mask.read if isinstance(mask, MaskReader) else _reader(mask, n, f"{what}: the mask")
    bounds = policy.boundaries
    P = len(bounds) - 1

    if trainer_ids is not None:
        tread = trainer_ids.read if isinstance(trainer_ids, MaskReader) else \
            _reader(trainer_ids, n, f"{what}: the trainer ids")
        out = []
        for a, b in _chunks(n):
            m = np.asarray(read(a, b)) != 0
            t = np.asarray(tread(a, b))
            if t.dtype.kind not in "iu":
                raise InputError(f"{what}: trainer ids must be integers, got {t.dtype}")
            tm = t[m]
            if tm.size and (tm.min() < 0 or tm.max() >= num_trainers):
                raise InputError(f"{what}: a masked id has trainer id outside [0, {num_trainers})")
            out.append(np.flatnonzero(m & (t == rank)) + a)
        return _result(np.concatenate(out) if out else np.empty(0, np.int64))

    if force_even:
        M = _count(read, 0, n)
        lo, hi = rank * M // num_trainers, (rank + 1) * M // num_trainers
        return _result(_masked_in(read, 0, n, lo, hi))

    # force_even=False: partition-local shares
    homes = np.array([trainer_home(i, num_trainers, P) for i in range(num_trainers)])
    out = []
    for p in range(P):
        group = np.flatnonzero(homes == p)
        if group.size == 0:
            group = np.array([p * num_trainers // P])
        if rank not in group:
            continue
        j, g = int(np.flatnonzero(group == rank)[0]), len(group)
        lo_id, hi_id = int(bounds[p]), int(bounds[p + 1])
        M = _count(read, lo_id, hi_id) if g > 1 else None
        if g == 1:
            out.append(_masked_in(read, lo_id, hi_id, 0, hi_id - lo_id))
        else:
            out.append(_masked_in(read, lo_id, hi_id, j * M // g, (j + 1) * M // g))
    return _result(np.concatenate(out) if out else np.empty(0, np.int64))


class MaskReader:
    """A mask already turned into a reader."""

    def __init__(self, read):
        self.read = read


def _book_of(mask, partition_book, what):
    if partition_book is not None:
        return partition_book
    policy = getattr(mask, "part_policy", None)
    if policy is None and hasattr(mask, "tensor"):              # g.nodes[t].data[name]
        policy = getattr(mask.tensor, "part_policy", None)
    if policy is None:
        raise InputError(f"{what}: pass partition_book= (the mask is not graph data, so it names no "
                         "partition book; g.get_partition_book() gives the graph's)")
    return policy.partition_book


def _trainer_of(rank, num_trainers):
    if rank is not None and num_trainers is not None:
        return rank, num_trainers
    ctx = current_context()
    tc = ctx.trainer_comm if ctx is not None else None
    r, n = (tc.Get_rank(), tc.Get_size()) if tc is not None else (0, 1)
    return (r if rank is None else rank), (n if num_trainers is None else num_trainers)


def node_split(nodes, partition_book=None, ntype: str | None = None, rank: int | None = None,
               force_even: bool = True, node_trainer_ids=None, *, num_trainers: int | None = None):
    """Trainer ``rank``'s share (sorted int64 ids, a torch tensor) of the nodes
    selected by the mask ``nodes``; see the module doc for the rules.  The
    arguments are DGL's, in DGL's order.  ``partition_book`` defaults to the book of
    a graph's data given as the mask (``g.ndata["train_mask"]``).  ``rank`` and
    ``num_trainers`` default to this trainer's rank among the trainers and their
    number (from the current :func:`hpcgnn.initialize` context; 0 and 1 without
    one).  On a heterogeneous graph a mask over all nodes gives homogeneous ids
    (``book.map_to_per_ntype`` gives types and per-type ids; ``ntype`` is checked to
    be a type of the book), a mask over the nodes of ``ntype`` gives per-type ids."""
    book = _book_of(nodes, partition_book, "node_split")
    rank, num_trainers = _trainer_of(rank, num_trainers)
    if ntype is not None:
        try:
            ntype = book.ntypes[book.ntype_id(ntype)]
        except ValueError as e:
            raise InputError(f"node_split: {e}") from None
    policy = PartitionPolicy("node", book)          # every node id; ntype picks a per-type mask
    return _split(nodes, policy, force_even, node_trainer_ids, rank, num_trainers, "node_split", tname=ntype)


def edge_split(edges, partition_book=None, etype=None, rank: int | None = None, force_even: bool = True,
               edge_trainer_ids=None, *, num_trainers: int | None = None):
    """Edge counterpart of :func:`node_split` (the mask is over edge ids; ``etype`` a
    canonical triple, ``"src:rel:dst"`` or a relation name)."""
    book = _book_of(edges, partition_book, "edge_split")
    rank, num_trainers = _trainer_of(rank, num_trainers)
    if etype is not None:
        try:
            etype = book.etypes[book.etype_id(etype)]
        except ValueError as e:
            raise InputError(f"edge_split: {e}") from None
    policy = PartitionPolicy("edge", book)
    return _split(edges, policy, force_even, edge_trainer_ids, rank, num_trainers, "edge_split", tname=etype)


__all__ = ["node_split", "edge_split", "trainer_home", "CHUNK"]
