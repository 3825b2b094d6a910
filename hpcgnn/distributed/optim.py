"""``dgl.distributed.optim``'s sparse optimizers for :class:`DistEmbedding`:
:class:`hpcgnn.graph.SparseAdagrad` ``(params, lr, eps=1e-10)`` and
:class:`hpcgnn.graph.SparseAdam` ``(params, lr, betas=(0.9, 0.999), eps=1e-8)``,
DGL's argument order.  ``step()`` is independent (MPI atomic updates of the
touched rows); creation is collective over the trainers (it creates their state
tensors)."""
from ..graph import SparseAdagrad, SparseAdam

__all__ = ["SparseAdagrad", "SparseAdam"]
