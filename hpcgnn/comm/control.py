"""Control messages: the leader trainer tells every server and sampler what to do next.

Servers and samplers sit in :meth:`ControlChannel.recv` (a blocking receive, which
keeps MPI progressing for the one-sided reads aimed at them) until the leader sends a
command.  A command is a small picklable ``(op, args)`` pair; what an ``op`` means
is up to the receiver (see :mod:`hpcgnn.graph.service`).  Control traffic runs on a
duplicate of the world communicator, so it never matches a user's messages.
"""
from __future__ import annotations

from .mpi import MPI

TAG = 0x4850  # "HP"
SHUTDOWN = "shutdown"


class ControlChannel:
    """Collective over ``ctx.world`` to create; :meth:`free` is collective too.

    ``leader``: the lowest trainer rank.  ``followers``: every non-trainer rank.
    """

    def __init__(self, ctx):
        self.comm = ctx.world.Dup()
        trainers = ctx.ranks_of("trainer")
        self.leader = trainers[0] if trainers else 0
        self.followers = [r for r in range(ctx.size) if ctx.role_of(r) != "trainer"]
        self.rank = ctx.rank

    @property
    def is_leader(self) -> bool:
        return self.rank == self.leader

    def send(self, op: str, *args) -> None:
        """Leader only: send ``(op, args)`` to every follower (independent)."""
        if not self.is_leader:
            raise RuntimeError("ControlChannel.send is for the leader trainer only")
        reqs = [self.comm.isend((op, args), dest=r, tag=TAG) for r in self.followers]
        MPI.Request.waitall(reqs)

    def recv(self) -> tuple[str, tuple]:
        """Follower: block until the leader's next command (keeps MPI progressing)."""
        return self.comm.recv(source=self.leader, tag=TAG)

    def poll(self):
        """Follower: the leader's next command, or ``None`` if none has arrived."""
        m = self.comm.improbe(source=self.leader, tag=TAG)
        return None if m is None else m.recv()

    def free(self) -> None:
        """Collective over the world."""
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
