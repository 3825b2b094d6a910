"""The creation steps of a :class:`~hpcgnn.graph.DistTensor` (its ``__init__``):
checks agreed by every rank, the row layout, and the store made by the servers or
here."""
from __future__ import annotations

import numpy as np

from ..comm.agree import agreed
from ..comm.context import current_context
from ..errors import InputError
from .policy import PartitionPolicy
from .tensor_store import graph_policy, init_by_trainers, init_values, create_entry, partition_owners


def live_context(ctx):
    """``ctx``, or the current context when None; it must be initialized and not finalized."""
    if ctx is None:
        return current_context(required="DistTensor")
    if ctx.finalized:
        raise InputError("DistTensor: runs after hpcgnn.initialize(...) (and before ctx.finalize())")
    return ctx


def checked_shape(shape, name) -> tuple:
    """``shape`` as a tuple of ints: at least one dim, none negative."""
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if len(shape) < 1 or any(s < 0 for s in shape):
        raise InputError(f"DistTensor {name!r}: shape {shape} must have at least one non-negative dim")
    return shape


def row_layout(ctx, reg, shape, name, part_policy):
    """``(bounds, owners, part_policy)``: the row ranges and their owners, from the
    policy given, else the registered tensor of that name, else the partitions of the
    graph held, else equal ranges over the server ranks."""
    if part_policy is not None:
        if not isinstance(part_policy, PartitionPolicy):
            raise InputError(f"DistTensor {name!r}: part_policy must be a PartitionPolicy, "
                             f"got {type(part_policy).__name__}")
        if part_policy.get_size() != shape[0]:
            raise InputError(f"DistTensor {name!r}: shape[0]={shape[0]} but policy "
                             f"{part_policy.policy_str} has {part_policy.get_size()} ids")
        bounds = part_policy.boundaries
        return bounds, partition_owners(ctx, len(bounds) - 1, f"DistTensor {name!r}"), part_policy
    if name is not None and str(name) in reg:
        # a second handle on a named tensor keeps its row layout (and policy)
        old = reg[str(name)]
        return old.bounds, [int(o) for o in old.store.owners], getattr(old, "policy", None)
    policy_of_graph = graph_policy(ctx, shape[0])
    if policy_of_graph is not None:
        # as DGL does: one row per node (edge) of the graph held: rows follow its partitions
        bounds = policy_of_graph.boundaries
        return bounds, partition_owners(ctx, len(bounds) - 1, f"DistTensor {name!r}"), policy_of_graph
    servers = ctx.ranks_of("server") or ([0] if ctx.size == 1 else [])
    if not servers:
        raise InputError(f"DistTensor {name!r}: the layout '{ctx.layout}' has no server rank to hold rows")
    k = len(servers)
    return np.array([shape[0] * i // k for i in range(k + 1)], dtype=np.int64), servers, part_policy


def check_like_registered(old, name: str, shape, npdt, bounds) -> None:
    """A tensor registered as ``name`` (``old``, or None) must have this shape, dtype
    and row layout."""
    if old is not None and (old.shape != shape or old.npdt != npdt or not np.array_equal(old.bounds, bounds)):
        raise InputError(f"DistTensor {name!r}: already exists with shape {old.shape}, dtype "
                         f"{old.npdt}; asked for shape {shape}, dtype {npdt}"
                         + ("" if np.array_equal(old.bounds, bounds) else " and another row layout"))


def check_same_on_all_ranks(comm, name, mine) -> None:
    """Collective over ``comm``: every rank asked for what rank 0 asked for."""
    ref = comm.bcast(mine, root=0)
    if ref != mine:
        raise InputError(f"DistTensor {name!r}: ranks disagree on (name, shape, dtype, rows, "
                         f"persistent): rank 0 has {ref}, rank {comm.Get_rank()} has {mine}")


def create_served(ctx, reg, spec, dtype, init_func):
    """Served launch: the servers create the storage (a command), the trainers fill
    it; on failure it is freed so that the name can be tried again."""
    name, shape = spec[0], spec[1]
    ctx.service.call("create_store", *spec)
    entry = reg[name]
    try:
        init_by_trainers(ctx, entry.store, name, shape, dtype, init_func)
    except BaseException:           # the same error on every trainer (agreed)
        entry.store.barrier(ctx.trainer_comm)
        ctx.service.call("free_store", name)     # the name is free to try again
        raise
    entry.store.barrier(ctx.trainer_comm)
    return entry


def create_here(ctx, reg, spec, dtype, init_func):
    """Every rank of the world: create and register the storage, owners fill their
    rows; on failure it is unregistered and freed."""
    name, shape = spec[0], spec[1]
    entry = create_entry(ctx, *spec)
    store = entry.store
    try:
        with agreed(ctx.world):
            if init_func is not None and store.local_rows.shape[0]:
                lo, hi = store.local_range
                store.local_rows[...] = init_values(init_func, (hi - lo,) + shape[1:], dtype,
                                                     store.local_rows.shape, name)
        store.barrier()
    except BaseException:
        del reg[name]
        store.free()
        raise
    return entry
