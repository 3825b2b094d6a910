"""``initialize()``: split one MPI launch into nodes and roles.

Returns a :class:`Context` holding the world, node, role and trainer
communicators.  ``Context.finalize()`` frees, collectively and in reverse order, the
windows registered with :meth:`Context.track` and then the communicators it created.

:func:`current_context` is the one accessor of process-global state here: the
contexts :func:`hpcgnn.initialize` (or a standalone ``DistGraph``) opened and not yet
finalized, newest last, so that DGL-style calls (``DistGraph(name)``) may omit
``ctx=``.
"""
from __future__ import annotations

import os
import socket

from ..errors import InputError, LayoutError
from . import failure, peers, rss, watchdog
from .agree import raise_if_any
from .layout import ROLES, Layout, describe_plan, plan_roles
from .mpi import MPI


class Context:
    """What a rank knows about the launch after :func:`initialize`.

    A *host* is a machine of the launch (or a virtual one of ``ranks_per_node``
    ranks); graph vertices are *nodes* elsewhere in hpcgnn.  ``host_id``,
    ``num_hosts``, ``host_comm`` and :meth:`host_of` say so; ``node_id``,
    ``num_nodes``, ``node_comm`` and :meth:`node_of` are the same values under the
    names SLURM and DGL use for machines.

    Attributes: ``world``, ``host_comm`` (ranks of this host), ``role_comm`` (all
    ranks of this rank's role), ``node_role_comm`` (ranks of this role on this host),
    ``trainer_comm`` (``None`` unless a trainer), ``role``, ``host_id``,
    ``num_hosts``, ``local_rank`` / ``local_size`` (this rank's place among its
    host's ranks), ``rank``, ``size``, ``layout``, ``plan`` (roles by host and local
    rank), ``memory`` (after :meth:`finalize`: the peak RSS of every role's ranks,
    :func:`~hpcgnn.comm.rss.role_summary`).
    """

    def __init__(self, world, layout, plan, node_id, node_comm, role_comm, node_role_comm, node_of):
        self.world = world
        self.layout = layout
        self.plan = plan
        self.node_id = node_id
        self.num_nodes = len(plan)
        self.node_comm = node_comm
        self.local_rank = node_comm.Get_rank()
        self.local_size = node_comm.Get_size()
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        self.role = plan[node_id][self.local_rank]
        self.role_comm = role_comm
        self.node_role_comm = node_role_comm
        self.trainer_comm = role_comm if self.role == "trainer" else None
        self._node_of = node_of          # world rank -> node id
        seen: dict[int, int] = {}
        self._role_of = []               # world rank -> role
        for r in range(len(node_of)):
            k = node_of[r]
            self._role_of.append(plan[k][seen.get(k, 0)])
            seen[k] = seen.get(k, 0) + 1
        self._resources: list = []
        self._finalize_hooks: list = []
        self.service = None               # set by hpcgnn.initialize (a hpcgnn.graph.service.Service)
        self.tensors: dict = {}           # DistTensor storage by name (hpcgnn.graph.tensor_store)
        self.tensor_counter = 0           # names of anonymous DistTensors
        self._comms = [node_role_comm, role_comm, node_comm]
        self.finalized = False
        self.memory: dict | None = None   # at finalize: peak RSS per role (rss.role_summary)

    # -- who is where -----------------------------------------------------
    @property
    def host_id(self) -> int:
        """This rank's host (0-based; ``node_id``)."""
        return self.node_id

    @property
    def num_hosts(self) -> int:
        """Hosts of the launch (``num_nodes``)."""
        return self.num_nodes

    @property
    def host_comm(self):
        """The ranks of this host (``node_comm``)."""
        return self.node_comm

    def host_of(self, world_rank: int) -> int:
        """The host of any world rank (``node_of``; independent)."""
        return self._node_of[world_rank]

    def role_of(self, world_rank: int) -> str:
        """Role of any world rank (independent, no communication)."""
        return self._role_of[world_rank]

    def ranks_of(self, role: str, node: int | None = None) -> list[int]:
        """World ranks holding ``role`` (optionally on one node), ascending."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles are {ROLES}")
        return [r for r in range(self.size)
                if self.role_of(r) == role and (node is None or self._node_of[r] == node)]

    def node_of(self, world_rank: int) -> int:
        """Node id of a world rank."""
        return self._node_of[world_rank]

    def samplers_of(self, trainer_rank: int) -> list[int]:
        """Sampler ranks that produce mini-batches for ``trainer_rank`` (may be empty).

        Trainers and samplers are each listed in rank order (so node by node); with
        ``S >= T`` samplers, trainer ``i`` gets samplers ``i, i+T, i+2T, ...``; with
        fewer, samplers are shared: trainer ``i`` gets sampler ``i % S``."""
        trainers, samplers = self.ranks_of("trainer"), self.ranks_of("sampler")
        if not samplers or trainer_rank not in trainers:
            return []
        i, T, S = trainers.index(trainer_rank), len(trainers), len(samplers)
        return samplers[i::T] if S >= T else [samplers[i % S]]

    def trainers_of(self, sampler_rank: int) -> list[int]:
        """Trainer ranks ``sampler_rank`` produces mini-batches for."""
        return [t for t in self.ranks_of("trainer") if sampler_rank in self.samplers_of(t)]

    @property
    def is_trainer(self) -> bool:
        return self.role == "trainer"

    @property
    def is_server(self) -> bool:
        return self.role == "server"

    @property
    def is_sampler(self) -> bool:
        return self.role == "sampler"

    # -- lifetime ---------------------------------------------------------
    def track(self, resource):
        """Register an object with a collective ``free()`` (a window) for finalize."""
        self._resources.append(resource)
        return resource

    def on_finalize(self, fn, first: bool = False) -> None:
        """Run ``fn()`` at the start of :meth:`finalize`, before the world barrier
        (e.g. trainers releasing the servers from their command loop), in the order
        registered, or before all others registered so far with ``first=True``."""
        if first:
            self._finalize_hooks.insert(0, fn)
        else:
            self._finalize_hooks.append(fn)

    def finalize(self) -> None:
        """Collective over the world: free tracked resources, then communicators."""
        if self.finalized:
            return
        while self._finalize_hooks:
            self._finalize_hooks.pop(0)()
        failure.finish_barrier(self.world, "finalize")
        self.memory = rss.role_summary(self.world, self.role, ROLES)     # every rank alive: agreed above
        while self._resources:
            self._resources.pop().free()
        for c in self._comms:
            if c is not None and c != MPI.COMM_NULL:
                c.Free()
        self._comms = []
        self.node_comm = self.role_comm = self.node_role_comm = self.trainer_comm = None
        self.finalized = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finalize()
        return False

    def __repr__(self):
        return (f"Context(rank={self.rank}/{self.size}, role={self.role}, node={self.node_id}/"
                f"{self.num_nodes}, local_rank={self.local_rank}, layout='{self.layout}')")

    def describe(self) -> str:
        """The role plan, one line per node."""
        return describe_plan(self.plan)


def _ranks_per_node(value) -> int | None:
    if value is None:
        value = os.environ.get("HPCGNN_RANKS_PER_NODE") or None
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise LayoutError(f"ranks_per_node / HPCGNN_RANKS_PER_NODE={value!r} is not a positive integer") from None
    if n < 1:
        raise LayoutError(f"ranks_per_node / HPCGNN_RANKS_PER_NODE={n} is not a positive integer")
    return n


def node_assignment(world, ranks_per_node=None) -> list[int]:
    """Collective: node id of every world rank.

    Real nodes come from ``Split_type(COMM_TYPE_SHARED)``; with ``ranks_per_node``
    (or ``HPCGNN_RANKS_PER_NODE``) consecutive ranks form virtual nodes, which must
    each lie inside one real node (shared memory is used within a node).
    """
    rank, size = world.Get_rank(), world.Get_size()
    err = None
    try:
        rpn = _ranks_per_node(ranks_per_node)
    except LayoutError as e:
        err, rpn = e, None
    raise_if_any(world, err)
    shared = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    leader = shared.allreduce(rank, op=MPI.MIN)
    shared.Free()
    leaders = world.allgather(leader)
    if rpn is None:
        order = sorted(set(leaders))
        return [order.index(l) for l in leaders]
    nodes = [r // rpn for r in range(size)]
    for v in sorted(set(nodes)):
        phys = {leaders[r] for r in range(size) if nodes[r] == v}
        if len(phys) > 1:
            raise LayoutError(f"ranks_per_node={rpn}: virtual node {v} spans several real nodes; "
                              "choose a value that divides the ranks per real node")
    return nodes


def initialize(layout: str | Layout | None = None, ranks_per_node: int | None = None, comm=None) -> Context:
    """Collective over ``comm`` (default ``MPI.COMM_WORLD``): assign nodes and roles.

    ``layout`` is per node (see :mod:`hpcgnn.comm.layout`; default from
    ``HPCGNN_LAYOUT`` or ``servers=1,samplers=0,trainers=rest``).  A layout that does
    not fit the ranks raises :class:`~hpcgnn.errors.LayoutError` on every rank with
    the same message.
    """
    world = MPI.COMM_WORLD if comm is None else comm
    err = None
    try:
        lay = Layout.parse(layout if layout is not None else os.environ.get("HPCGNN_LAYOUT"))
        failure.finish_timeout_s()            # a bad value fails now, not at the job's end
        watchdog.timeout_s()
    except (LayoutError, ValueError) as e:
        err, lay = (e if isinstance(e, LayoutError) else InputError(str(e))), None
    raise_if_any(world, err)
    node_of = node_assignment(world, ranks_per_node)
    sizes = [node_of.count(k) for k in range(max(node_of) + 1)]
    plan = plan_roles(lay, sizes)  # same input everywhere: same result or same error
    rank = world.Get_rank()
    node_id = node_of[rank]
    node_comm = world.Split(node_id, rank)
    role = plan[node_id][node_comm.Get_rank()]
    ridx = ROLES.index(role)
    role_comm = world.Split(ridx, rank)
    node_role_comm = world.Split(node_id * len(ROLES) + ridx, rank)
    failure.identity.role = role
    failure.identity.node = node_id
    peers.record(world, role, node_id)         # a lost or frozen rank can then be named
    return Context(world, lay, plan, node_id, node_comm, role_comm, node_role_comm, node_of)


def hostname() -> str:
    return socket.gethostname()


def host_index(comm) -> tuple[int, int, str]:
    """Collective over ``comm``: this rank's index among the members of ``comm`` on
    the same physical host, how many there are, and the host name (GPUs are a
    per-host resource, whatever the virtual nodes)."""
    host = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return host.Get_rank(), host.Get_size(), MPI.Get_processor_name()
    finally:
        host.Free()


# The contexts opened in this process and not yet finalized, newest last.
_open_contexts: list[Context] = []


def open_context(ctx: Context) -> Context:
    """Independent: make ``ctx`` this process's current context; returns it."""
    _open_contexts.append(ctx)
    return ctx


def current_context(required: str | None = None, trainer: bool = False) -> Context | None:
    """The newest opened, not finalized context of this process, or ``None``.
    ``required`` (the caller's name, for the message): InputError instead of ``None``;
    ``trainer``: also on a rank that is not a trainer."""
    while _open_contexts and _open_contexts[-1].finalized:
        _open_contexts.pop()
    ctx = _open_contexts[-1] if _open_contexts else None
    if required and (ctx is None or (trainer and not ctx.is_trainer)):
        where = "on trainer ranks, " if trainer else ""
        raise InputError(f"{required}: runs {where}after hpcgnn.initialize(...) (and before ctx.finalize())")
    return ctx
