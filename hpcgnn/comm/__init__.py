"""Everything that speaks MPI: roles, agreed errors, failure handling (and, later,
windows).  Other packages talk about partitions and rows, not ranks."""
from .mpi import MPI
from .agree import agreed, raise_if_any, agree_all
from .layout import Layout, plan_roles
from .context import Context, initialize

__all__ = ["MPI", "agreed", "raise_if_any", "agree_all", "Layout", "plan_roles", "Context", "initialize"]
