"""``DistTensor``: a tensor whose rows are sharded like the nodes or edges they describe.

Storage is a :class:`~hpcgnn.comm.rma.rowstore.RowStore`.  Partition ``p``'s rows live
on the **first server rank of node ``p``** (one partition per node); nodes beyond
the last partition hold no rows.  Every rank reads and writes any row by global id
(one-sided, independent); owners must keep calling MPI meanwhile (servers blocked
in a barrier or a control receive).

Lifetime (no collective ever runs from ``__del__``):

* ``free()`` is collective over ``ctx.world``.  For a non-persistent tensor it
  releases the storage now (every handle of that name then raises on use) and
  forgets the name; for a persistent tensor it only drops this handle: the storage
  stays registered under its name and is released by ``ctx.finalize()``.
* Deleting the Python object never communicates; storage not freed explicitly is
  released by ``ctx.finalize()``.
* Pickling (``torch.save(t, path)``) stores a copy of the rows, a plain tensor,
  not a handle; ``copy.copy`` gives another handle, ``copy.deepcopy`` raises.

Names: the registry lives on the context (``ctx.tensors``).  Creating a tensor
with a name that is registered returns a handle on the same storage (``init_func``
is not called again); with another shape, dtype or row layout it raises the same
:class:`~hpcgnn.errors.InputError` on every rank.  Unnamed tensors get a fresh
name each (creation is collective, so every rank numbers them alike).
"""
from __future__ import annotations

import numpy as np

from ..comm.rma import rowchecks as rs
from ..comm.agree import agreed
from ..comm.rma.rowstore import RowStore
from ..devices import concrete
from ..errors import InputError
from ..partition.featdtype import to_bf16_bits
from . import device_rows, tensor_create
from .cache import RowCache
from .row_refs import RowRefs
from .tensor_store import (Entry, np_dtype, registry, served, torch_dtype, bits_as_torch, bits_dtype, free_entry,
                           partition_owners, torch_as_bits)

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


class DistTensor:
    """A ``shape`` tensor of ``dtype`` whose rows live on the servers (see module doc).

    Collective over ``ctx.world``: every rank (servers included) calls it with the
    same arguments.  ``part_policy``: a :class:`PartitionPolicy` whose id space has
    ``shape[0]`` ids; rows of partition ``p`` go to node ``p``'s first server.
    Without one, rows are cut into equal contiguous ranges, one per server rank.
    ``init_func(shape, dtype)`` is called by each owner for its local rows
    (``(local rows, *shape[1:])``) and must return an array/tensor of that shape;
    rows start at zero without it.
    """

    def __init__(self, shape, dtype, name=None, init_func=None, part_policy=None, persistent=False, *, ctx=None):
        ctx = tensor_create.live_context(ctx)
        is_served = served(ctx)
        # Served launch: the trainers alone call this; servers join through the
        # command loop.  Otherwise every rank of the world calls it.
        comm = ctx.trainer_comm if is_served else ctx.world
        reg = registry(ctx)
        with agreed(comm):
            shape = tensor_create.checked_shape(shape, name)
            npdt = np_dtype(dtype)
            bounds, owners, part_policy = tensor_create.row_layout(ctx, reg, shape, name, part_policy)
            if name is not None:
                name = str(name)
                tensor_create.check_like_registered(reg.get(name), name, shape, npdt, bounds)
            tensor_create.check_same_on_all_ranks(comm, name, (name, shape, npdt.str, bounds.tolist(), bool(persistent)))
        if name is None:
            ctx.tensor_counter += 1
            name = f"__anonymous_{ctx.tensor_counter}"
        entry = reg.get(name)
        if entry is None:
            spec = (name, shape, npdt.str, np.asarray(bounds).tolist(), list(owners), bool(persistent))
            if is_served:
                entry = tensor_create.create_served(ctx, reg, spec, dtype, init_func)
            else:
                entry = tensor_create.create_here(ctx, reg, spec, dtype, init_func)
        self._ctx = ctx
        self._entry = entry
        self._store = entry.store
        self._name = name
        self._shape = shape
        self._npdt = npdt
        self._dtype = dtype if (torch is not None and isinstance(dtype, torch.dtype)) else (torch_dtype(npdt) or npdt)
        self._bits = None
        self._rounded = False
        self._policy = part_policy
        if getattr(entry, "policy", None) is None:
            entry.policy = part_policy
        self._persistent = entry.persistent
        self._released = False
        self._mapped: dict = {}          # device -> MappedRows (device_rows)

    @classmethod
    def from_store(cls, ctx, store: RowStore, name: str, part_policy=None, logical_dtype=None) -> "DistTensor":
        """Independent: a handle on an existing :class:`RowStore` (e.g. a loaded
        graph's feature table).  Not registered by name and persistent: ``free()``
        drops the handle only; whoever created the store frees it.
        ``logical_dtype``: a feature partitioned at half precision (``--feat-dtype``):
        ``"bfloat16"`` (the store holds the bit patterns, ``uint16``; the tensor reads
        and writes ``torch.bfloat16`` rows) or ``"float16"``; writes of other floats
        are rounded to it."""
        bits = bits_dtype(logical_dtype)
        if bits is not None and store.dtype != np.uint16:
            raise InputError(f"DistTensor {name!r}: a {logical_dtype} tensor needs a uint16 store, got {store.dtype}")
        self = cls.__new__(cls)
        self._ctx = ctx
        self._entry = Entry(store, tuple(store.shape), store.dtype, np.asarray(store.bounds), True)
        self._store = store
        self._name = str(name)
        self._shape = tuple(store.shape)
        self._npdt = store.dtype
        self._bits = bits
        self._rounded = logical_dtype in ("bfloat16", "float16")
        self._dtype = bits or torch_dtype(store.dtype) or store.dtype
        self._policy = part_policy
        self._persistent = True
        self._released = False
        self._mapped = {}
        return self

    # -- facts -------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self):
        """The torch dtype (the NumPy dtype when torch has none); ``torch.bfloat16``
        for features partitioned with ``--feat-dtype bf16``."""
        return self._dtype

    @property
    def np_dtype(self) -> np.dtype:
        """The NumPy dtype of the stored rows (of an ``out=`` array for :meth:`gather`);
        ``uint16`` (the bit patterns) for a ``torch.bfloat16`` tensor."""
        return self._npdt

    @property
    def name(self) -> str:
        return self._name

    @property
    def part_policy(self):
        return self._policy

    @property
    def persistent(self) -> bool:
        return self._persistent

    def __len__(self) -> int:
        return self._shape[0]

    def __repr__(self) -> str:
        return f"DistTensor({self._name!r}, shape={self._shape}, dtype={self._dtype})"

    def __reduce_ex__(self, protocol):
        """Pickled (``torch.save(t, path)``, as DGL's examples save embeddings) as
        its rows: every row read here, independent and one-sided, into a plain
        tensor (NumPy array for a dtype torch lacks), which is what loading gives
        back.  A handle means nothing outside this job's MPI windows."""
        return self[0:len(self)].__reduce_ex__(protocol)

    def __copy__(self) -> "DistTensor":
        """``copy.copy``: another handle on the same rows (no rows are read)."""
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        return c

    def __deepcopy__(self, memo):
        raise InputError(f"DistTensor {self._name!r}: cannot be deep-copied (its rows live in MPI windows "
                         "shared by the job); copy.copy gives another handle on them, "
                         "t[0:len(t)] a local copy of the rows")

    @property
    def ctx(self):
        """The context this tensor was created in."""
        return self._ctx

    def open_store(self):
        """The :class:`~hpcgnn.comm.rma.rowstore.RowStore` holding the rows (for the
        cache and the sparse optimizers); InputError once the tensor was freed."""
        if self._released or self._store.freed:
            raise InputError(f"DistTensor {self._name!r}: the tensor has been freed")
        return self._store

    # -- rows --------------------------------------------------------------------
    def index(self, ids):
        """A slice as the ids it selects, a single id as a 1-element array (as DGL
        does); anything else as given (checked by the store)."""
        if isinstance(ids, slice):
            return np.arange(*ids.indices(self._shape[0]), dtype=np.int64)
        if isinstance(ids, (int, np.integer)) or (hasattr(ids, "ndim") and ids.ndim == 0):
            return np.asarray(ids).reshape(1)
        return ids

    def __getitem__(self, ids):
        """Independent: rows of the global ``ids`` (torch/NumPy ints, 1-D, any order,
        repeats allowed; a slice; one id gives one row), in the order asked, as a
        torch tensor (NumPy when torch cannot hold the dtype).  Rows held by
        :meth:`enable_cache` come from memory."""
        return self.gather(ids)

    def gather(self, ids, out=None):
        """Independent: ``self[ids]``, written into ``out`` when given (a C-contiguous
        CPU tensor or NumPy array of shape ``(len(ids), *shape[1:])`` and this
        dtype, returned as it came).  A buffer reused from batch to batch spares
        the page faults of a fresh allocation (for a batch's 64 MB of feature rows
        they cost as much as the copy itself)."""
        ids = self.index(ids)
        out_np = None
        if out is not None:
            is_t = torch is not None and isinstance(out, torch.Tensor)
            if is_t and self._bits is not None and out.dtype == self._bits and out.device.type == "cpu":
                out_np = torch_as_bits(out, self._npdt)          # a bfloat16 buffer: its bits
            else:
                out_np = out.detach().numpy() if is_t and out.device.type == "cpu" else out
            if not isinstance(out_np, np.ndarray):
                raise InputError(f"DistTensor {self._name!r}: out must be a CPU tensor or a NumPy array")
        cache = getattr(self, "_cache", None)
        if cache is not None and cache.device is not None:       # rows on a device: read them all here
            rows = self._host_gather_for_device(cache, ids)
            if out_np is not None:
                self._check_out(out_np, len(rows))
                out_np[...] = rows
                rows = out_np
        elif cache is not None:
            rows = self._cached_gather(cache, ids, out_np)
        else:
            rows = self.open_store().gather(ids, out_np)
        if out is not None:
            return out
        return self.as_torch(rows)

    def as_torch(self, rows: np.ndarray):
        """Rows as read from the store, as this tensor hands them out: a tensor of
        :attr:`dtype` (no copy), or the NumPy array when torch cannot hold its dtype."""
        if self._bits is not None:
            return bits_as_torch(rows, self._bits)
        if torch is not None and torch_dtype(self._npdt) is not None:
            return torch.from_numpy(rows)
        return rows

    def row_refs(self, ids):
        """Independent: the rows of ``ids`` as a :class:`~hpcgnn.graph.row_refs.RowRefs`
        (their addresses in this process: node-shared memory, this tensor's host cache,
        or a buffer with the rows only RMA reaches, fetched now) instead of a copy; None
        where that does not apply (a dtype torch cannot hold, rows of 0 bytes, a cache
        on a device)."""
        ids = self.index(ids)
        cache = getattr(self, "_cache", None)
        tdt = self._bits or (torch_dtype(self._npdt) if torch is not None else None)
        if tdt is None or (cache is not None and cache.device is not None):
            return None
        st, ids = self._store_ids(ids)
        if st.row_bytes == 0:
            return None
        ctuple = (cache.ids, cache.rows) if cache is not None and len(cache) else None
        addr, fetched, hits = st.addresses(ids, cache=ctuple)
        if cache is not None:
            cache.count(ids, hits)
        keep = (st, fetched) + ((cache.rows,) if ctuple else ())
        return RowRefs(addr, tuple(self._shape[1:]), tdt, keep)

    def _check_out(self, out: np.ndarray, n: int) -> None:
        want = (n,) + tuple(self._shape[1:])
        if out.shape != want or out.dtype != self._npdt or not out.flags.c_contiguous:
            raise InputError(f"DistTensor {self._name!r}: out must be a C-contiguous {self._npdt} array of "
                             f"shape {want}, got {out.dtype} {out.shape}")

    def __setitem__(self, ids, values) -> None:
        """Independent: write ``values[i]`` into row ``ids[i]`` (last wins on repeats);
        complete at the owner on return, visible to others after :meth:`barrier`.
        Writing drops this handle's row cache (cached rows would be stale).  A
        feature partitioned at half precision takes values of its dtype, or other
        floats rounded to nearest even."""
        self._cache = None
        self.open_store().scatter(self.index(ids), self._stored_values(values))

    def _stored_values(self, values):
        """``values`` as the store holds them: unchanged, or for a half-precision
        feature its rows (bfloat16: their bits), other floats rounded to nearest even."""
        if not self._rounded:
            return values
        if torch is not None and isinstance(values, torch.Tensor):
            if values.dtype == self._bits:
                return torch_as_bits(values.cpu().contiguous(), self._npdt)
            values = values.detach().cpu().numpy()
        a = np.asarray(values)
        if a.dtype.kind != "f":
            raise InputError(f"DistTensor {self._name!r}: a {self._dtype} feature takes floating values, "
                             f"got {a.dtype}")
        return to_bf16_bits(a) if self._bits is not None else a.astype(self._npdt)

    # -- hot-row cache --------------------------------------------------------------
    def enable_cache(self, budget_bytes: int, hotness=None, graph=None, device=None, rows=None):
        """Independent: keep the hottest rows that live on other nodes in this
        process (see :mod:`hpcgnn.graph.cache`), at most ``budget_bytes``; returns
        the :class:`~hpcgnn.graph.cache.RowCache` (``.stats()``: hits).  For tensors
        that do not change (node features).  ``device``: keep the cached rows in that
        device's memory (a GPU), for :meth:`gather_to`.  ``rows``: only these rows
        may be cached (ids or a boolean mask)."""
        self._cache = RowCache(self, budget_bytes, hotness=hotness, graph=graph, device=device, rows=rows)
        return self._cache

    def gather_to(self, ids, device) -> "torch.Tensor":
        """Independent: the rows of ``ids`` as a tensor on ``device``.  With a cache on
        that device, cached rows are copied there and only the others are read and
        moved (staged in pinned memory for CUDA); bitwise the same as
        ``self[ids].to(device)``."""
        device = concrete(device)
        ids = self.index(ids)
        cache = getattr(self, "_cache", None)
        if cache is None or cache.device is None or cache.device != device or not len(cache):
            if cache is not None and cache.device is not None:
                return self.as_torch(self._host_gather_for_device(cache, ids)).to(device)
            return self._staged(ids, device)
        st, ids = self._store_ids(ids)
        hit, at = cache.split(ids)
        miss = np.flatnonzero(~hit)
        out = torch.empty((len(ids),) + tuple(self.shape[1:]), dtype=cache.dev_rows.dtype, device=device)
        if len(miss):
            out[torch.from_numpy(miss).to(device)] = self._staged(ids[miss], device)
        if len(at):
            out[torch.from_numpy(np.flatnonzero(hit)).to(device)] = cache.dev_rows[torch.from_numpy(at).to(device)]
        cache.count(ids, len(at))
        return out

    def _staged(self, ids, device):
        """``self[ids]`` on ``device`` (no cache): this host's rows gathered by the
        device itself from the mapped shared memory (:mod:`hpcgnn.graph.device_rows`),
        the others read here; for CUDA straight into pinned host memory (torch's
        caching host allocator: no fresh pages and no second copy, as pinning
        ``self[ids]`` would take), then copied asynchronously."""
        if not isinstance(self._dtype, torch.dtype):
            return _to_device(self[ids], device)
        if device_rows.wanted(device):
            mapped = self._mapped_rows(device)
            if mapped is not None:
                st, ids = self._store_ids(ids)
                return mapped.gather(ids, self._shape[1:], self._dtype, lambda r: self._host_rows(r, device))
        return self._host_rows(ids, device).to(device, non_blocking=True)

    def _host_rows(self, ids, device):
        """``self[ids]`` read by this process, into pinned memory when ``device`` is a GPU."""
        if device.type != "cuda":
            return self.as_torch(self.open_store().gather(ids))
        buf = torch.empty((len(ids),) + tuple(self._shape[1:]), dtype=self._dtype, pin_memory=True)
        self.open_store().gather(ids, out=torch_as_bits(buf, self._npdt) if self._bits is not None else buf.numpy())
        return buf

    def _mapped_rows(self, device):
        """This tensor's host segments as ``device`` reads them (made once per device)."""
        key = str(device)
        if key not in self._mapped:
            self._mapped[key] = device_rows.mapped_rows(self.open_store(), device, self._dtype,
                                                        f"DistTensor {self._name!r}")
        return self._mapped[key]

    def _host_gather_for_device(self, cache, ids) -> np.ndarray:
        """A cache on another device: read everything from the store."""
        st, ids = self._store_ids(ids)
        cache.count(ids, 0)
        return st.gather(ids)

    def _store_ids(self, ids):
        """The open row store and ``ids`` checked against it (int64 array)."""
        st = self.open_store()
        return st, rs.as_ids(ids, st.nrows, st.where)

    def disable_cache(self) -> None:
        self._cache = None

    @property
    def cache(self):
        """The row cache, or None."""
        return getattr(self, "_cache", None)

    def _cached_gather(self, cache, ids, out=None) -> np.ndarray:
        st, ids = self._store_ids(ids)
        out, hits = st.gather_cached(ids, (cache.ids, cache.rows) if len(cache) else None, out)
        cache.count(ids, hits)
        return out

    def barrier(self) -> None:
        """Collective over the trainers (served launch) or the world: writes before it
        are visible to reads after."""
        st = self.open_store()
        if served(self._ctx):
            st.barrier(self._ctx.trainer_comm)
        else:
            st.barrier()

    def free(self) -> None:
        """Collective over the trainers (served launch) or the world (see the module
        doc for persistent tensors)."""
        if self._released:
            return
        self._released = True
        for m in self._mapped.values():
            if m is not None:
                m.close()
        if self._persistent:
            return
        reg = registry(self._ctx)
        if reg.get(self._name) is not self._entry:
            return
        if served(self._ctx):
            self._ctx.service.call("free_store", self._name)
        else:
            free_entry(self._ctx, self._name)


__all__ = ["DistTensor", "partition_owners"]


def _to_device(t, device):
    """Host tensor -> ``device``; through pinned memory (asynchronous copy) for CUDA."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
