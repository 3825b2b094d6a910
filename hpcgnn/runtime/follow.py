"""The followers' loop: servers and samplers run the leader trainer's commands
(:class:`~hpcgnn.graph.service.Service`) until it says shutdown; samplers also
produce their trainers' mini-batches (:class:`~hpcgnn.runtime.sampler.SamplerWorker`).

Followers wait for commands by polling (``MPI_Improbe``, which also drives MPI
progress for one-sided traffic aimed at them) and sleeping up to
:data:`MAX_IDLE_S` in between, instead of a blocking receive: Open MPI's blocking
receive spins on a core, which on a node with fewer cores than ranks takes the
trainers' CPU.  They do not sleep while socket traffic flows (RMA over TCP being
served: :class:`hpcgnn.comm.progress.IdleBackoff`).  ``HPCGNN_SERVER_WAIT=block``
(read when the loop starts) restores the blocking receive.
"""
from __future__ import annotations

import os

from ..comm.progress import IdleBackoff
from .sampler import SamplerWorker

#: Longest sleep between two polls of an idle follower, in seconds.
MAX_IDLE_S = 1e-3


def follow(service) -> None:
    """Followers: run ``service``'s commands until the shutdown."""
    if service.ctx.is_sampler:
        SamplerWorker(service, MAX_IDLE_S).serve()
        return
    if os.environ.get("HPCGNN_SERVER_WAIT", "poll") == "block":
        while service.run_command(*service.channel.recv()):
            pass
        return
    wait = IdleBackoff(MAX_IDLE_S)
    try:
        while True:
            cmd = service.channel.poll()
            if cmd is not None and not service.run_command(*cmd):
                return
            wait(cmd is not None)
    finally:
        wait.close()
