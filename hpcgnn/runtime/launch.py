"""``hpcgnn.initialize``: the one call at the top of every hpcgnn script.

Collective over the world.  It splits the launch into roles
(:func:`hpcgnn.comm.context.initialize`), starts the :class:`~hpcgnn.graph.service.Service`
on every rank (its followers run :func:`hpcgnn.runtime.follow.follow`), optionally loads a partitioned graph into the servers' windows, and
then, on server and sampler ranks, serves the trainers until they finish and ends
the process cleanly (``serve=True``, the default) — so the same script runs on every
rank, as with DGL.  On trainer ranks it returns the :class:`~hpcgnn.comm.Context`.
"""
from __future__ import annotations

import atexit
import os
import sys

from .. import allocator, bernoulli
from ..comm import signals
from ..comm.agree import agreed, agreed_over
from ..comm.context import Context, current_context
from ..comm.context import initialize as split_roles
from ..comm.context import open_context
from ..comm.failure import abort_job
from ..comm.mpi import MPI
from ..comm.torch_dist import export_env
from ..errors import InputError
from ..graph.service import Service
from ..partition.config import read_config
from .follow import follow


def initialize(layout=None, ranks_per_node=None, part_config: str | None = None, *,
               graph_name: str | None = None, serve: bool = True, comm=None) -> Context:
    """Collective over ``comm`` (default ``MPI.COMM_WORLD``).

    ``layout``/``ranks_per_node``: see :mod:`hpcgnn.comm.layout`.  ``part_config``
    (or ``HPCGNN_PART_CONFIG``): a partitioned graph to load into the servers now;
    ``DistGraph(graph_name)`` then finds it.  ``serve``: on server and sampler ranks,
    serve the trainers until they finalize, then exit the process (``sys.exit(0)``);
    SIGUSR1 and SIGTERM are recorded, not fatal (:mod:`hpcgnn.comm.signals`);
    with ``serve=False`` the context is returned on every rank and the caller runs
    ``ctx.service.serve()`` on followers itself (tests do).
    """
    prev = current_context()
    svc = getattr(prev, "service", None)
    if prev is not None and prev.size > 1 and svc is not None and svc.serving and not svc.stopped \
            and svc.channel.followers:
        # the others (servers) are serving: a second collective split would hang
        raise InputError(f"hpcgnn.initialize: already initialized in this process (world rank "
                         f"{prev.rank}), and its servers are serving; call it once at the top of the "
                         "script (functions such as hpcgnn.train's run() call it themselves)")
    if isinstance(layout, str) and (layout.endswith((".txt", ".cfg", ".conf")) or os.path.isfile(layout)):
        raise InputError(f"hpcgnn.initialize: {layout!r} looks like DGL's ip_config file; hpcgnn takes the "
                         "role layout instead (e.g. 'servers=1,samplers=0,trainers=rest'), and the hosts come "
                         "from the launch (mpirun/srun): see docs/roles.md")
    ctx = split_roles(layout, ranks_per_node, comm)
    signals.install()
    ctx.service = Service(ctx, follow=follow)
    part_config = part_config or os.environ.get("HPCGNN_PART_CONFIG") or None
    if part_config is not None:
        try:
            with agreed(ctx.world):
                cfg, _ = read_config(part_config)
                if ctx.size > 1 and not ctx.ranks_of("server"):
                    raise InputError(f"{part_config}: layout '{ctx.layout}' has no server rank to hold the graph")
            ctx.service.op_load_graph(graph_name or cfg["graph_name"], os.path.abspath(part_config))
        except InputError as e:
            if agreed_over(e, ctx.world):       # every rank is here: free what was made, then raise
                ctx.finalize()
            raise
    ctx.service.start_serving()
    open_context(ctx)
    if not ctx.is_trainer and serve:
        ctx.service.serve()
        ctx.finalize()
        sys.stdout.flush()
        sys.exit(0)
    if ctx.is_trainer:
        # trainers only: what they install (the compiled dropout masks, malloc settings, torch's env)
        export_env(ctx)          # torch.distributed.init_process_group() works as under DGL's launcher
        # what every model's training step gains on a trainer, whoever wrote the loop
        allocator.keep_freed_memory()       # HPCGNN_KEEP_FREED_MEMORY=0: not
        bernoulli.install()                 # compiled CPU dropout masks; HPCGNN_FAST_BERNOULLI=0: not
        atexit.register(_finalize_at_exit, ctx)
        _finalize_before_mpi_finalize(ctx)
    return ctx


def _finalize_at_exit(ctx: Context) -> None:
    # Trainers that end their script without ctx.finalize() still release the
    # servers (who would otherwise wait for a command forever).  A failure here ends
    # the job (an exception at exit would only be printed, and the servers wait).
    if not ctx.finalized:
        try:
            ctx.finalize()
        except BaseException:
            abort_job(*sys.exc_info())


def _finalize_before_mpi_finalize(ctx: Context) -> None:
    """A script that ends with ``MPI.Finalize()`` (without ``ctx.finalize()``) would
    block in it while the servers wait for commands: MPI deletes ``COMM_SELF``'s
    attributes first thing in ``MPI_Finalize``, and this one's deletion finalizes."""
    def delete(comm, keyval, value):
        _finalize_at_exit(ctx)

    keyval = MPI.COMM_SELF.Create_keyval(delete_fn=delete)
    MPI.COMM_SELF.Set_attr(keyval, ctx)
