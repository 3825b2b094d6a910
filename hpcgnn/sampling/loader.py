"""``DistNodeDataLoader`` and ``DistEdgeDataLoader``: mini-batches for training.

Creation is collective over the trainers (they agree on the step count, the seed
and, with sampler ranks, hand their batch plans to their samplers).  Iteration is
independent.  Which batches an epoch holds is fixed by the settings alone (see
:mod:`hpcgnn.sampling.plan`); who produces them depends on ``mode``:

``"samplers"`` (the default when the layout has sampler ranks)
    the trainer's sampler ranks produce the batches and send them, at most
    ``prefetch`` in flight per trainer (:mod:`hpcgnn.sampling.remote`);
``"thread"`` (the default otherwise, ``prefetch >= 1``)
    a background thread of the trainer produces up to ``prefetch`` batches ahead
    while the model computes (the sampling kernels and MPI reads release the GIL;
    MPI calls are serialized with :data:`hpcgnn.comm.mpi.LOCK`);
``"inline"`` (``prefetch=0``)
    each batch is produced when asked for.

All three yield identical batches.  ``loader.stats`` holds, for the last epoch,
the seconds the consumer waited for batches, the batches, the sampled edges, the
producer's seconds spent sampling and gathering features (on whichever thread
or rank produced them, overlapped with training unless ``inline``), and with a
feature cache its hits and the lookups of rows held on other nodes.
"""
from __future__ import annotations

import numbers
import queue
import threading
import time

import numpy as np
import torch

from ..comm.agree import agreed
from ..comm.collectives import all_sum
from ..devices import concrete
from ..errors import InputError
from ..graph.dist_graph import as_ids
from .features import FEATURE_ROWS
from .plan import EpochPlan
from .precision import float_features
from .remote import RemoteLoader
from .tasks import EdgeTask, NodeTask


class _IfPresent(str):
    """A default feature name that is read only when the graph has it (DGL's loaders
    read no features, so a ported script must not fail for a graph without them)."""

    def __repr__(self):
        return f"{str(self)!r} if the graph has it"


FEAT, LABEL = _IfPresent("feat"), _IfPresent("label")


def _resolve(g, name):
    """A default name (:data:`FEAT`, :data:`LABEL`) the graph lacks reads nothing."""
    if isinstance(name, _IfPresent):
        return str(name) if str(name) in g.ndata else None
    return name


MODES = ("auto", "inline", "thread", "samplers")
EXCLUDE = (None, "self", "reverse_id")


def _homogeneous(g, ids, kind: str, what: str):
    """DGL's ``{type: per-type ids}`` as homogeneous ids (in the order of the dict),
    also the tensor a split of a per-type mask returns (it says its type); anything
    else is taken as homogeneous ids already."""
    tagged = getattr(ids, "hpcgnn_per_type", None)       # node_split/edge_split of a per-type mask
    if tagged is not None:
        if tagged[0] != kind:
            raise InputError(f"{what}: these are per-type {tagged[0]} ids (of {tagged[1]!r}), not {kind} ids")
        ids = {tagged[1]: ids}
    if not isinstance(ids, dict):
        return ids
    book = g.get_partition_book()
    known = book.ntypes if kind == "node" else book.canonical_etypes
    out = []
    for t, tids in ids.items():
        try:
            book.ntype_id(t) if kind == "node" else book.etype_id(t)
        except (KeyError, ValueError):
            raise InputError(f"{what}: {{type: ids}} names {t!r}, not a {kind} type of graph "
                             f"{g.graph_name!r} ({known})") from None
        tids = as_ids(tids, book.num_nodes_of(t) if kind == "node" else book.num_edges_of(t),
                    f"{what}: the per-type ids of {t!r}")
        homo = book.map_to_homo_nid(tids, t) if kind == "node" else book.map_to_homo_eid(tids, t)
        out.append(np.asarray(homo, dtype=np.int64).reshape(-1))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


class _Loader:
    def __init__(self, g, ids, batch_size, shuffle, drop_last, seed, prefetch, mode, what, make_task):
        ctx = g.context
        self.g, self.what = g, what
        tcomm = ctx.trainer_comm
        with agreed(tcomm):
            if isinstance(batch_size, bool) or not isinstance(batch_size, (numbers.Integral, np.integer)) \
                    or int(batch_size) < 1:
                raise InputError(f"{what}: batch_size must be a positive integer, got {batch_size!r}")
            if isinstance(prefetch, bool) or not isinstance(prefetch, (numbers.Integral, np.integer)) \
                    or int(prefetch) < 0:
                raise InputError(f"{what}: prefetch must be an integer >= 0, got {prefetch!r}")
            if mode not in MODES:
                raise InputError(f"{what}: mode must be one of {MODES}, got {mode!r}")
            n_total = g.num_edges() if isinstance(self, DistEdgeDataLoader) else g.num_nodes()
            ids = as_ids(ids, n_total, f"{what}: ids")
            if not isinstance(self, DistEdgeDataLoader) and len(ids) and len(np.unique(ids)) != len(ids):
                raise InputError(f"{what}: ids hold duplicates ({len(ids) - len(np.unique(ids))} repeated); "
                                 "each id is a seed once per epoch")
            samplers = ctx.samplers_of(ctx.rank)
            if mode == "samplers" and not samplers:
                raise InputError(f"{what}: mode='samplers' but layout '{ctx.layout}' gives trainer "
                                 f"{ctx.rank} no sampler rank")
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        seed = tcomm.bcast(int(seed), root=0)
        every = tcomm.allgather((len(ids), int(batch_size), bool(drop_last)))
        counts = [c for c, _, _ in every]
        if len({(b, d) for _, b, d in every}) > 1:     # the same on every trainer: no agreement needed
            raise InputError(f"{what}: the trainers create their loaders with different (batch_size, drop_last): "
                             f"{[(b, d) for _, b, d in every]} by trainer; creation is collective and the "
                             "epochs must have the same number of steps everywhere")
        own = [EpochPlan.own_steps(c, int(batch_size), bool(drop_last)) for c in counts]
        steps = max(own)
        empty = [r for r, k in enumerate(own) if k == 0]
        if empty and steps > 0:        # the same on every trainer: no agreement needed
            raise InputError(f"{what}: trainer(s) {empty} of {len(counts)} have no full batch of ids "
                             f"({[counts[r] for r in empty]} ids, batch_size={batch_size}, "
                             f"drop_last={bool(drop_last)}) while others have {steps} steps per epoch; "
                             "use fewer trainers or a smaller batch_size")
        self.plan = EpochPlan(ids, int(batch_size), bool(shuffle), bool(drop_last), seed,
                              tcomm.Get_rank(), steps)
        self.task = make_task(self.plan)
        self.prefetch = int(prefetch)
        # data attached on the trainers (g.ndata[k] = DistTensor(...)) is not in the
        # graph the sampler ranks hold: those features are read here
        attached = sorted({getattr(self.task, k, None) for k in ("feat", "label")} - {None} - set(g.tables.ndata))
        with agreed(tcomm):
            if mode == "samplers" and attached:
                raise InputError(f"{what}: mode='samplers' but {attached} were attached on the trainers "
                                 "(g.ndata[...] = DistTensor); sampler ranks read only the graph's own "
                                 "features: use mode='thread'")
        if mode == "auto":
            mode = "samplers" if samplers and not attached else ("thread" if self.prefetch > 0 else "inline")
        self.mode = mode
        self._epoch, self._start = 0, 0
        self.position = (0, 0)
        self.stats = {"wait_s": 0.0, "batches": 0, "sampled_edges": 0}
        self._remote = None
        self._source = None
        # an epoch left unfinished (an iterator neither exhausted nor closed) is closed
        # before the launch ends: its thread stopped, its sampler streams drained
        ctx.on_finalize(self._close_source, first=True)     # before the samplers are released
        if all_sum(tcomm, int(mode == "samplers")) not in (0, tcomm.Get_size()):
            raise InputError(f"{what}: some trainers use sampler ranks and others do not")
        if mode == "samplers" and getattr(self.task, "device", None) is not None:
            self.task.device = None       # batches cross MPI from the sampler ranks: host memory
        if mode == "samplers" and getattr(self.task, "feature_rows", "copy") != "copy":
            self.task.feature_rows = "copy"     # addresses mean nothing in another process
        if mode == "samplers":
            self.task.keep_half = True          # half-precision features cross MPI so; made float32 here
            self._remote = RemoteLoader(ctx, g, self.task, max(1, self.prefetch))

    def __len__(self) -> int:
        return self.plan.steps

    @property
    def batch_size(self) -> int:
        return self.plan.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Iterate epoch ``epoch`` next (from its first step)."""
        self._epoch, self._start = int(epoch), 0

    def finish_epoch(self) -> None:
        """End the epoch being iterated here (a caller that stops it early, as
        ``epoch_steps`` does): the next iteration, and :meth:`state_dict`, start
        the next epoch."""
        e = self.position[0] + (1 if self.position[1] > 0 else 0)
        self._epoch, self._start = e, 0
        self.position = (e, 0)

    def state_dict(self) -> dict:
        """Where the next batch comes from: ``{"epoch", "step"}`` (for checkpoints).
        Inside a ``for`` over the loader, the step after the last batch handed out;
        outside one, where the next ``for`` starts (after a ``break``: the next epoch,
        as the live run goes on)."""
        e, s = self.position if self._source is not None else (self._epoch, self._start)
        return {"epoch": e, "step": s, "seed": self.plan.seed}

    def load_state_dict(self, state: dict) -> None:
        if int(state.get("seed", self.plan.seed)) != self.plan.seed:
            raise InputError(f"{self.what}: checkpoint was written with loader seed {state['seed']}, "
                             f"this loader has seed {self.plan.seed}")
        self._epoch, self._start = int(state["epoch"]), int(state["step"])
        self.position = (self._epoch, self._start)

    def __iter__(self):
        epoch, start = self._epoch, self._start
        self._epoch, self._start = epoch + 1, 0
        self.position = (epoch, start)
        self.stats = {"wait_s": 0.0, "batches": 0, "sampled_edges": 0, "sample_s": 0.0, "fetch_s": 0.0,
                      "cache_hits": 0, "cache_remote_lookups": 0, "h2d_bytes": 0}
        self._close_source()                  # one epoch at a time per loader
        if self.mode == "samplers":
            source = self._remote.epoch(epoch, start, self.plan.steps)
        elif self.mode == "thread":
            source = _Prefetcher(self._producer(epoch, start), self.prefetch)
        else:
            source = _Inline(self._producer(epoch, start))
        self._source = source
        try:
            for step in range(start, self.plan.steps):
                t0 = time.perf_counter()
                b = source.next()
                if hasattr(b, "wait_ready"):
                    b.wait_ready()            # the device waits for the batch's copies, not the host
                if self.mode == "samplers":
                    b.x = float_features(b.x)
                self.stats["wait_s"] += time.perf_counter() - t0
                self.stats["batches"] += 1
                self.stats["sampled_edges"] += b.num_edges
                self.stats["sample_s"] += b.extra.get("sample_s", 0.0)
                self.stats["fetch_s"] += b.extra.get("fetch_s", 0.0)
                self.stats["cache_hits"] += b.extra.get("cache_hits", 0)
                self.stats["cache_remote_lookups"] += b.extra.get("cache_remote_lookups", 0)
                self.stats["h2d_bytes"] += b.extra.get("h2d_bytes", 0)
                # after an epoch's last batch, a checkpoint resumes at the next epoch
                self.position = (epoch, step + 1) if step + 1 < self.plan.steps else (epoch + 1, 0)
                yield b
            self.position = (epoch + 1, 0)
        finally:
            source.close()
            if self._source is source:
                self._source = None

    def _close_source(self) -> None:
        src, self._source = self._source, None
        if src is not None:
            src.close()

    def _producer(self, epoch: int, start: int):
        task, g = self.task, self.g
        order = task.plan.order(epoch)
        for step in range(start, task.plan.steps):
            yield task.make(g, epoch, step, order)


class _Inline:
    def __init__(self, gen):
        self.gen = gen

    def next(self):
        return next(self.gen)

    def close(self):
        self.gen.close()


class _Prefetcher:
    """Runs a batch generator on a daemon thread, ``depth`` batches ahead."""

    def __init__(self, gen, depth: int):
        self.q: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(gen,), name="hpcgnn-prefetch", daemon=True)
        self.thread.start()

    def _put(self, item) -> bool:
        while not self.halt.is_set():
            try:
                self.q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, gen):
        try:
            for b in gen:
                if not self._put(("batch", b)):
                    return
            self._put(("end", None))
        except BaseException as e:      # handed to the consumer, raised there
            self._put(("error", e))

    def next(self):
        kind, v = self.q.get()
        if kind == "error":
            raise v
        if kind == "end":
            raise StopIteration
        return v

    def close(self):
        self.halt.set()
        while True:
            try:
                self.q.get_nowait()
            except queue.Empty:
                break
        self.thread.join()


class DistNodeDataLoader(_Loader):
    """``DistNodeDataLoader(g, nids, sampler, batch_size=1, shuffle=False, drop_last=False)``:
    node-classification mini-batches (:class:`~hpcgnn.sampling.MiniBatch` with ``x``
    and ``y`` of every sampled node) around this trainer's ``nids`` (e.g. from
    :func:`~hpcgnn.graph.node_split`): homogeneous node ids, or DGL's ``{ntype:
    per-type ids}`` (what ``node_split(..., ntype=T)`` gives).

    ``seed``: batches are a function of it (None: drawn from torch's generator on
    trainer 0); ``prefetch``: batches produced ahead (0: inline); ``mode``: see the
    module doc; ``feat``/``label``: node features gathered into ``x``/``y`` (None
    skips; by default ``'feat'`` and ``'label'`` when the graph has them, while a
    name given that the graph lacks is an error).  ``cache_bytes``: keep the
    features of the highest reaching-degree nodes of other nodes' partitions in the memory of whoever gathers them (trainer or
    sampler rank), up to that many bytes (:mod:`hpcgnn.graph.cache`).  ``device``
    (e.g. ``"cuda:0"``): ``x``/``y`` are assembled in that device's memory and the
    cache lives there (inline and thread modes; batches from sampler ranks arrive in
    host memory).  ``labels``: ``"all"`` (``y`` of every sampled node, as PyG's
    ``NeighborLoader``) or ``"seeds"`` (``y`` of the seeds only, ``batch_size`` rows:
    all a node classifier reads, and the other labels are never fetched).
    ``feature_rows``: ``"copy"`` (``x`` a tensor) or ``"refs"`` (``x`` the rows'
    addresses, a :class:`~hpcgnn.graph.row_refs.RowRefs`, read in place by
    :class:`~hpcgnn.train.model.SAGE`'s first layer; inline and thread modes on the
    host, a copy otherwise).
    Collective over the trainers.  Every trainer gets ``len(loader)`` batches per
    epoch (see :mod:`hpcgnn.sampling.plan`).
    """

    def __init__(self, g, nids, sampler, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 *, seed: int | None = None, prefetch: int = 2, mode: str = "auto",
                 feat: str | None = FEAT, label: str | None = LABEL, cache_bytes: int = 0, device=None,
                 labels: str = "all", feature_rows: str = "copy"):
        feat, label = _resolve(g, feat), _resolve(g, label)
        _check_features(g, feat, label, "DistNodeDataLoader")
        with agreed(g.context.trainer_comm):
            nids = _homogeneous(g, nids, "node", "DistNodeDataLoader")
            if labels not in ("all", "seeds"):
                raise InputError(f"DistNodeDataLoader: labels must be 'all' or 'seeds', got {labels!r}")
            if feature_rows not in FEATURE_ROWS:
                raise InputError(f"DistNodeDataLoader: feature_rows must be one of {FEATURE_ROWS}, "
                                 f"got {feature_rows!r}")
            if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (numbers.Integral, np.integer)) \
                    or cache_bytes < 0:
                raise InputError(f"DistNodeDataLoader: cache_bytes must be an integer >= 0 (0: no cache), "
                                 f"got {cache_bytes!r}")
            dev = None if device is None else str(concrete(device))    # "cuda": this thread's GPU
        super().__init__(g, nids, batch_size, shuffle, drop_last, seed, prefetch, mode, "DistNodeDataLoader",
                         lambda plan: NodeTask(sampler, plan, feat, label, int(cache_bytes), dev, labels,
                                               feature_rows if dev is None else "copy"))


class DistEdgeDataLoader(_Loader):
    """``DistEdgeDataLoader(g, eids, sampler, batch_size, negative_sampler=Uniform(k),
    exclude='self')``: link-prediction mini-batches around the seed edges ``eids``
    (homogeneous edge ids, or ``{etype: per-type ids}``).

    Each batch samples the neighbourhoods of both endpoints of its seed edges and of
    the negative pairs; ``edge_label_index``/``edge_label`` name the pairs to score
    (see :class:`~hpcgnn.sampling.MiniBatch`).  ``exclude``: ``None``; ``'self'``
    (the seed edges never appear among the sampled edges, so a model cannot read
    the edge it predicts); ``'reverse_id'`` (also their reverse edges,
    ``reverse_eids[e]``, an int array over all edge ids); or a function of the seed
    edge ids returning edge ids to remove.  Exclusion removes edges after sampling
    (a node may have fewer than ``fanout`` edges left).  Other arguments as
    :class:`DistNodeDataLoader`; ``feat``/``label`` default to ``'feat'`` (when the
    graph has it)/None.
    """

    def __init__(self, g, eids, sampler, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 *, negative_sampler=None, exclude=None, reverse_eids=None, seed: int | None = None,
                 prefetch: int = 2, mode: str = "auto", feat: str | None = FEAT, label: str | None = None):
        what = "DistEdgeDataLoader"
        feat, label = _resolve(g, feat), _resolve(g, label)
        _check_features(g, feat, label, what)
        rev = None
        with agreed(g.context.trainer_comm):
            eids = _homogeneous(g, eids, "edge", what)
            if not (exclude in EXCLUDE or callable(exclude)):
                raise InputError(f"{what}: exclude must be None, 'self', 'reverse_id' or a function, "
                                 f"got {exclude!r}")
            if exclude == "reverse_id":
                if reverse_eids is None:
                    raise InputError(f"{what}: exclude='reverse_id' needs reverse_eids= (the reverse of every edge)")
                rev = as_ids(reverse_eids, g.num_edges(), f"{what}: reverse_eids")
                if len(rev) != g.num_edges():
                    raise InputError(f"{what}: reverse_eids has {len(rev)} entries, the graph has "
                                     f"{g.num_edges()} edges")
            if negative_sampler is not None and not callable(negative_sampler):
                raise InputError(f"{what}: negative_sampler must be callable (e.g. Uniform(1)), "
                                 f"got {negative_sampler!r}")
        super().__init__(g, eids, batch_size, shuffle, drop_last, seed, prefetch, mode, what,
                         lambda plan: EdgeTask(sampler, plan, negative_sampler, exclude, rev, feat, label))


def _check_features(g, feat, label, what):
    with agreed(g.context.trainer_comm):
        for kind, name in (("feat", feat), ("label", label)):
            if name is not None and name not in g.ndata:
                raise InputError(f"{what}: {kind}={name!r} is not a node feature of graph {g.graph_name!r} "
                                 f"(node features: {sorted(g.ndata) or 'none'})")
