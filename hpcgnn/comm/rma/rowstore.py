"""The one-sided data plane: a distributed table of rows in MPI windows.

A :class:`RowStore` is a ``nrows x row_shape`` table of one NumPy dtype.  Its rows
are cut into contiguous ranges (``boundaries``); range ``k`` lives in the memory of
world rank ``owners[k]`` (a server).  Everyone reads and writes rows by global id:

* **same node** (the owner is on my node, virtual or real): rows are read straight
  from node-shared memory (``Win.Allocate_shared``), zero copies on the owner side;
* **same host, other (virtual) node**: the owner's segment is mapped here too, so
  rows are copied with plain loads (``HPCGNN_SHM_READS=rma`` uses a passive-target
  ``Get`` on the shared window instead, as osc sm would); writes and atomics go
  through the window;
* **other host**: passive-target reads (growing ``Rget``s) on a world window created
  (``Win.Create``) over that same shared memory, so a host holds one copy.

Every window is opened once with ``Lock_all`` at creation and closed at
:meth:`RowStore.free`; a gather's RMA reads name an indexed block of the requested
rows on the target and of their places in ``out`` here: one ``Get`` per range, then
``Flush``, on the shared window; growing ``Rget``s across hosts (see
:attr:`RowStore.get_first_piece_bytes`).  Writes are ``Put`` (:meth:`RowStore.scatter`)
and ``Accumulate`` / ``Get_accumulate`` (atomic per element, the basis of sparse
optimizers), in :mod:`hpcgnn.comm.rma.rowwrites`.

Choices made by measurement (Open MPI 4.1.4, see ``docs``/the report):

* ``Win.Create`` over *any* memory, shared or not, is served on one host by
  ``osc rdma`` over the vader BTL, which copies row by row (0.13-0.17 GB/s against
  1.2 GB/s for ``osc sm``).  Hence the shared window itself is the RMA path inside a
  host (``shm="host"``, the default), and the world window only crosses hosts.
  ``shm="node"`` (or ``HPCGNN_SHM_SCOPE=node``) shares memory only inside each
  (virtual) node, so that virtual nodes on one machine behave like separate hosts
  (tests over TCP); run those with ``--mca osc sm,pt2pt``.
* Mapped rows are copied by a compiled loop prefetching the next block
  (``ext/src/gather_rows.c``: 1.4-1.6x ``torch.index_select``); ids are not sorted
  first (restoring the caller's order cost more than sorted reads saved: 0.5-0.7x).

**Progress.**  With ``osc pt2pt`` (TCP) a passive-target operation completes only
when the owner enters MPI.  Owners must therefore be ranks that keep calling MPI
(servers blocked in a control receive or a barrier) while others gather.

**Accumulate atomicity.**  Accumulates go through one window only (the world window
when the table spans hosts, else the shared window), so they are atomic against
each other wherever they come from.  Mixing ``scatter`` and ``accumulate`` on the
same rows without a :meth:`RowStore.barrier` in between is a race, as in MPI.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ...errors import InputError
from . import hugepages, readstats, rowchecks as rs, transfers as _transfers
from .. import probes, watchdog as _watchdog
from ..agree import agreed
from ..collectives import all_min, collective
from .datatypes import ALIGN as _ALIGN, MAX_OP_BYTES, default_owners as _default_owners, element_type as _element_type
from ..mpi import MPI, serialized
from .facts import RowFacts
from .rowwrites import RowWrites
# compiled: gather_ranges prefetching (ext/src/gather_rows.c)
from ..._ext import gather_ranges as _ext_gather_ranges, row_addresses as _ext_row_addresses, \
    route_by_range as _ext_route_by_range

DIRECT, SHM, WORLD = rs.DIRECT, rs.SHM, rs.WORLD


class RowStore(RowWrites, RowFacts):
    """A distributed ``nrows x row_shape`` table in MPI windows (see module doc).

    Create collectively with :meth:`create`.  Owners fill their rows through
    :attr:`local_rows`, then everyone calls :meth:`barrier`.  ``gather``,
    ``scatter``, ``accumulate`` and ``get_accumulate`` are independent (any rank,
    any time, no matching call on the owner).
    """

    #: Largest number of rows moved by one MPI operation (bounds datatype sizes and
    #: keeps every count and displacement in 32-bit ``int``).
    max_rows_per_op = 1 << 22
    #: A gather from another host is cut into ``Rget``s issued back to back, the
    #: first of about this many bytes and each next one 3x larger (up to
    #: ``max_rows_per_op`` rows), so the owner starts packing a small first piece
    #: while this rank still builds the next pieces' datatypes (10k rows of 400 B
    #: over TCP: 5% faster than one ``Get`` and ``Flush``).  0: one ``Get`` per owner.
    get_first_piece_bytes = 3 << 17
    #: Read rows of other (virtual) nodes of this host straight from the mapped shared
    #: segment instead of with an RMA ``Get``: None follows ``HPCGNN_SHM_READS`` (read at
    #: each gather; ``rma`` turns it off), True/False overrides it.
    direct_shm_reads: bool | None = None

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(cls, ctx, name: str, boundaries, row_shape=(), dtype="float32", owners=None,
               shm: str | None = None) -> "RowStore":
        """Collective over ``ctx.world``: allocate the table and register it with
        ``ctx.track`` (freed by ``ctx.finalize()``).

        ``boundaries``: ``K+1`` non-decreasing row ids from 0 to ``nrows``; range
        ``k`` is rows ``[boundaries[k], boundaries[k+1])``.  ``owners``: ``K`` world
        ranks (default: the server ranks, one range each, or one range per node held
        by its first server).  ``shm``: ``"host"`` (default, or
        ``HPCGNN_SHM_SCOPE``) shares memory across a whole host, ``"node"`` only
        inside each (virtual) node.  Rows start zeroed.  Bad arguments raise the same
        :class:`InputError` on every rank.
        """
        return ctx.track(cls(ctx, name, boundaries, row_shape, dtype, owners, shm))

    def __init__(self, ctx, name, boundaries, row_shape, dtype, owners, shm):
        world = ctx.world
        self.name = str(name)
        self.rank = world.Get_rank()
        self._world = world
        self._freed = False
        scope = self._check_arguments(ctx, boundaries, row_shape, dtype, owners, shm)
        self.nrows = int(self._bounds[-1])
        self.shape = (self.nrows,) + self.row_shape
        self.row_elems = int(np.prod(self.row_shape, dtype=np.int64))
        self.row_bytes = self.row_elems * self.dtype.itemsize
        self.where = f"RowStore {self.name!r} on rank {self.rank}"    # names it in errors
        my_rows = self._place_ranges()
        my_bytes = my_rows * self.row_bytes
        dom_rank, leaders = self._allocate_shared_window(ctx, scope, my_bytes)
        seg = self._expose_to_other_hosts(my_bytes)
        self._elem = None
        try:
            # local work only: an error on one rank is raised on all, and the windows
            # are freed before it propagates
            with agreed(world):
                self._wire_routes(ctx, dom_rank, leaders)
                # Rows move as blocks of bytes (the compiled builder makes them as fast as
                # blocks of a row type, 93 us per 10k rows, and owners pack both alike);
                # reductions need the element type.
                self._elem, self._has_mpi_type = _element_type(self.dtype)
                self._map_local_rows(seg, my_bytes, my_rows)
        except BaseException:
            self._release(locked=False)
            raise
        for w in self._windows():
            w.Lock_all()
        world.Barrier()

    def _check_arguments(self, ctx, boundaries, row_shape, dtype, owners, shm) -> str:
        """Collective: check the layout, row shape, dtype and sharing scope, and that
        every rank passed the same; sets ``dtype``, ``row_shape``, ``_bounds`` and
        ``_owners``.  Returns the scope, ``"host"`` or ``"node"``."""
        world = self._world
        with agreed(world):
            self.dtype = np.dtype(dtype)
            shape = row_shape if isinstance(row_shape, (tuple, list)) else (row_shape,)
            self.row_shape = tuple(int(s) for s in shape)
            if any(s < 0 for s in self.row_shape):
                raise InputError(f"RowStore {self.name!r}: negative row shape {self.row_shape}")
            if owners is None:
                owners = _default_owners(ctx, len(np.asarray(boundaries)) - 1, self.name)
            self._bounds, self._owners = rs.check_layout(boundaries, owners, world.Get_size(), self.name)
            if self.dtype.hasobject or self.dtype.itemsize == 0:
                raise InputError(f"RowStore {self.name!r}: dtype {self.dtype} cannot live in MPI memory "
                                 "(Python objects or no size); use a numeric dtype")
            scope = (shm or os.environ.get("HPCGNN_SHM_SCOPE") or "host").lower()
            if scope not in ("host", "node"):
                src = "shm" if shm else "HPCGNN_SHM_SCOPE"
                raise InputError(f"RowStore {self.name!r}: {src}={scope!r}; choose 'host' or 'node'")
            mine = (self._bounds.tolist(), self._owners.tolist(), self.row_shape, self.dtype.str, scope)
        # every rank takes part in the broadcast (a rank that failed above has raised
        # on all ranks by now), then the comparison is agreed on in turn
        ref = world.bcast(mine, root=0)
        with agreed(world):
            if ref != mine:
                raise InputError(f"RowStore {self.name!r}: ranks disagree on (boundaries, owners, row_shape, "
                                 f"dtype, shm): rank 0 has {ref}, rank {self.rank} has {mine}")
        return scope

    def _place_ranges(self) -> int:
        """Local: where each range sits inside its owner's segment (``_seg_row0``, in
        rows); returns the number of rows of this rank's segment."""
        seg_row0 = np.zeros(len(self._owners), dtype=np.int64)
        seg_rows: dict[int, int] = {}
        for k in range(len(self._owners)):
            o = int(self._owners[k])
            seg_row0[k] = seg_rows.get(o, 0)
            seg_rows[o] = seg_rows.get(o, 0) + int(self._bounds[k + 1] - self._bounds[k])
        self._seg_row0 = seg_row0
        return seg_rows.get(self.rank, 0)

    def _allocate_shared_window(self, ctx, scope: str, my_bytes: int):
        """Collective: the sharing domain (host or node) and its shared window, with
        ``my_bytes`` of this rank's rows.  Returns ``(dom_rank, leaders)``: every
        range owner's rank in the domain (or ``MPI.UNDEFINED``) and every world rank's
        domain leader (its lowest world rank)."""
        world = self._world
        if scope == "node":
            self._domain, self._own_domain = ctx.host_comm, False
        else:
            self._domain, self._own_domain = world.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank), True
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")
        alloc = -(-my_bytes // _ALIGN) * _ALIGN
        self._shwin = MPI.Win.Allocate_shared(alloc, 1, info=info, comm=self._domain)
        info.Free()
        wgroup, dgroup = world.Get_group(), self._domain.Get_group()
        dom_rank = MPI.Group.Translate_ranks(wgroup, [int(o) for o in self._owners], dgroup)
        dgroup.Free()
        wgroup.Free()
        leaders = world.allgather(all_min(self._domain, self.rank))
        self._multi_host = len(set(leaders)) > 1
        return dom_rank, leaders

    def _expose_to_other_hosts(self, my_bytes: int):
        """Collective: my segment (None when it has no bytes), exposed to other hosts
        through a world window when the table spans hosts; probes whether integer
        ``get_accumulate`` can be trusted there."""
        world = self._world
        seg = self._shwin.Shared_query(self._domain.Get_rank())[0] if my_bytes else None
        self._win = None
        if self._multi_host:
            self._win = MPI.Win.Create(seg if seg is not None else None, 1, comm=world)
        # integer get_accumulate across hosts: refused where the MPI library returns
        # wrong old values (Open MPI 4.1's osc rdma; floats are right)
        self._fetch_ok = not (self._multi_host and self.dtype.kind in "iu") or probes.fetch_ok(world, self.dtype)
        return seg

    def _wire_routes(self, ctx, dom_rank, leaders) -> None:
        """Local: the route and target of every range from this rank, the mapped views
        of the ranges read in place, and the window atomics go through."""
        K = len(self._owners)
        my_leader = leaders[self.rank]
        self._route = np.empty(K, dtype=np.int64)
        self._target = np.empty(K, dtype=np.int64)
        self._views: dict[int, np.ndarray] = {}
        self._readable_cache = None
        for k in range(K):
            o = int(self._owners[k])
            if ctx.host_of(o) == ctx.host_id:
                self._route[k], self._target[k] = DIRECT, dom_rank[k]
                self._views[k] = self._range_view(k, dom_rank[k])
            elif leaders[o] == my_leader:
                self._route[k], self._target[k] = SHM, dom_rank[k]
                # Same host: the owner's segment is mapped here too.  Reads copy it
                # with plain loads (what osc sm's Get does, minus building and
                # interpreting a derived datatype); writes and atomics still go
                # through the window.
                self._views[k] = self._range_view(k, dom_rank[k])
            else:
                self._route[k], self._target[k] = WORLD, o
        self._atomic = (self._win, WORLD) if self._multi_host else (self._shwin, SHM)

    def _map_local_rows(self, seg, my_bytes: int, my_rows: int) -> None:
        """Local: ``local_rows``, this rank's rows as an array over its segment (advised
        to huge pages, then zeroed), and ``_local_ranges``, the ranges it owns."""
        self._local_ranges = np.nonzero(self._owners == self.rank)[0]
        if my_bytes:
            mem = np.frombuffer(seg, dtype=np.uint8, count=my_bytes)
            self.local_rows = mem.view(self.dtype).reshape((-1,) + self.row_shape)
            self.huge_pages_advised = hugepages.advise(mem)     # before the first touch
            mem[:] = 0
        else:
            # no bytes: no rows owned, or rows of 0 bytes (still as many as owned)
            self.local_rows = np.empty((my_rows,) + self.row_shape, dtype=self.dtype)
            self.huge_pages_advised = False

    def _range_view(self, k: int, dom_rank: int) -> np.ndarray:
        nk = int(self._bounds[k + 1] - self._bounds[k])
        if nk == 0 or self.row_bytes == 0:
            return np.zeros((nk,) + self.row_shape, dtype=self.dtype)
        buf = self._shwin.Shared_query(dom_rank)[0]
        start = int(self._seg_row0[k]) * self.row_bytes
        mem = np.frombuffer(buf, dtype=np.uint8, count=nk * self.row_bytes, offset=start)
        return mem.view(self.dtype).reshape((nk,) + self.row_shape)

    def _windows(self):
        return [w for w in (self._shwin, self._win) if w is not None]

    # ------------------------------------------------------------------ reads
    @serialized
    def gather(self, ids, out: np.ndarray | None = None) -> np.ndarray:
        """Independent: the rows of ``ids`` (global, any order, repeats allowed), in
        the order asked, as a new ``(len(ids), *row_shape)`` array (or into ``out``)."""
        return self.gather_cached(ids, None, out)[0]

    def gather_cached(self, ids, cache, out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """:meth:`gather`, with the rows of ``cache`` (``(sorted ids, their rows)`` or
        None) served from memory instead: ``(rows, hits)``, ``hits`` the ids served so."""
        self._check_open()
        ids = rs.as_ids(ids, self.nrows, self.where)
        n = len(ids)
        want = (n,) + self.row_shape
        if out is None:
            out = np.empty(want, dtype=self.dtype)
        elif (not isinstance(out, np.ndarray) or out.shape != want or out.dtype != self.dtype
              or not out.flags.c_contiguous or not out.flags.writeable):
            raise InputError(f"{self.where}: out must be a writable C-contiguous {self.dtype} array of shape {want}")
        cache = rs.check_cache(cache, self.row_shape, self.dtype, self.where)
        if n == 0 or self.row_bytes == 0:
            return out, 0
        return self._gather_ranges(ids, out, cache if cache[0] is not None else None)

    @serialized
    def addresses(self, ids, cache=None) -> tuple[np.ndarray, np.ndarray | None, int]:
        """Independent: where this process can read the rows of ``ids`` in place,
        without copying them: ``(addr, fetched, hits)``, ``addr[i]`` (``uintp``) the address
        of row ``ids[i]`` in node-shared memory, in ``cache`` (``(sorted ids,
        rows)``), or in ``fetched``, a new array with the rows of ranges that only RMA
        reaches (read here; None when there are none), ``hits`` how many are in the
        cache.  The addresses stay valid while
        this store is open and ``fetched`` and the cache's rows are alive; rows written
        later show through.  Rows of 0 bytes get no address (all 0)."""
        self._check_open()
        ids = np.ascontiguousarray(rs.as_ids(ids, self.nrows, self.where), dtype=np.int64)
        cids, crows = rs.check_cache(cache, self.row_shape, self.dtype, self.where)
        n = len(ids)
        addr = np.zeros(n, dtype=np.uintp)
        if n == 0 or self.row_bytes == 0:
            return addr, None, 0
        bounds, _, bases = self._readable()
        range_of = np.empty(n, dtype=np.int32)
        left = _ext_row_addresses(bases, bounds, self.row_bytes, ids, addr, range_of, cids, crows)
        fetched = None
        if left:
            pos = np.flatnonzero(range_of >= 0)
            fetched = self._gather_ranges(ids[pos], np.empty((len(pos),) + self.row_shape, dtype=self.dtype))[0]
            addr[pos] = fetched.ctypes.data + np.arange(len(pos), dtype=np.uintp) * np.uintp(self.row_bytes)
        return addr, fetched, int(np.count_nonzero(range_of == -2)) if cids is not None else 0

    def _shm_direct(self) -> bool:
        if self.direct_shm_reads is not None:
            return bool(self.direct_shm_reads)
        return os.environ.get("HPCGNN_SHM_READS", "direct") != "rma"

    def _direct(self, k: int) -> bool:
        return bool(self._route[k] == DIRECT or (self._route[k] == SHM and self._shm_direct()))

    def _readable(self):
        """``(bounds, direct, bases)`` for the compiled lookups: the range bounds as
        int64, which ranges this rank reads in place, and their first rows' addresses
        (0 for the others)."""
        key = self._shm_direct()
        if self._readable_cache is None or self._readable_cache[0] != key:
            K = len(self._bounds) - 1
            direct = np.array([self._direct(k) for k in range(K)], dtype=bool)
            bases = np.zeros(K, dtype=np.uintp)
            for k in np.flatnonzero(direct):
                bases[k] = self._views[k].ctypes.data
            self._readable_cache = (key, np.ascontiguousarray(self._bounds, dtype=np.int64), direct, bases)
        return self._readable_cache[1:]

    def _gather_ranges(self, ids: np.ndarray, out: np.ndarray, cache=None) -> tuple[np.ndarray, int]:
        """The compiled path: one C pass copies every row of a directly readable range
        into place (no sort by owner, no permutation); rows of the other ranges are
        fetched with one RMA ``Get`` per range, issued before the local copies so
        they overlap.  Ids in ``cache`` are copied from it and never fetched (``(out,
        hits)``: how many)."""
        n, K = len(ids), len(self._bounds) - 1
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        flat = out.reshape(n, -1)
        bounds, direct, bases = self._readable()
        range_of = np.empty(n, dtype=np.int32)
        cids, crows = cache if cache is not None else (None, None)
        pending = []
        in_place = direct.any()
        if not direct.all():
            if cids is None:
                # positions of the ids to fetch, grouped by range, and their rows' byte
                # displacements in the owners' segments (one compiled call)
                pos, disps, counts = _ext_route_by_range(bounds, direct.view(np.uint8), ids,
                                                         self._seg_row0, self.row_bytes)
                in_place = in_place and n > int(counts.sum())     # some ids are read in place
            else:
                # which ids need a Get: a pass with no readable range labels them and
                # copies the cached rows
                left = _ext_gather_ranges(np.zeros(K, dtype=np.uintp), bounds, ids, flat, range_of, cids, crows)
                pos, disps, counts = _ext_route_by_range(bounds, direct.view(np.uint8), ids, self._seg_row0,
                                                         self.row_bytes, labels=range_of)
                in_place = in_place and left > int(counts.sum())
            t_issue = time.perf_counter()
            pending = self._issue_gets(flat, pos, disps, counts)
        hits = None
        if not direct.all() and cids is not None:
            hits = int(np.count_nonzero(range_of == -2))
            cids = crows = None            # the labelling pass copied the cached rows already
        if in_place:
            _ext_gather_ranges(bases, bounds, ids, flat, range_of, cids, crows)
        if pending:
            self._finish_gets(pending, counts, t_issue)
        if cache is None:
            return out, 0
        return out, hits if hits is not None else int(np.count_nonzero(range_of == -2))

    @serialized
    def read_remote(self, ids, out) -> None:
        """Independent: the rows of ``ids`` (none read in place: :meth:`direct_views`) by
        RMA straight into ``out``, ``len(ids)`` rows of ``row_bytes`` in any buffer MPI
        takes (NumPy, torch through DLPack, GPU memory where MPI is GPU-aware)."""
        self._check_open()
        ids = np.ascontiguousarray(rs.as_ids(ids, self.nrows, self.where), dtype=np.int64)
        bounds, direct, _ = self._readable()
        pos, disps, counts = _ext_route_by_range(bounds, direct.view(np.uint8), ids, self._seg_row0, self.row_bytes)
        if int(counts.sum()) != len(ids):
            raise InputError(f"{self.where}: read_remote was given ids of rows this process reads in place")
        t_issue = time.perf_counter()
        self._finish_gets(self._issue_gets(out, pos, disps, counts), counts, t_issue)

    def _finish_gets(self, pending, counts, t_issue: float) -> None:
        """Wait for the reads; time those of other hosts' rows, by owner (:mod:`.readstats`)."""
        ks = np.flatnonzero(counts).tolist()
        self._complete(pending, [int(self._owners[k]) for k in ks])
        readstats.add_all([(int(self._owners[k]), int(counts[k]) * self.row_bytes) for k in ks
                           if self._route[k] == WORLD], time.perf_counter() - t_issue)

    def _issue_gets(self, rows2d, pos, disps, counts) -> list:
        """One RMA read per range with ``counts``: the rows land in their places
        ``pos`` of ``rows2d`` (no buffer, no second copy).  Returns what to complete."""
        pending, ends = [], np.cumsum(counts)
        try:
            for k in np.flatnonzero(counts).tolist():
                a, b = int(ends[k] - counts[k]), int(ends[k])
                win = self._shwin if self._route[k] == SHM else self._win
                pending += self._rma(win, int(self._target[k]), k, None, rows2d, "get", origin_rows=pos[a:b],
                                     pipelined=self._route[k] == WORLD, disps=disps[a:b])
        except BaseException:
            self._complete(pending)
            raise
        return pending

    # ------------------------------------------------------------------ RMA core
    def _rma(self, win, target, k, offs, rows2d, kind, op=None, result2d=None, origin_rows=None,
             pipelined=False, disps=None):
        """Issue the operations on range ``k`` (:func:`transfers.issue`): one per chunk
        of at most ``max_rows_per_op`` rows, or (``pipelined`` gets) growing ``Rget``s
        (:func:`rowchecks.pipeline_spans`).  ``offs``: rows of range ``k``, or
        ``disps``: their byte displacements in the target's segment."""
        if disps is None:
            disps = (offs + int(self._seg_row0[k])) * self.row_bytes
        total = len(disps)
        step = max(1, min(int(self.max_rows_per_op), MAX_OP_BYTES // max(self.row_bytes, 1)))
        pipelined = pipelined and kind == "get" and self.get_first_piece_bytes > 0
        if pipelined:
            spans = rs.pipeline_spans(total, self.row_bytes, self.get_first_piece_bytes, step)
        else:
            spans = [(s, min(s + step, total)) for s in range(0, total, step)]
        if kind in ("get", "put"):
            old, per_row = MPI.BYTE, self.row_bytes
        else:
            old, per_row = self._elem, self.row_elems
        return _transfers.issue(win, target, disps, rows2d, kind, spans, old, per_row, self.row_bytes,
                                op=op, result2d=result2d, origin_rows=origin_rows, requests=pipelined)

    def _complete(self, pending, ranks=None) -> None:
        """Wait for the operations ``pending`` on the ranges of world ``ranks``
        (default: every owner), at most ``HPCGNN_TIMEOUT`` (:mod:`.watchdog`)."""
        if not pending:
            return
        with _watchdog.waiting(f"rows of {self.name!r} (one-sided reads and writes)",
                               self._owners.tolist() if ranks is None else ranks):
            _transfers.complete(pending)

    # ------------------------------------------------------------------ sync, lifetime
    @serialized
    def barrier(self, comm=None) -> None:
        """Collective over the world (or ``comm``, e.g. the trainers while the owners
        serve), watched: every write before it (``local_rows`` stores, ``scatter``,
        ``accumulate``) by a rank of the group is visible to its reads after it."""
        self._check_open()
        comm = self._world if comm is None else comm
        with collective(comm, f"the other ranks at the barrier of {self.name!r}"):
            for w in self._windows():
                w.Flush_all()
                w.Sync()
            comm.Barrier()
            for w in self._windows():
                w.Sync()

    @serialized
    def free(self) -> None:
        """Collective over the world: close the epochs, free the windows and /dev/shm.  Idempotent."""
        if self._freed:
            return
        with collective(self._world, f"the other ranks to free {self.name!r}"):
            self._world.Barrier()
        self._release(locked=True)

    def _release(self, locked: bool) -> None:
        """Collective: free the windows, the element type and the domain."""
        self._freed = True
        if locked:
            for w in self._windows():
                w.Unlock_all()
        self._views.clear()
        self.local_rows = None
        if self._win is not None:
            self._win.Free()
        self._shwin.Free()
        if self._elem is not None:
            self._elem.Free()
        if self._own_domain:
            self._domain.Free()
        self._win = self._shwin = None


__all__ = ["RowStore"]
