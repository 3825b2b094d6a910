"""``torch.distributed`` over the trainers, bootstrapped from MPI.

No ``MASTER_ADDR``/``MASTER_PORT`` for the user to pick and no ip_config file:
trainer 0 opens the rendezvous store (a ``TCPStore``) on a port the OS picks, and
MPI broadcasts the address to the other trainers, which then join the process group.
The backend is NCCL when CUDA is available, else gloo.

The store listens no wider and no longer than it must:

* **Where.**  Trainer 0 binds the store to one address, never to all interfaces:
  the loopback address ``127.0.0.1`` when every trainer is on its host (MPI's own
  shared-memory split, ``MPI_COMM_TYPE_SHARED``, decides); else the address its
  hostname resolves to, when that is an address of this host and not a loopback one
  (the address it advertised before, so whoever reached the store then reaches it
  now); else the local address the kernel routes from towards the other trainers'
  hosts (a UDP ``connect``, no packet sent), when that is one address for all of them.
  ``HPCGNN_DIST_ADDR`` names the address to bind and advertise instead (a cluster
  whose hostnames resolve to an interface the compute nodes cannot reach); only when
  none of these works (or ``HPCGNN_DIST_ADDR`` is not an address of this host) does
  it listen on all interfaces, and says so on stderr.  With every trainer on one host,
  gloo's own listening sockets are put on the loopback interface too
  (``GLOO_SOCKET_IFNAME=lo``, unless already set).
* **When.**  The port is reserved (bound, not listening) by :func:`export_env` at
  ``hpcgnn.initialize``; it listens only while the trainers connect to it, and once
  every trainer's store client has connected and answered, trainer 0 closes the
  listening socket (the established connections, all the process group needs, go on;
  the store serves them until the group is destroyed).  A later rendezvous (a new
  process group after ``destroy_process_group``) reserves a new port the same way.
  torch's ``split_group``/``shrink_group`` open new connections to the store (its
  ``clone()``); ``HPCGNN_DIST_STORE_OPEN=1`` keeps it listening for them.

Both ways of starting the group use it: :func:`init_process_group` (hpcgnn's own
training), and a script's plain ``torch.distributed.init_process_group("gloo")``
after ``hpcgnn.initialize()``: :func:`export_env` sets ``MASTER_ADDR``/``MASTER_PORT``/
``RANK``/``WORLD_SIZE`` and puts a wrapper in front of torch's ``env://`` rendezvous
that, for exactly those values, rendezvous as above (any other ``env://`` rendezvous
goes to torch's own handler unchanged).
"""
from __future__ import annotations

import ctypes
import importlib
import datetime
import ipaddress
import os
import socket
import struct
from urllib.parse import parse_qs, urlparse

import torch
import torch.distributed as dist

from .. import logs
from ..pyg_tmp import use_private_tmpdir
from . import watchdog
from .agree import agreed
from .collectives import all_max, all_min
from .mpi import MPI

_LOOPBACK = "127.0.0.1"
_WILDCARD = "0.0.0.0"

# This process's reservation, made by export_env (collective over the trainers) and
# used by the first rendezvous: {"tc", "host", "port", "sock" (trainer 0 only),
# "used", "bind"}.  ``host``/``port`` are what MASTER_ADDR/MASTER_PORT were set to.
_reserved: dict | None = None


# -- where the store listens -----------------------------------------------------

def _is_loopback(addr: str | None) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _hostname_address() -> str | None:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


def _bindable(addr: str) -> bool:
    try:
        with socket.socket(_family(addr), socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
        return True
    except (OSError, ValueError):
        return False


def _route_source(peer: str) -> str | None:
    """The local address the kernel sends from towards ``peer`` (no packet is sent)."""
    try:
        with socket.socket(_family(peer), socket.SOCK_DGRAM) as s:
            s.connect((peer, 9))
            return s.getsockname()[0]
    except (OSError, ValueError):
        return None


def choose_address(one_host: bool, own: str | None, peers: list, explicit: str | None = None):
    """Where trainer 0's store listens: ``(bind, advertise, why)``.

    ``one_host``: every trainer is on trainer 0's host; ``own``: the address trainer
    0's hostname resolves to; ``peers``: the addresses the other trainers' hostnames
    resolve to (``None`` where it failed); ``explicit``: ``HPCGNN_DIST_ADDR``.
    ``bind`` is ``0.0.0.0`` only when nothing narrower can be trusted."""
    if explicit:
        if _bindable(explicit):
            return explicit, explicit, "HPCGNN_DIST_ADDR"
        return ("::" if _family(explicit) == socket.AF_INET6 else _WILDCARD), explicit, \
            f"HPCGNN_DIST_ADDR={explicit} is not an address of this host"
    if one_host:
        return _LOOPBACK, _LOOPBACK, "all trainers on one host"
    if own and not _is_loopback(own) and _bindable(own):
        return own, own, "the address of trainer 0's hostname"
    sources = {_route_source(p) for p in peers if p and not _is_loopback(p)}
    if len(sources) == 1 and None not in sources:
        src = sources.pop()
        if not _is_loopback(src) and _bindable(src):
            return src, src, "the address trainer 0 reaches the other trainers from"
    advertise = own if own and not _is_loopback(own) else (socket.gethostname() or _LOOPBACK)
    return _WILDCARD, advertise, "no address of trainer 0's host was found that the others surely reach"


def _one_host(tc) -> bool:
    host = tc.Split_type(MPI.COMM_TYPE_SHARED, key=tc.Get_rank())
    try:
        mine = host.Get_size() == tc.Get_size()
    finally:
        host.Free()
    return bool(all_min(tc, int(mine)))


def _reserve(tc):
    """Collective over the trainers: trainer 0 binds a socket (not listening yet) to
    the chosen address on a port the OS picks.  Returns ``(sock or None, host, port,
    one_host)``, host and port the same on every trainer; ``sock`` on trainer 0 only.
    ``host``/``port`` are ``None`` when trainer 0 could not bind (every trainer sees it)."""
    one_host = _one_host(tc)
    peers = tc.gather(None if tc.Get_rank() == 0 else _hostname_address(), root=0)
    sock, where = None, None
    if tc.Get_rank() == 0:
        bind, host, why = choose_address(one_host, _hostname_address(), peers[1:],
                                         os.environ.get("HPCGNN_DIST_ADDR", "").strip() or None)
        try:
            sock = socket.socket(_family(bind), socket.SOCK_STREAM)
            sock.bind((bind, 0))
            where = (host, sock.getsockname()[1])
        except OSError as e:
            if sock is not None:
                sock.close()
            sock, where = None, None
            why = f"{why}; binding {bind} failed: {e}"
        if where is None or bind in (_WILDCARD, "::"):
            what = "no port for the rendezvous" if where is None else \
                "listening on all interfaces until the trainers have joined"
            logs.get("comm").warning(f"hpcgnn: torch.distributed store on host {socket.gethostname()}: {why}; "
                                     f"{what} (set HPCGNN_DIST_ADDR to an address of trainer 0's host that the "
                                     "other trainers reach)")
    where = tc.bcast(where, root=0)
    if where is None:
        return None, None, None, one_host
    return sock, where[0], where[1], one_host


def _loopback_interface() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return "lo" if "lo" in names else None


def _tcp_store(host, port, size, timeout, fd=None):

    kw = dict(is_master=fd is not None, timeout=timeout, wait_for_workers=fd is None)
    if fd is not None:
        kw["master_listen_fd"] = fd
    try:
        return dist.TCPStore(host, port, size, use_libuv=True, **kw)
    except TypeError:               # a torch without the libuv server
        return dist.TCPStore(host, port, size, **kw)


_DROP_ALL = struct.pack("HBBI", 0x06, 0, 0, 0)      # BPF "ret #0": drop every packet
_SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)


def _drop_new_connections(fd: int) -> None:
    """Attach a drop-all socket filter to the listening socket: new handshakes are
    dropped, established connections (their own sockets, cloned before) go on."""
    prog = ctypes.create_string_buffer(_DROP_ALL)
    fprog = struct.pack("HxxxxxxP", 1, ctypes.addressof(prog))
    s = socket.socket(fileno=os.dup(fd))
    try:
        s.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    finally:
        s.close()


def _stop_listening(fd: int, store) -> None:
    """Trainer 0, once every trainer's client has connected: no new connection.  The
    filter works with either TCPStore server; with the libuv one (torch's default),
    whose event loop owns ``fd``, ``fd`` is then pointed at a fresh unbound socket: the
    listening socket's last reference goes, the kernel closes it (and drops it from the
    loop's epoll set), and the port is free; the loop never polls ``fd`` again."""
    try:
        _drop_new_connections(fd)
    except OSError:
        pass
    if getattr(store, "libuvBackend", False):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blank:
            os.dup2(blank.fileno(), fd)


def _rendezvous(tc, timeout: datetime.timedelta, reservation=None):
    """Collective over the trainers: the store every trainer is connected to, trainer
    0's no longer accepting connections.  ``reservation``: ``(sock, host, port,
    one_host)`` from :func:`_reserve` (else one is made now)."""
    sock, host, port, one_host = reservation if reservation is not None else _reserve(tc)
    if host is None:
        raise RuntimeError("torch.distributed: trainer 0 could not open a port for the rendezvous store")
    if one_host and not os.environ.get("GLOO_SOCKET_IFNAME") and _loopback_interface():
        os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()     # gloo's listeners on loopback too
    rank, size = tc.Get_rank(), tc.Get_size()
    fd = None
    with agreed(tc):            # listening before any trainer connects
        if rank == 0:
            sock.listen(max(128, size))
            fd = sock.detach()      # the store's server owns it from here
    store = None
    with agreed(tc):
        store = _tcp_store(host, port, size, timeout, fd)
        store.add("hpcgnn/joined", 1)       # a round trip: trainer 0's server has accepted us
    if rank == 0 and os.environ.get("HPCGNN_DIST_STORE_OPEN", "0").strip() != "1":
        _stop_listening(fd, store)  # every trainer's client is connected (they all passed the line above)
    return store


# -- the two ways of starting the process group ----------------------------------

def init_process_group(ctx, backend: str | None = None, timeout_s: float | None = None):
    """Collective over the trainers: start ``torch.distributed`` with one rank per
    trainer (rank = rank in ``ctx.trainer_comm``).  Returns the backend used:
    ``backend``, else gloo for CPU tensors and, where CUDA is available, NCCL for
    CUDA ones (``"cpu:gloo,cuda:nccl"``; set this trainer's GPU with
    ``torch.cuda.set_device`` before the first CUDA collective).
    Already initialised: returns the backend in use.  ``timeout_s`` (default
    ``HPCGNN_TIMEOUT``) bounds every collective of the group: a trainer that froze
    then ends the job with a line naming it (:mod:`.failure`)."""

    if dist.is_initialized():
        return dist.get_backend()
    tc = ctx.trainer_comm
    if tc is None:
        raise RuntimeError(f"init_process_group: rank {ctx.rank} is a {ctx.role}; only trainers join")
    if backend is None:     # both where CUDA is: a script may keep its model on the CPU
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    timeout = datetime.timedelta(seconds=watchdog.timeout_s() if timeout_s is None else timeout_s)
    store = _rendezvous(tc, timeout, _take_reservation(tc))
    with agreed(tc):
        dist.init_process_group(backend, store=store, rank=tc.Get_rank(), world_size=tc.Get_size(),
                                timeout=timeout)
    ctx.on_finalize(_destroy)
    return backend


def _take_reservation(tc):
    """The port export_env reserved, once (the same answer on every trainer)."""
    r = _reserved
    if r is None or r["used"] or r["tc"] is not tc:
        return None
    r["used"] = True
    return r["sock"], r["host"], r["port"], r["one_host"]


def export_env(ctx) -> None:
    """Collective over the trainers: set ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``
    and ``WORLD_SIZE`` (trainer rank and count) in each trainer's environment, so
    that a script's plain ``torch.distributed.init_process_group("gloo")`` (DGL's
    launcher sets them the same way) joins the trainers.  Values already there are
    replaced (a job started from another job's rank inherits that job's); with
    ``HPCGNN_TORCH_ENV=0`` on any trainer nothing is set on any of them.

    Also sends PyTorch Geometric's generated modules to a private directory
    (:func:`hpcgnn.pyg_tmp.use_private_tmpdir`).  The port is reserved here, not
    listened on: see the module's description."""
    global _reserved

    use_private_tmpdir()
    tc = ctx.trainer_comm
    off = all_max(tc, int(os.environ.get("HPCGNN_TORCH_ENV", "1").strip() == "0"))
    if off:                                   # the same decision on every trainer
        return
    _drop_reservation()
    sock, host, port, one_host = _reserve(tc)
    if host is None:
        return
    _reserved = dict(tc=tc, sock=sock, host=host, port=port, one_host=one_host, used=False)
    os.environ.update(RANK=str(tc.Get_rank()), WORLD_SIZE=str(tc.Get_size()),
                      MASTER_ADDR=str(host), MASTER_PORT=str(port))
    _install_env_rendezvous()
    ctx.on_finalize(lambda: _drop_reservation(tc))


def _drop_reservation(tc=None) -> None:
    """Forget the reservation (of ``tc`` only, when given), closing a socket never used."""
    global _reserved
    r = _reserved
    if r is None or (tc is not None and r["tc"] is not tc):
        return
    _reserved = None
    if not r["used"] and r["sock"] is not None:
        r["sock"].close()


_torch_env_handler = None


def _install_env_rendezvous() -> None:
    """Put :func:`_env_rendezvous` in front of torch's ``env://`` handler (once).
    Through torch's table itself: its public ``register_rendezvous_handler`` refuses
    a scheme already registered (``env`` always is), and ``init_process_group()``
    with no ``init_method`` (every DGL script) always means ``env://``, so a scheme
    of our own would never be asked.  ``HPCGNN_TORCH_ENV=0`` leaves torch as it is."""
    global _torch_env_handler
    # the module: torch.distributed's attribute of that name is its function rendezvous()
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    handlers = getattr(rdzv, "_rendezvous_handlers", None)
    current = handlers.get("env") if isinstance(handlers, dict) else None
    if current is None or getattr(current, "_hpcgnn", False):
        return
    _torch_env_handler = current
    handlers["env"] = _env_rendezvous


def _claims(url: str):
    """The reservation when this ``env://`` rendezvous is the one export_env set up
    (the environment still holds its values, rank and size are the trainers'), else None."""
    r = _reserved
    if r is None:
        return None
    try:
        query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
        rank = int(query.get("rank", os.environ.get("RANK", "-1")))
        size = int(query.get("world_size", os.environ.get("WORLD_SIZE", "-1")))
        tc = r["tc"]
        mine = (os.environ.get("MASTER_ADDR") == str(r["host"]) and os.environ.get("MASTER_PORT") == str(r["port"])
                and rank == tc.Get_rank() and size == tc.Get_size())
    except Exception:           # a freed communicator (the context finalized), a bad value
        return None
    return r if mine else None


def _env_rendezvous(url: str, timeout=None, **kwargs):
    r = _claims(url)
    if r is None:
        yield from _torch_env_handler(url, **(dict(kwargs, timeout=timeout) if timeout is not None else kwargs))
        return
    global _reserved
    tc = r["tc"]
    reservation = _take_reservation(tc)
    if reservation is None:             # used by an earlier group: a new port, on every trainer
        reservation = _reserve(tc)
        if reservation[1] is not None:
            sock, host, port, one_host = reservation
            _reserved = dict(r, sock=None, host=host, port=port, one_host=one_host, used=True)
            os.environ.update(MASTER_ADDR=str(host), MASTER_PORT=str(port))
    store = _rendezvous(tc, timeout or datetime.timedelta(seconds=1800), reservation)
    yield store, tc.Get_rank(), tc.Get_size()
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


_env_rendezvous._hpcgnn = True


def _destroy():

    if dist.is_initialized():
        dist.destroy_process_group()
