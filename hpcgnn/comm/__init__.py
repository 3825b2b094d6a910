"""Everything that speaks MPI; other packages talk about partitions and rows, not
ranks.  By responsibility:

* transport and roles: :mod:`.mpi`, :mod:`.layout` and :mod:`.context` (the role
  split), :mod:`.agree` (agreed errors), :mod:`.failure`, :mod:`.watchdog`,
  :mod:`.peers` and :mod:`.signals` (a job that fails or is stopped ends cleanly),
  :mod:`.control` and :mod:`.batches` (the trainers' commands and mini-batch
  frames), :mod:`.alltoall` and :mod:`.ghosts` (the partitioner's exchanges),
  :mod:`.progress`, :mod:`.probes`, :mod:`.rss`;
* the one-sided data plane: :mod:`.rma` (tables of rows read with RMA and shared
  memory);
* the torch bootstrap: :mod:`.torch_dist` (``torch.distributed`` from the MPI
  launch)."""
from .mpi import MPI
from .agree import agreed, raise_if_any, agree_all
from .layout import Layout, plan_roles
from .context import Context, initialize

__all__ = ["MPI", "agreed", "raise_if_any", "agree_all", "Layout", "plan_roles", "Context", "initialize"]
