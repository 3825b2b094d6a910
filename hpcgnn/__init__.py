"""hpcgnn: MPI-native distributed graph neural network training.

Importing hpcgnn initialises MPI (through mpi4py, at thread level ``serialized``)
and installs the failure hook: an uncaught exception on any rank prints one line
naming the rank, its role and node, and aborts the whole job.
"""
import importlib

from . import logs  # noqa: F401  (the hpcgnn logger's default handler)
from .comm import failure as _failure

_failure.install()

from .comm.context import Context  # noqa: E402
from .comm.context import current_context  # noqa: E402
from .comm.layout import Layout  # noqa: E402
from .errors import DGLError, HpcgnnError, InputError, LayoutError, PartitionError  # noqa: E402

__version__ = "0.1.0"


#: DGL's sub-packages, reachable as ``dgl.distributed``, ``dgl.function`` ... after ``import hpcgnn as dgl``;
#: imported on first use, so ``import hpcgnn`` stays cheap
_LAZY = ("distributed", "dataloading", "nn", "function", "sampling", "graph", "train", "partition", "datasets")


#: Names imported on first use, with their module: ``initialize`` and DGL's keys in a
#: block's srcdata/edata bring torch, and ``hpcgnn partition`` never needs it
_LAZY_NAMES = {"initialize": ".runtime", "NID": ".sampling.batch", "EID": ".sampling.batch",
               "NTYPE": ".sampling.batch", "ETYPE": ".sampling.batch"}


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(_LAZY_NAMES[name], __name__), name)
    raise AttributeError(f"module 'hpcgnn' has no attribute {name!r}")

__all__ = ["initialize", "current_context", "Context", "Layout", "HpcgnnError", "InputError", "LayoutError",
           "PartitionError", "DGLError", "NID", "EID", "NTYPE", "ETYPE", "__version__"]
