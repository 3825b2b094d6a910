"""What the tests share (a helper module, not a test module: no test module imports
another): partitioned graphs to damage on disk."""
import hashlib
import json
import os
import shutil

import h5py
import numpy as np


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def copy_parts(cfg, where) -> str:
    """A copy of the partitioned graph's directory; the copy's JSON."""
    out = os.path.join(str(where), "copy")
    shutil.copytree(os.path.dirname(cfg), out)
    return os.path.join(out, os.path.basename(cfg))


def h5_of(cfg) -> str:
    with open(cfg) as f:
        return os.path.join(os.path.dirname(cfg), json.load(f)["h5_file"])


def corrupt(h5, dataset, nbytes=4096, seed=1):
    """Write ``nbytes`` random bytes into the middle of ``dataset``'s storage, as a
    disk or a stray write would (not through HDF5)."""
    with h5py.File(h5, "r") as f:
        d = f[dataset]
        off, size = d.id.get_offset(), d.id.get_storage_size()
    assert off is not None and size > 0, dataset
    n = min(nbytes, size)
    with open(h5, "r+b") as fh:
        fh.seek(off + (size - n) // 2)
        fh.write(np.random.default_rng(seed).bytes(n))
