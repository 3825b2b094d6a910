"""``DistFeatureStore``: PyG's :class:`~torch_geometric.data.FeatureStore` over
hpcgnn's :class:`~hpcgnn.graph.DistTensor` s.

Each attribute is a handle on a ``DistTensor`` (no copy): ``get_tensor`` reads the
asked rows wherever they live (one one-sided read per owner), ``put_tensor`` with
an index writes rows into it.  PyG's loaders ask for every attribute of
:meth:`get_all_tensor_attrs` at the batch's ``n_id``, so the store holds node
attributes only, under the names a PyG model reads (``x``, ``y``).  Features
partitioned at half precision (``hpcgnn partition --feat-dtype bf16|fp16``) are
read so (half the bytes) and handed as float32, as the loaders hand ``batch.x``."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.typing import FeatureTensorType

from ..errors import InputError
from ..graph import DistGraph, DistTensor
from ..sampling.precision import float_features
from .checks import homogeneous_graph

#: PyG's attribute name -> the graph's node data name, as :func:`DistFeatureStore.from_graph` maps them by default.
DEFAULT_NAMES = {"x": "feat", "y": "label"}


def _key(attr: TensorAttr) -> tuple:
    return (attr.group_name, attr.attr_name)


class DistFeatureStore(FeatureStore):
    """A PyG feature store whose tensors are :class:`DistTensor` s (see the module
    doc).  ``DistFeatureStore()`` is empty: register a tensor with
    ``store.put_tensor(dist_tensor, group_name=None, attr_name="x", index=None)`` (``group_name`` stays None on
    a homogeneous graph).  :meth:`from_graph` registers a graph's node data.
    Creation is independent; reads and writes are independent (one-sided)."""

    def __init__(self) -> None:
        super().__init__(tensor_attr_cls=TensorAttr)
        self._tensors: dict[tuple, DistTensor] = {}

    @classmethod
    def from_graph(cls, g: DistGraph, names: Optional[dict[str, str]] = None) -> "DistFeatureStore":
        """Independent: a store over ``g``'s node data, ``names`` mapping PyG's
        attribute names to the graph's data names (default ``{"x": "feat", "y":
        "label"}``; a default the graph lacks is left out, a name given that the
        graph lacks is an :class:`InputError`).  Homogeneous graphs only."""
        homogeneous_graph(g, "DistFeatureStore.from_graph")
        store = cls()
        given = names is not None
        for attr_name, data_name in (DEFAULT_NAMES if names is None else dict(names)).items():
            if data_name not in g.ndata:
                if given:
                    raise InputError(f"DistFeatureStore.from_graph: {data_name!r} (for {attr_name!r}) is not a "
                                     f"node feature of graph {g.graph_name!r} (node features: "
                                     f"{sorted(g.ndata) or 'none'})")
                continue
            store.put_tensor(g.ndata[data_name], group_name=None, attr_name=attr_name, index=None)
        return store

    # -- PyG's contract -------------------------------------------------------------
    def _put_tensor(self, tensor: FeatureTensorType, attr: TensorAttr) -> bool:
        """A ``DistTensor`` without an index registers it (a handle, no copy); rows
        with an index are written into the registered tensor (one-sided, visible
        to others after the tensor's ``barrier()``)."""
        key = _key(attr)
        if isinstance(tensor, DistTensor):
            if attr.is_set("index") and attr.index is not None:
                raise InputError(f"DistFeatureStore: register the DistTensor {tensor.name!r} whole (no index)")
            self._tensors[key] = tensor
            return True
        held = self._tensors.get(key)
        if held is None:
            raise InputError(f"DistFeatureStore: no tensor registered as {key}; register a DistTensor first "
                             "(a plain tensor would have to be spread over the servers: create a DistTensor)")
        if not attr.is_set("index") or attr.index is None:
            raise InputError(f"DistFeatureStore: writing {key} needs the row ids (index=)")
        held[_index(attr.index, len(held), key)] = tensor
        return True

    def _get_tensor(self, attr: TensorAttr) -> Optional[FeatureTensorType]:
        """The rows of ``attr.index`` (all rows when None); None if not registered.
        Half-precision rows (bfloat16, float16) come as float32."""
        held = self._tensors.get(_key(attr))
        if held is None:
            return None
        ids = attr.index if attr.is_set("index") else None
        out = held[slice(None) if ids is None else _index(ids, len(held), _key(attr))]
        return float_features(out if isinstance(out, torch.Tensor) else torch.as_tensor(out))

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        """Forget the handle (the DistTensor itself stays)."""
        return self._tensors.pop(_key(attr), None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple]:
        held = self._tensors.get(_key(attr))
        return None if held is None else tuple(held.shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Independent: every registered attribute (``index`` unset)."""
        return [TensorAttr(group_name=g, attr_name=a) for g, a in self._tensors]

    def dist_tensor(self, attr_name: str, group_name=None) -> DistTensor:
        """The registered :class:`DistTensor` of an attribute (KeyError if none)."""
        return self._tensors[(group_name, attr_name)]

    def __repr__(self) -> str:
        return f"DistFeatureStore({sorted(str(a) for _, a in self._tensors)})"


def _index(ids, n: int, key) -> object:
    """Row ids as the DistTensor takes them: a slice as is, a boolean mask as the
    ids it selects, integers checked against ``n`` rows."""
    if isinstance(ids, slice):
        return ids
    a = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if a.dtype == np.bool_:
        if a.shape != (n,):
            raise InputError(f"DistFeatureStore {key}: a boolean index needs {n} entries, got {a.shape}")
        return np.flatnonzero(a)
    if a.dtype.kind not in "iu" and a.size:
        raise InputError(f"DistFeatureStore {key}: row ids must be integers, got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False).reshape(-1)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise InputError(f"DistFeatureStore {key}: row id {int(a[(a < 0) | (a >= n)][0])} is out of range [0, {n})")
    return a
