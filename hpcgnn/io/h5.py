"""Opening HDF5 files: every ``h5py.File`` of hpcgnn is opened here."""
from __future__ import annotations

import h5py

from ..errors import InputError


def open_h5(path: str, mode: str, comm=None) -> h5py.File:
    """Open ``path`` with parallel HDF5 (``driver="mpio"``) over ``comm``.

    Collective over ``comm`` when ``comm`` is given; ``comm=None`` opens the file in
    this process alone with the default driver.
    """
    if comm is None:
        return h5py.File(path, mode)
    if not h5py.get_config().mpi:
        if comm.Get_size() == 1:
            return h5py.File(path, mode)
        raise InputError(f"{path}: h5py was built without MPI, cannot open it from "
                         f"{comm.Get_size()} ranks (run `hpcgnn doctor`)")
    return open_mpio(path, mode, comm)


def open_mpio(path: str, mode: str, comm) -> h5py.File:
    """Collective over ``comm``: open ``path`` with the MPI-IO driver whatever the
    communicator's size (the doctor's probe of parallel HDF5 itself)."""
    return h5py.File(path, mode, driver="mpio", comm=comm)
