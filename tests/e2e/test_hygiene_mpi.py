"""The torch.distributed rendezvous store listens no wider and no longer than it must
(issue #29): run under ``mpirun -n K python -m pytest --with-mpi`` (every rank a
trainer, all on this host).

For every test: the TCP sockets this process listens on (``/proc/net/tcp{,6}``
entries in state LISTEN whose inode is one of this process's file descriptors) that
the process group added are bound to a loopback address, and once the group is up,
trainer 0 no longer listens on the store's port and a new connection to it is refused
or never answered.  Open MPI's own listeners (the TCP BTL binds all interfaces) were
there before and are Open MPI's business (docs/install.md); with
``HPCGNN_TEST_STRICT_LISTEN=1`` (tests/e2e/test_hygiene.py launches this file so, with
``--mca btl self,vader``) every listening socket of the process must be on loopback.
"""
import datetime
import ipaddress
import os
import socket

import pytest
import torch
import torch.distributed as dist

import hpcgnn.comm
from hpcgnn.comm import torch_dist
from hpcgnn.comm.mpi import MPI

world = MPI.COMM_WORLD
STRICT = os.environ.get("HPCGNN_TEST_STRICT_LISTEN", "0") == "1"


def listening(pid="self"):
    """``{(address, port)}`` of the TCP sockets process ``pid`` listens on."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    out = set()
    for name, fam in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            f = open(f"/proc/{pid}/net/{name}")
        except OSError:
            continue
        with f:
            next(f)
            for line in f:
                p = line.split()
                if p[3] != "0A" or p[9] not in inodes:         # 0A: TCP_LISTEN
                    continue
                hexaddr, hexport = p[1].split(":")
                raw = bytes.fromhex(hexaddr)
                # /proc prints the address as host-order 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.add((socket.inet_ntop(fam, raw), int(hexport, 16)))
    return out


def is_loopback(addr):
    ip = ipaddress.ip_address(addr)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def refused(host, port):
    """A new connection to host:port is not accepted (refused, or dropped unanswered)."""
    try:
        with socket.create_connection((host, port), timeout=3):
            return False
    except (ConnectionRefusedError, socket.timeout, TimeoutError):
        return True


@pytest.fixture
def trainers():
    ctx = hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=1", ranks_per_node=1)
    before = listening()
    yield ctx, before
    if dist.is_initialized():
        dist.destroy_process_group()
    ctx.finalize()


def check_after_group_is_up(ctx, before, host, port):
    tc = ctx.trainer_comm
    assert os.environ.get("GLOO_SOCKET_IFNAME") == "lo"          # gloo's listeners on loopback too
    now = listening()
    added = now - before
    assert all(is_loopback(a) for a, _ in added), added
    if STRICT:
        assert all(is_loopback(a) for a, _ in now), now
    if tc.Get_rank() == 0:
        assert port not in {p for _, p in now}, (port, now)    # the store's port: closed
    tc.Barrier()
    assert refused(host, port)
    t = torch.tensor([float(tc.Get_rank() + 1)])
    dist.all_reduce(t)                                          # the group still works
    assert t.item() == tc.Get_size() * (tc.Get_size() + 1) / 2


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_plain_env_init_binds_loopback_and_closes_the_store(trainers):
    ctx, before = trainers
    tc = ctx.trainer_comm
    torch_dist.export_env(ctx)
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    assert host == "127.0.0.1"                                  # all trainers on this host
    assert os.environ["RANK"] == str(tc.Get_rank()) and os.environ["WORLD_SIZE"] == str(tc.Get_size())
    # reserved, not listening: nothing can connect before the trainers rendezvous
    assert port not in {p for _, p in listening()}
    if tc.Get_rank() == 0:
        assert refused(host, port)
    tc.Barrier()
    dist.init_process_group(backend="gloo")                     # a DGL script's own start
    assert dist.get_world_size() == tc.Get_size() and dist.get_rank() == tc.Get_rank()
    check_after_group_is_up(ctx, before, host, port)

    # a second group after destroying the first: a new port, the same rules
    dist.destroy_process_group()
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    port2 = int(os.environ["MASTER_PORT"])
    assert port2 != port
    check_after_group_is_up(ctx, before, host, port2)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_own_init_binds_loopback_and_closes_the_store(trainers):
    ctx, before = trainers
    torch_dist.export_env(ctx)
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    assert torch_dist.init_process_group(ctx, "gloo") == "gloo"     # hpcgnn's own training path
    assert torch_dist._reserved["used"]                             # on the port export_env reserved
    check_after_group_is_up(ctx, before, host, port)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_own_init_without_export_env(trainers):
    """hpcgnn.comm.initialize alone (no hpcgnn.initialize): the group reserves its own port."""
    ctx, before = trainers
    torch_dist._drop_reservation()
    assert torch_dist.init_process_group(ctx, "gloo") == "gloo"
    added = listening() - before
    assert all(is_loopback(a) for a, _ in added), added
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == ctx.trainer_comm.Get_size()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_env_rendezvous_not_ours_goes_to_torch(trainers, monkeypatch):
    """Values the user set himself (another port) go to torch's own env:// handler."""
    ctx, _ = trainers
    tc = ctx.trainer_comm
    torch_dist.export_env(ctx)
    assert torch_dist._claims("env://") is not None
    monkeypatch.setenv("MASTER_PORT", str(int(os.environ["MASTER_PORT"]) + 1))
    assert torch_dist._claims("env://") is None
    monkeypatch.undo()
    assert torch_dist._claims(f"env://?rank={tc.Get_rank()}&world_size={tc.Get_size() + 1}") is None
