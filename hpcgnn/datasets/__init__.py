"""Raw input graphs: the raw HDF5 format, the synthetic generator and converters.

* :mod:`.raw` — format constants, :func:`slice_bounds`, :class:`RawGraph`,
  :func:`validate_raw` and the helpers writers use.
* :mod:`.synthetic` — :func:`generate_graph` (parallel, rank-count independent).
* :mod:`.synthetic_hetero` — :func:`generate_hetero_graph` (MAG-like typed graph, same properties).
* :mod:`.convert` — :func:`convert_ogb`, :func:`convert_edges`, :func:`from_pyg`.
"""
from .raw import FORMAT, VERSION, RawGraph, slice_bounds, validate_raw
from .synthetic import generate_graph
from .synthetic_hetero import generate_hetero_graph

__all__ = ["FORMAT", "VERSION", "RawGraph", "slice_bounds", "validate_raw", "generate_graph", "generate_hetero_graph",
           "convert_ogb", "convert_edges", "from_pyg"]


def __getattr__(name: str):
    # the converters import optional packages lazily; load the module on first use
    if name in ("convert_ogb", "convert_edges", "from_pyg"):
        from . import convert   # the converters import optional packages

        return getattr(convert, name)
    raise AttributeError(name)
