"""Half-precision node features (``hpcgnn partition --feat-dtype bf16|fp16``).

The partitioner may store the node features named by the graph's feature fields
(``feat`` by default) at a *logical* dtype other than the raw one:

=============  ===============  ==============================================
``feat_dtype``  logical dtype    stored as (HDF5 dataset, server row stores)
=============  ===============  ==============================================
``bf16``        ``bfloat16``     ``uint16``: the bfloat16 bit patterns
``fp16``        ``float16``      ``float16`` (IEEE half, native in HDF5 and NumPy)
``float32``     ``float32``      ``float32``
=============  ===============  ==============================================

NumPy (and so HDF5 through h5py) has no bfloat16: its values are kept as their 16
bits in ``uint16`` arrays, and readers that hand out torch tensors view those bits
as ``torch.bfloat16``.  Both the dataset (HDF5 attribute ``logical_dtype``) and the
partition JSON (``node_feats.<name>.logical_dtype``) say so; see docs/format.md.

Values are first made float32 (exact for float16 and float32 input; float64 is
rounded to float32), then rounded to nearest, ties to even, as torch's
``.to(torch.bfloat16)`` and NumPy's ``astype(np.float16)`` do.  This module needs
NumPy only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

#: ``--feat-dtype`` names (and the Python API's aliases) -> the logical dtype.
NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
         "float32": "float32"}
#: logical dtype -> the NumPy dtype it is stored as.
STORAGE = {"bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}
#: the HDF5 dataset attribute and the JSON key that name a feature's logical dtype
LOGICAL_KEY = "logical_dtype"
#: the node data ``--feat-dtype`` converts unless told otherwise
DEFAULT_FIELDS = ("feat",)
_CHUNK = 1 << 22           # elements converted at a time (bounds the temporaries)
_BF16_NAN = np.uint16(0xFFFF)   # the NaN torch's tensor conversion gives (on CPU)


def resolve(feat_dtype, rank: int) -> str | None:
    """The logical dtype ``--feat-dtype`` asks for, or None (keep the raw dtype).
    Raises :class:`InputError` for a name that is not one of bf16, fp16, float32."""
    if feat_dtype is None:
        return None
    key = str(feat_dtype).strip().lower() if isinstance(feat_dtype, str) else None
    if key not in NAMES:
        raise InputError(f"feat_dtype: {feat_dtype!r} is not one of bf16, fp16, float32 (--feat-dtype) "
                         f"(rank {rank})")
    return NAMES[key]


def logical_dtype(schema: dict) -> str:
    """A feature's logical dtype from its JSON entry (``node_feats.<name>``)."""
    return str(schema.get(LOGICAL_KEY, schema.get("dtype")))


def is_bf16(schema: dict) -> bool:
    return logical_dtype(schema) == "bfloat16"


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (``uint16``) of ``a`` rounded to nearest, ties to
    even: bit for bit what ``torch.from_numpy(a).to(torch.bfloat16)`` holds (NaN:
    ``0xFFFF``, as there)."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    out = np.empty(f.shape, dtype=np.uint16)
    src, dst = f.reshape(-1), out.reshape(-1)
    for s in range(0, src.size, _CHUNK):
        x = src[s:s + _CHUNK]
        u = x.view(np.uint32)
        r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
        dst[s:s + _CHUNK] = r
        nan = np.isnan(x)
        if nan.any():
            dst[s:s + _CHUNK][nan] = _BF16_NAN
    return out


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact)."""
    b = np.ascontiguousarray(bits).view(np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_float32(stored: np.ndarray, logical: str) -> np.ndarray:
    """A stored feature array (``uint16`` bits for bfloat16) as float32 values."""
    if logical == "bfloat16":
        return bf16_bits_to_float32(stored)
    return np.asarray(stored, dtype=np.float32)


@dataclass(frozen=True)
class FeatConversion:
    """How one node feature is stored: ``logical`` dtype from ``raw`` (the input's)."""

    name: str
    logical: str
    raw: np.dtype

    @property
    def storage(self) -> np.dtype:
        return STORAGE[self.logical]

    def convert(self, a: np.ndarray, where: str) -> np.ndarray:
        """``a`` (rows of the raw dtype) as stored.  Raises :class:`InputError` naming
        ``where`` when a finite value overflows float16 (it would become inf)."""
        f = np.asarray(a, dtype=np.float32)
        if self.logical == "bfloat16":
            return to_bf16_bits(f)
        if self.logical == "float16":
            big = np.isfinite(f) & (np.abs(f) >= 65520)      # 65520 and up round to inf
            if big.any():
                raise InputError(f"{where}: value {float(f[big].reshape(-1)[0])!r} is beyond float16's range "
                                 f"(+-65504); --feat-dtype fp16 would make it inf: use bf16 (float32's range)")
            return f.astype(np.float16)
        return f

    def schema(self, shape: list) -> dict:
        """The feature's JSON entry (``node_feats.<name>``)."""
        return {"dtype": str(self.storage), "shape": list(shape), LOGICAL_KEY: self.logical,
                "raw_dtype": str(self.raw)}

    def attrs(self) -> dict:
        """The HDF5 attributes of the feature's datasets."""
        return {LOGICAL_KEY: self.logical}


def conversions(feat_dtype, fields, node_cols: dict, path: str, rank: int) -> dict[str, FeatConversion]:
    """Independent: name -> :class:`FeatConversion` of every node feature to store at
    ``feat_dtype`` (None: none).  ``fields``: the feature fields (node data names);
    ``node_cols``: the raw file's node columns (name -> object with ``dtype``).
    Raises :class:`InputError` naming the file and the field for a field the file
    lacks or one whose raw dtype is not floating."""
    logical = resolve(feat_dtype, rank)
    if logical is None:
        return {}
    if isinstance(fields, str) or not fields:
        raise InputError(f"feat_fields: {fields!r} must be a non-empty list of node data names (rank {rank})")
    out = {}
    for name in fields:
        col = node_cols.get(name)
        if col is None or name == "node_type":
            raise InputError(f"{path}: feature field {name!r} (--feat-fields) is not a node dataset "
                             f"'/nodes/data/{name}' of this graph; it has {sorted(node_cols)} (rank {rank})")
        if np.dtype(col.dtype).kind != "f":
            raise InputError(f"{path}: feature field {name!r} ('/nodes/data/{name}') has dtype {col.dtype}; "
                             f"--feat-dtype {feat_dtype} converts floating features only (rank {rank})")
        out[name] = FeatConversion(name, logical, np.dtype(col.dtype))
    return out
