"""Agreed errors: every rank checks, the failure is agreed, all ranks raise it.

The pattern (as in Heat): each rank records whether it failed, the flag is reduced
with ``MAX``, the lowest failing rank broadcasts its exception, and every rank raises
that same exception.  Nobody is left in a collective that the failing rank never
enters.
"""
from contextlib import contextmanager
import pickle

from ..errors import HpcgnnError
from . import failure
from .collectives import all_min, bcast
from .mpi import MPI


def _rebuild(exc: BaseException, rank: int) -> BaseException:
    try:
        msg = str(exc)
    except Exception:
        return exc
    tag = f"[rank {rank}]"
    if tag in msg:
        return exc
    try:
        new = type(exc)(f"{msg} {tag}")
    except Exception:
        return exc
    new.origin_rank = rank
    return new


def raise_if_any(comm, exc: BaseException | None) -> None:
    """Collective over ``comm``: raise on every rank the error of the lowest failing rank
    (its message ends with ``[rank R]``, R that rank's rank in ``MPI.COMM_WORLD``).

    ``exc`` is this rank's exception or ``None``.  Returns normally when no rank failed.
    """
    rank = comm.Get_rank()
    first = all_min(comm, rank if exc is not None else comm.Get_size())
    if first == comm.Get_size():
        return
    payload = None
    if rank == first:
        world_rank = MPI.COMM_WORLD.Get_rank()    # messages name the world rank
        try:
            blob = pickle.dumps(exc)
        except Exception:
            blob = None
        try:
            text = f"{type(exc).__name__}: {exc}"
        except Exception:        # a __str__ that fails must not leave the others waiting
            text = f"{type(exc).__name__} (its message could not be formed)"
        payload = (blob, text, world_rank)
    blob, text, world_rank = bcast(comm, payload, root=first)
    if rank == first and exc is not None:
        raise _agreed_on(_rebuild(exc, world_rank), comm) from exc
    try:
        err = pickle.loads(blob) if blob is not None else None
    except Exception:       # a type that cannot be rebuilt here: its text is kept
        err = None
    raise _agreed_on(_rebuild(err if isinstance(err, BaseException) else HpcgnnError(text), world_rank), comm)


def abort_if_any(comm, exc: BaseException | None, cleanup=None) -> None:
    """Collective over ``comm``: like :func:`raise_if_any`, but a failure ends the whole
    job: every rank runs ``cleanup()`` (its errors ignored), prints the agreed error's
    one line and aborts (:func:`.failure.abort_job`).  For failures after which the
    ranks cannot go on, nor exit normally: a parallel HDF5 file whose write, flush or
    close failed cannot be closed again (the collective close hangs or crashes), and
    the interpreter's exit would close it."""
    try:
        raise_if_any(comm, exc)
    except BaseException as err:  # noqa: BLE001 - the job ends here
        if cleanup is not None:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - the line below is what matters
                pass
        failure.abort_job(type(err), err, err.__traceback__)


def _world_ranks(comm) -> tuple:
    n = comm.Get_size()
    return tuple(sorted(comm.Get_group().Translate_ranks(list(range(n)), MPI.COMM_WORLD.Get_group())))


def _agreed_on(err: BaseException, comm) -> BaseException:
    """Mark ``err`` as raised alike on every rank of ``comm`` (``agreed_ranks``, their
    world ranks: picklable, unlike a communicator): a caller that knows those ranks
    span the job may then end it cleanly."""
    try:
        err.agreed_ranks = _world_ranks(comm)
    except Exception:
        pass
    return err


def agreed_over(err: BaseException, comm) -> bool:
    """Whether ``err`` was raised alike on every rank of ``comm`` (the same world ranks)."""
    ranks = getattr(err, "agreed_ranks", None)
    if ranks is None or comm is None:
        return False
    try:
        return tuple(ranks) == _world_ranks(comm)
    except Exception:
        return False


@contextmanager
def agreed(comm):
    """Run a block on every rank of ``comm``; if it raises on any rank, it raises on all.

    Collective: every rank of ``comm`` must enter the block.  Use it around input
    validation that precedes collective calls::

        with agreed(comm):
            check_my_slice(...)
    """
    err = None
    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised on every rank below
        err = e
    raise_if_any(comm, err)


def agree_all(comm, ok: bool) -> bool:
    """Collective: True when ``ok`` holds on every rank."""
    return bool(all_min(comm, 1 if ok else 0))
