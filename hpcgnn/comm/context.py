"""``initialize()``: split one MPI launch into hosts and roles.

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
from .collectives import all_min
from .layout import ROLES, Layout, describe_plan, plan_roles
from .mpi import MPI


class Context:
    """What a rank knows about the launch after :func:`initialize`.

    A *host* is a machine of the launch (or a virtual one of ``ranks_per_node``
    ranks); graph vertices are *nodes* elsewhere in hpcgnn.  ``host_id``,
    ``num_hosts``, ``host_comm``, ``host_role_comm`` and :meth:`host_of` say so;
    ``node_id``, ``num_nodes``, ``node_comm``, ``node_role_comm`` and
    :meth:`node_of` are aliases under the word SLURM and DGL use for machines.

    Attributes: ``world``, ``host_comm`` (ranks of this host), ``role_comm`` (all
    ranks of this rank's role), ``host_role_comm`` (ranks of this role on this host),
    ``trainer_comm`` (``None`` unless a trainer), ``role``, ``host_id``,
    ``num_hosts``, ``local_rank`` / ``local_size`` (this rank's place among its
    host's ranks), ``rank``, ``size``, ``layout``, ``plan`` (roles by host and local
    rank), ``memory`` (after :meth:`finalize`: the peak RSS of every role's ranks,
    :func:`~hpcgnn.comm.rss.role_summary`).
    """

    def __init__(self, world, layout, plan, host_id, host_comm, role_comm, host_role_comm, host_of):
        self.world = world
        self.layout = layout
        self.plan = plan
        self.host_id = host_id
        self.num_hosts = len(plan)
        self.host_comm = host_comm
        self.local_rank = host_comm.Get_rank()
        self.local_size = host_comm.Get_size()
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        self.role = plan[host_id][self.local_rank]
        self.role_comm = role_comm
        self.host_role_comm = host_role_comm
        self.trainer_comm = role_comm if self.role == "trainer" else None
        self._host_of = host_of          # world rank -> host id
        seen: dict[int, int] = {}
        self._role_of = []               # world rank -> role
        for r in range(len(host_of)):
            k = host_of[r]
            self._role_of.append(plan[k][seen.get(k, 0)])
            seen[k] = seen.get(k, 0) + 1
        self._resources: list = []
        self._finalize_hooks: list = []
        self.service = None               # set by hpcgnn.initialize (a hpcgnn.graph.service.Service)
        self.tensors: dict = {}           # DistTensor storage by name (hpcgnn.graph.tensor_store)
        self.tensor_counter = 0           # names of anonymous DistTensors
        self._comms = [host_role_comm, role_comm, host_comm]
        self.finalized = False
        self.memory: dict | None = None   # at finalize: peak RSS per role (rss.role_summary)

    # -- who is where -----------------------------------------------------
    def host_of(self, world_rank: int) -> int:
        """The host of any world rank (independent, no communication)."""
        return self._host_of[world_rank]

    # SLURM's and DGL's word for a host, kept as documented aliases
    @property
    def node_id(self) -> int:
        """``host_id`` (SLURM's word)."""
        return self.host_id

    @property
    def num_nodes(self) -> int:
        """``num_hosts`` (SLURM's word)."""
        return self.num_hosts

    @property
    def node_comm(self):
        """``host_comm`` (SLURM's word)."""
        return self.host_comm

    @property
    def node_role_comm(self):
        """``host_role_comm`` (SLURM's word)."""
        return self.host_role_comm

    def node_of(self, world_rank: int) -> int:
        """``host_of`` (SLURM's word)."""
        return self._host_of[world_rank]

    def role_of(self, world_rank: int) -> str:
        """Role of any world rank (independent, no communication)."""
        return self._role_of[world_rank]

    def ranks_of(self, role: str, host: int | None = None, *, node: int | None = None) -> list[int]:
        """World ranks holding ``role`` (optionally on one host; ``node=``: the same),
        ascending."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles are {ROLES}")
        host = node if host is None else host
        return [r for r in range(self.size)
                if self.role_of(r) == role and (host is None or self._host_of[r] == host)]

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
        self.host_comm = self.role_comm = self.host_role_comm = self.trainer_comm = None
        self.finalized = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finalize()
        return False

    def __repr__(self):
        return (f"Context(rank={self.rank}/{self.size}, role={self.role}, host={self.host_id}/"
                f"{self.num_hosts}, local_rank={self.local_rank}, layout='{self.layout}')")

    def describe(self) -> str:
        """The role plan, one line per host."""
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


def host_assignment(world, ranks_per_node=None) -> list[int]:
    """Collective: the host id of every world rank.

    Real hosts come from ``Split_type(COMM_TYPE_SHARED)``; with ``ranks_per_node``
    (or ``HPCGNN_RANKS_PER_NODE``) consecutive ranks form virtual hosts, which must
    each lie inside one real host (shared memory is used within a host).
    """
    rank, size = world.Get_rank(), world.Get_size()
    err = None
    try:
        rpn = _ranks_per_node(ranks_per_node)
    except LayoutError as e:
        err, rpn = e, None
    raise_if_any(world, err)
    shared = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    leader = all_min(shared, rank)
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
    host_of = host_assignment(world, ranks_per_node)
    sizes = [host_of.count(k) for k in range(max(host_of) + 1)]
    plan = plan_roles(lay, sizes)  # same input everywhere: same result or same error
    rank = world.Get_rank()
    host_id = host_of[rank]
    host_comm = world.Split(host_id, rank)
    role = plan[host_id][host_comm.Get_rank()]
    ridx = ROLES.index(role)
    role_comm = world.Split(ridx, rank)
    host_role_comm = world.Split(host_id * len(ROLES) + ridx, rank)
    failure.identity.role = role
    failure.identity.node = host_id
    peers.record(world, role, host_id)         # a lost or frozen rank can then be named
    return Context(world, lay, plan, host_id, host_comm, role_comm, host_role_comm, host_of)


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
