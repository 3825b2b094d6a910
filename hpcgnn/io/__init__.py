"""Storage: how hpcgnn opens, writes, commits and checks its HDF5 files (raw graphs,
partitions, checkpoints, the doctor's probe).

* :mod:`.h5` — :func:`~.h5.open_h5`: every ``h5py.File`` of the package is opened
  here, by this process alone or with parallel HDF5 (``driver="mpio"``) over a
  communicator.
* :mod:`.partial` — a file is written under its partial name, then committed
  (renamed) or removed.
* :mod:`.diskspace` — free space agreed before the collective create, disk blocks
  reserved before anything is flushed, :class:`~.diskspace.WriteGuard` for failures.
* :mod:`.checksum` — the per-dataset checksum (``fletcher64-bytes``), computed by
  slices and reduced.

This package imports none of its modules here: :mod:`hpcgnn.comm` uses :mod:`.h5`,
and :mod:`.diskspace` uses :mod:`hpcgnn.comm`.
"""
