"""DGL's ``dgl.dataloading.negative_sampler``: ``Uniform(k)`` (and its DGL name
``PerSourceUniform``): ``k`` negative pairs ``(u, v')`` per positive edge ``(u, v)``,
``v'`` uniform over all nodes (:class:`hpcgnn.sampling.negative.Uniform`).  Given to
a data loader as ``negative_sampler=``; it is called by the loader with
``(num_nodes, src, dst, rng)``, not DGL's ``(g, eids)``."""
from ..sampling.negative import Uniform

PerSourceUniform = Uniform

__all__ = ["Uniform", "PerSourceUniform"]
