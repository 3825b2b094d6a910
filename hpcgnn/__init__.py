"""hpcgnn: MPI-native distributed graph neural network training.

Importing hpcgnn initialises MPI (through mpi4py, at thread level ``serialized``)
and installs the failure hook: an uncaught exception on any rank prints one line
naming the rank, its role and node, and aborts the whole job.
"""
from . import logs  # noqa: F401  (the hpcgnn logger's default handler)
from .comm import failure as _failure

_failure.install()

from .comm.context import Context  # noqa: E402
from .comm.context import current_context  # noqa: E402
from .runtime import initialize  # noqa: E402
from .comm.layout import Layout  # noqa: E402
from .errors import HpcgnnError, InputError, LayoutError, PartitionError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["initialize", "current_context", "Context", "Layout", "HpcgnnError", "InputError", "LayoutError",
           "PartitionError", "__version__"]
