"""The server side of a launch: what servers (and samplers) do on command.

Every rank holds one :class:`Service` (created by :func:`hpcgnn.initialize`).  The
trainers drive it: a collective operation such as loading a graph or creating a
DistTensor is started by the trainers with :meth:`Service.call`; the leader trainer
sends the command to every follower (server or sampler), and then every rank of the
world runs the same operation, so its MPI collectives line up.  Followers wait in
:meth:`Service.serve` — the loop :func:`hpcgnn.initialize` gives the service
(:func:`hpcgnn.runtime.follow.follow`), which keeps MPI progressing for the
one-sided reads aimed at their memory — until the trainers shut the service down.

Commands are checked on the trainers before they are sent, so a follower only ever
runs a command that is valid.  An error the operation raised alike on every rank of
the world (agreed, e.g. a partition file whose checksums are not its JSON's) reaches
the trainers as well: the followers keep serving, and the trainers decide (end the
job, or go on without that graph).  Anything else that fails on a follower aborts
the job (see :mod:`hpcgnn.comm.failure`) rather than leaving the trainers waiting.
"""
from __future__ import annotations

from ..comm.agree import agreed_over
from ..comm.batches import BatchChannel
from ..comm.control import SHUTDOWN, ControlChannel
from ..comm.failure import finish_barrier
from ..errors import InputError
from ..partition.config import read_config
from .tables import GraphTables
from .tensor_store import create_entry, free_entry, partition_owners


class Service:
    """Collective over ``ctx.world`` to create.  ``follow``: the followers' loop that
    :meth:`serve` runs (None: this service has no followers to run, e.g. a standalone
    graph's)."""

    #: Operations a command may name (each is a method ``op_<name>``).
    OPS = ("load_graph", "free_graph", "barrier", "call_registered", "create_store", "free_store")

    def __init__(self, ctx, follow=None):
        self.ctx = ctx
        self._follow = follow
        self.channel = ControlChannel(ctx)
        self.batches = BatchChannel(ctx)
        self._loaders = 0
        self.graphs: dict[str, object] = {}
        self.registered: dict[str, object] = {}
        self.serving = False
        self.stopped = False
        ctx.track(self.channel)
        ctx.track(self.batches)
        ctx.on_finalize(self._finalize_hook)

    # -- trainers ----------------------------------------------------------------
    def call(self, op: str, *args):
        """Trainers, collective over the trainer communicator: run ``op`` on every rank.

        With followers waiting in :meth:`serve`, the leader sends them the command;
        otherwise (all ranks are in the same code path, e.g. right after initialize)
        every rank must call ``op`` itself."""
        if op not in self.OPS:
            raise InputError(f"Service: unknown operation {op!r}")
        if self.ctx.is_trainer and self.serving and self.channel.is_leader:
            self.channel.send(op, *args)
        return getattr(self, "op_" + op)(*args)

    def start_serving(self) -> None:
        """Collective over the world: from now on followers wait for commands."""
        self.serving = True

    def shutdown(self) -> None:
        """Trainers, collective over the trainers: release the followers from serve()."""
        if self.stopped:
            return
        if self.serving:
            # every trainer finished (a deadline: one that ended early must not hang the job)
            finish_barrier(self.ctx.trainer_comm, "trainers finishing")
            if self.channel.is_leader:
                self.channel.send(SHUTDOWN)
        self.stopped = True

    def next_loader_id(self) -> int:
        """Trainers: a number for a new data loader (the same on every trainer, since
        loaders are created collectively)."""
        self._loaders += 1
        return self._loaders

    # -- followers -----------------------------------------------------------------
    def serve(self) -> None:
        """Followers: run the leader's commands until it says shutdown (and, on
        samplers, make mini-batches), with the loop given at creation."""
        if self._follow is None:
            raise RuntimeError("Service.serve: this service was created without a followers' loop")
        self.serving = True
        self._follow(self)

    def run_command(self, op: str, args: tuple) -> bool:
        """Follower: run one command; False once it was the shutdown."""
        if op == SHUTDOWN:
            self.stopped = True
            return False
        if op not in self.OPS:
            raise RuntimeError(f"hpcgnn service: unknown command {op!r} from the leader trainer")
        try:
            getattr(self, "op_" + op)(*args)
        except InputError as e:
            if not agreed_over(e, self.ctx.world):
                raise
            # raised alike on every rank: the trainers have it and decide what follows
        return True

    # -- operations (run on every rank of the world) ----------------------------------
    def op_load_graph(self, name: str, config_path: str):
        if name in self.graphs:
            return self.graphs[name]
        cfg, _ = read_config(config_path)
        if self.ctx.size == 1 or not self.ctx.ranks_of("server"):
            owners = [self.ctx.ranks_of("trainer")[0]] * int(cfg["num_parts"])
        else:
            owners = partition_owners(self.ctx, int(cfg["num_parts"]), f"graph {name!r}")
        self.graphs[name] = GraphTables(self.ctx, name, config_path, owners)
        return self.graphs[name]

    def op_free_graph(self, name: str):
        g = self.graphs.pop(name, None)
        if g is not None:
            g.free()

    def op_create_store(self, name, shape, dtype_str, bounds, owners, persistent):
        """A DistTensor's storage (trainers then fill it and meet in a barrier)."""
        create_entry(self.ctx, name, shape, dtype_str, bounds, owners, persistent)

    def op_free_store(self, name):
        free_entry(self.ctx, name)

    def op_barrier(self):
        self.ctx.world.Barrier()

    def op_call_registered(self, key: str, *args):
        """Run a function registered with :meth:`register` (same key on every rank)."""
        return self.registered[key](*args)

    def register(self, key: str, fn) -> None:
        """Independent: make ``fn`` callable through ``call('call_registered', key, ...)``.
        Register the same keys on every rank, before serving."""
        self.registered[key] = fn

    def _finalize_hook(self) -> None:
        if self.ctx.is_trainer:
            self.shutdown()
