"""A test bed of K real, isolated hosts on one Linux machine, for multi-host tests and
benchmarks (docs/testbed.md).

Each host is a set of Linux namespaces held open by one sleeping process:

* **network**: ``ip netns`` namespace ``hpcgnn-h<i>`` with two links, as a cluster
  node has: ``eth0`` on the *management* network (bridge ``hpcgnn-br0``,
  10.123.0.0/24, the root namespace at .1) and ``eth1`` on the *data* network (bridge
  ``hpcgnn-br1``, 10.124.0.0/24).  Each link is a veth pair whose root-namespace end
  (``hpcgnn-m<i>``, ``hpcgnn-d<i>``) is a port of its bridge; host i is .<i+2> on both.
  Open MPI's out-of-band traffic (mpirun <-> orted) uses the management network; MPI's
  TCP BTL and ``torch.distributed`` the data network (the host's name resolves to its
  data address).
* **UTS**: its own hostname, ``hpcgnn-h<i>``.
* **mount**: private tmpfs on ``/dev/shm`` and ``/tmp`` (so shared memory segments and
  Open MPI's session directories are per host) and a private ``/etc/hosts`` naming
  every host.  Everything else -- the repository, the venv, :attr:`Testbed.shared`
  (the "shared file system", under ``/var/tmp``) -- is the root file system, seen by
  every host at the same path.
* **IPC**: its own System V IPC.

``mpirun`` runs in the root namespace (a login node on the management network,
10.123.0.1) and starts one ``orted`` per host through Open MPI's rsh launcher, whose
agent (``scripts/netns_agent.sh``) enters the host's namespaces with ``nsenter``
instead of logging in with ssh.  Hosts are given to ``mpirun`` by management address
(``--host 10.123.0.2:2,...``), so ``mpirun`` needs no name resolution.

Faults: :meth:`Testbed.link_down` (a pulled cable: the data link, the management
link, or both), :meth:`Testbed.delay` (``tc netem``, or a user-space delay line where
the kernel has no netem).

Only one test bed exists at a time on a machine (``flock`` on
``/run/hpcgnn-testbed.lock``); whoever takes the lock first removes what a crashed
earlier run left (processes in the hosts, namespaces, veths, bridges, the state and
shared directories), and :func:`hosts` removes everything again on the way out,
whatever happened inside.  ``python tests/hosts.py cleanup`` does it by hand.

    from hosts import hosts
    with hosts(2) as bed:
        res = bed.mpirun(["hostname"], per_host=1)
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _under_tmp() -> list[str]:
    """The checkout and the interpreter's prefixes, where they live under /tmp."""
    paths = {ROOT, os.path.realpath(ROOT), sys.prefix, os.path.realpath(sys.prefix),
             os.path.dirname(os.path.realpath(sys.executable))}
    return sorted({p for p in paths if p.startswith("/tmp/")})
AGENT = os.path.join(ROOT, "scripts", "netns_agent.sh")

PREFIX = "hpcgnn"                        # every name the bed makes starts with this
# the two networks: (bridge, /24 prefix, host interface, root-side veth prefix)
NETS = {
    "mgmt": (f"{PREFIX}-br0", os.environ.get("HPCGNN_TESTBED_NET", "10.123.0"), "eth0", f"{PREFIX}-m"),
    "data": (f"{PREFIX}-br1", os.environ.get("HPCGNN_TESTBED_DATA_NET", "10.124.0"), "eth1", f"{PREFIX}-d"),
}
MGMT_NET, DATA_NET = NETS["mgmt"][1], NETS["data"][1]
STATE = os.environ.get("HPCGNN_TESTBED_DIR", "/run/hpcgnn-testbed")
SHARED = os.environ.get("HPCGNN_TESTBED_SHARED", "/var/tmp/hpcgnn-testbed")
LOCK = STATE + ".lock"
HOLDER = f"{PREFIX}-testbed-holder"      # argv[0] of the processes holding the namespaces
NETNS_DIR = "/run/netns"

# Open MPI settings for jobs across the bed: out-of-band traffic on the management
# network, MPI's on the data network.
MCA = (
    ("plm_rsh_agent", AGENT),
    ("plm_rsh_no_tree_spawn", "1"),       # mpirun starts every orted itself
    ("oob_tcp_if_include", f"{MGMT_NET}.0/24"),
    ("btl_tcp_if_include", f"{DATA_NET}.0/24"),
    ("btl", "self,vader,tcp"),
    ("osc", "sm,pt2pt"),                   # one-sided over TCP across hosts (docs/api.md)
)


class Unavailable(RuntimeError):
    """The machine cannot host a test bed (not root, no namespaces, no ``ip``...)."""


def _run(cmd, check=True, timeout=30, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {res.returncode}: {(res.stderr or res.stdout).strip()}")
    return res


try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent():
    """preexec_fn: SIGKILL this child when the thread that started it ends (the
    namespace holders and the jobs do not outlive a killed pytest)."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)                     # PR_SET_PDEATHSIG


def unavailable_reason() -> str | None:
    """Why no test bed can be built here, or None.  Cheap: probes the tools and builds
    a throwaway bridge + veth inside a private namespace (nothing in the root one)."""
    if not sys.platform.startswith("linux"):
        return "multi-host test bed needs Linux namespaces"
    if os.geteuid() != 0:
        return "multi-host test bed needs root (network namespaces, veth, bridge)"
    for tool in ("ip", "nsenter", "unshare", "mpirun"):
        if shutil.which(tool) is None:
            pkg = {"ip": "iproute2", "mpirun": "openmpi-bin"}.get(tool, "util-linux")
            return f"multi-host test bed needs '{tool}' (Debian package {pkg})"
    probe = ("ip link add hpcgnn-pb0 type veth peer name hpcgnn-pb1 && ip link add hpcgnn-pbr type bridge && "
             "ip link set hpcgnn-pb0 master hpcgnn-pbr && hostname hpcgnn-probe && "
             "mount -t tmpfs hpcgnn-probe /dev/shm")
    try:
        res = _run(["unshare", "--net", "--uts", "--ipc", "--mount", "--propagation", "private",
                    "sh", "-c", probe], check=False, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"multi-host test bed: namespaces unavailable ({e})"
    if res.returncode != 0:
        return f"multi-host test bed: namespaces/veth/bridge unavailable here: {(res.stderr or res.stdout).strip()}"
    return None


def netem_unavailable_reason() -> str | None:
    """Why ``tc qdisc ... netem`` cannot be used here, or None (probed in a private
    network namespace)."""
    if shutil.which("tc") is None:
        return "tc not found (Debian package iproute2)"
    res = _run(["unshare", "--net", "sh", "-c",
                "ip link add hpcgnn-pb0 type veth peer name hpcgnn-pb1 && "
                "tc qdisc add dev hpcgnn-pb0 root netem delay 1ms"], check=False, timeout=20)
    if res.returncode != 0:
        return f"tc netem unavailable ({(res.stderr or res.stdout).strip()}; kernel without sch_netem?)"
    return None


# --------------------------------------------------------------------------- cleanup

def _ns_id(pid, kind):
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _holder_pids():
    out = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if argv0.startswith(HOLDER):
            out.append(pid)
    return out


def _bed_netns():
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(f"{PREFIX}-h"))
    except OSError:
        return []


def kill_inside(netns_names=None, holders=None, keep_holders=True, rounds=20):
    """SIGKILL every process inside the bed's hosts (by network, UTS or mount
    namespace), the holders too unless ``keep_holders``.  Repeats until none is left
    (a dying orted may still fork)."""
    me = {kind: _ns_id("self", kind) for kind in ("net", "uts", "mnt")}
    netns_names = _bed_netns() if netns_names is None else netns_names
    holders = _holder_pids() if holders is None else holders
    targets = set()
    for name in netns_names:
        try:
            targets.add(("net", f"net:[{os.stat(os.path.join(NETNS_DIR, name)).st_ino}]"))
        except OSError:
            pass
    for pid in holders:
        for kind in ("net", "uts", "mnt"):
            ns = _ns_id(pid, kind)
            if ns is not None:
                targets.add((kind, ns))
    targets = {(k, ns) for k, ns in targets if ns != me[k]}          # never the root namespaces
    if not targets:
        return 0
    killed = 0
    for _ in range(rounds):
        victims = []
        for pid in _pids():
            if pid == os.getpid() or (keep_holders and pid in holders):
                continue
            if any(_ns_id(pid, k) == ns for k, ns in targets):
                victims.append(pid)
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += len(victims)
        time.sleep(0.1)
    return killed


def cleanup():
    """Remove everything a test bed makes (call with the lock held): processes in the
    hosts, the holders, the network namespaces, veths, bridges, the state and shared
    directories."""
    kill_inside(keep_holders=False)
    for name in _bed_netns():
        _run(["ip", "netns", "delete", name], check=False)
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if re.match(rf"{PREFIX}-(br\d+|[md]\d+|r\d+[md][ab])$", name):
                _run(["ip", "link", "delete", name], check=False)
    shutil.rmtree(STATE, ignore_errors=True)
    shutil.rmtree(SHARED, ignore_errors=True)


def leftovers() -> list[str]:
    """What of a test bed is still on this machine (empty after a clean teardown)."""
    out = [f"netns {n}" for n in _bed_netns()]
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1 and parts[1].strip().startswith(PREFIX):
            out.append("link " + parts[1].strip())
    out += [f"holder pid {p}" for p in _holder_pids()]
    with open("/proc/self/mounts") as f:
        out += ["mount " + ln.split()[1] for ln in f if PREFIX in ln]
    out += [p for p in (STATE, SHARED) if os.path.exists(p)]
    return out


# --------------------------------------------------------------------------- the bed

class Host:
    def __init__(self, bed, index):
        self.bed = bed
        self.index = index
        self.name = f"{PREFIX}-h{index}"
        self.addr = f"{MGMT_NET}.{index + 2}"          # management: what mpirun is given
        self.data_addr = f"{DATA_NET}.{index + 2}"     # data: what the host's name resolves to
        self.holder = None                    # Popen of the process holding the namespaces
        self.relays = {}                      # net -> user-space delay line, see Testbed.delay

    def veth(self, net="data"):
        """The root-namespace end of this host's link on ``net`` ("mgmt" or "data")."""
        return f"{NETS[net][3]}{self.index}"

    @property
    def pid(self):
        return self.holder.pid

    def nsenter(self):
        """The command prefix that runs a command inside this host."""
        return ["nsenter", "-t", str(self.pid), "--net", "--uts", "--ipc", "--mount", "--wd=/"]

    def run(self, cmd, check=True, timeout=60, **kw):
        """Run ``cmd`` (argv list, or a string for ``sh -c``) inside this host."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return _run(self.nsenter() + argv, check=check, timeout=timeout, **kw)

    def __repr__(self):
        return f"Host({self.name}, {self.addr}/{self.data_addr}, pid {self.holder.pid if self.holder else None})"


def _nets(net):
    if net == "all":
        return ["mgmt", "data"]
    if net not in NETS:
        raise ValueError(f"net={net!r}: 'mgmt', 'data' or 'all'")
    return [net]


class Testbed:
    def __init__(self, k):
        self.hosts = [Host(self, i) for i in range(k)]
        self.gateway = f"{MGMT_NET}.1"          # mpirun's address, on the management network
        self.state = STATE
        self.shared = None                    # a directory every host sees at the same path
        self._jobs = []                       # Popens of mpirun, killed at teardown

    def __getitem__(self, i):
        return self.hosts[i]

    def __len__(self):
        return len(self.hosts)

    # ---- building
    def _build(self):
        os.makedirs(os.path.join(self.state, "hosts"), exist_ok=True)
        os.makedirs(SHARED, exist_ok=True)
        self.shared = tempfile.mkdtemp(prefix="bed-", dir=SHARED)
        os.chmod(self.shared, 0o777)
        etc_hosts = os.path.join(self.state, "etc-hosts")
        with open(etc_hosts, "w") as f:
            f.write("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
            f.write(f"{self.gateway} {PREFIX}-gw\n")
            for h in self.hosts:
                f.write(f"{h.data_addr} {h.name}\n{h.addr} {h.name}-mgmt\n")
        for bridge, net, _, _ in NETS.values():
            _run(["ip", "link", "add", bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{net}.1/24", "dev", bridge])
            _run(["ip", "link", "set", bridge, "up"])
        for h in self.hosts:
            self._build_host(h, etc_hosts)
        self._check_network()

    def _build_host(self, h, etc_hosts):
        try:
            _run(["ip", "netns", "add", h.name])
        except RuntimeError as e:        # e.g. a container that may not mount on /run/netns
            raise Unavailable(f"multi-host test bed: {e}") from None
        _run(["ip", "-n", h.name, "link", "set", "lo", "up"])
        for net, (bridge, prefix, dev, _) in NETS.items():
            _run(["ip", "link", "add", h.veth(net), "type", "veth", "peer", "name", dev, "netns", h.name])
            _run(["ip", "link", "set", h.veth(net), "master", bridge, "up"])
            _run(["ip", "-n", h.name, "addr", "add", f"{prefix}.{h.index + 2}/24", "dev", dev])
            _run(["ip", "-n", h.name, "link", "set", dev, "up"])
        # a checkout or venv under /tmp (a CI clone) stays visible under the private /tmp:
        # bound aside before the tmpfs covers /tmp, then bound back at the same path
        old = os.path.join(self.state, f"old-tmp-{h.index}")
        os.makedirs(old, exist_ok=True)
        keep = "".join(f"mkdir -p {shlex.quote(p)}; mount --bind {shlex.quote(old + p[len('/tmp'):])} "
                       f"{shlex.quote(p)}; " for p in _under_tmp())
        script = (f"set -e; hostname {h.name}; "
                  f"mount -t tmpfs -o mode=1777 {h.name}-shm /dev/shm; "
                  f"mount --bind /tmp {shlex.quote(old)}; "
                  f"mount -t tmpfs -o mode=1777 {h.name}-tmp /tmp; {keep}"
                  f"mount --bind {etc_hosts} /etc/hosts; "
                  f"echo ready; exec -a {HOLDER}-{h.index} sleep infinity")
        h.holder = subprocess.Popen(
            ["nsenter", f"--net={NETNS_DIR}/{h.name}", "unshare", "--uts", "--ipc", "--mount",
             "--propagation", "private", "bash", "-c", script],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_die_with_parent)
        line = h.holder.stdout.readline().strip()
        if line != "ready":
            h.holder.kill()
            raise RuntimeError(f"host {h.name}: namespace holder failed: {h.holder.stderr.read().strip()}")
        for key in (h.addr, h.data_addr, h.name):      # what the rsh agent looks up
            with open(os.path.join(self.state, "hosts", key), "w") as f:
                f.write(f"{h.pid}\n")

    def _check_network(self):
        """Every host reaches the root namespace on both networks (mpirun listens on the
        management one; a firewall dropping bridged traffic would show here)."""
        import socket

        code = ("import socket,sys\n"
                "for a in sys.argv[1:]:\n"
                "    h, p = a.split(':')\n"
                "    socket.create_connection((h, int(p)), timeout=5).close()\n")
        servers, targets = [], []
        try:
            for _, prefix, _, _ in NETS.values():
                srv = socket.socket()
                servers.append(srv)
                srv.bind((f"{prefix}.1", 0))
                srv.listen(64)
                targets.append(f"{prefix}.1:{srv.getsockname()[1]}")
            for h in self.hosts:
                h.run([sys.executable, "-c", code, *targets], timeout=30)
        except RuntimeError as e:
            raise RuntimeError(f"test bed: hosts cannot reach the root namespace over the bridges "
                               f"(a firewall on bridged traffic?): {e}") from None
        finally:
            for srv in servers:
                srv.close()

    # ---- faults
    def link_down(self, i, net="data"):
        """Pull host i's cable on ``net``: "data" (MPI and torch.distributed traffic),
        "mgmt" (mpirun <-> orted) or "all" (the host is unreachable)."""
        for n in _nets(net):
            _run(["ip", "link", "set", self.hosts[i].veth(n), "down"])

    def link_up(self, i, net="all"):
        for n in _nets(net):
            _run(["ip", "link", "set", self.hosts[i].veth(n), "up"])

    def delay(self, i, ms, net="data"):
        """Delay every frame towards host i on ``net`` by ``ms`` milliseconds: ``tc
        qdisc add dev <its veth> root netem delay <ms>ms`` where the kernel has netem,
        else a user-space delay line spliced into the link (:func:`_relay_main`).
        Returns how ("netem" or "relay")."""
        h = self.hosts[i]
        if netem_unavailable_reason() is None:
            _run(["tc", "qdisc", "add", "dev", h.veth(net), "root", "netem", "delay", f"{ms}ms"])
            return "netem"
        # the host's port leaves the bridge; a new veth pair takes its place, and a
        # relay process copies frames between the two, holding those towards the host.
        a, b = f"{PREFIX}-r{i}{net[0]}a", f"{PREFIX}-r{i}{net[0]}b"
        _run(["ip", "link", "set", h.veth(net), "nomaster"])
        _run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
        _run(["ip", "link", "set", b, "master", NETS[net][0], "up"])
        for dev in (a, h.veth(net)):
            _run(["ip", "link", "set", dev, "promisc", "on", "up"])
        relay = subprocess.Popen([sys.executable, os.path.abspath(__file__), "relay", a, h.veth(net), str(ms)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=_die_with_parent)
        h.relays[net] = relay
        if relay.stdout.readline().strip() != "relaying":
            relay.kill()
            raise RuntimeError(f"delay relay for {h.name} failed: {relay.stderr.read().strip()}")
        return "relay"

    def undelay(self, i, net="data"):
        h = self.hosts[i]
        relay = h.relays.pop(net, None)
        if relay is not None:
            relay.kill()
            relay.wait()
            _run(["ip", "link", "delete", f"{PREFIX}-r{i}{net[0]}a"], check=False)
            _run(["ip", "link", "set", h.veth(net), "promisc", "off"], check=False)
            _run(["ip", "link", "set", h.veth(net), "master", NETS[net][0], "up"])
        else:
            _run(["tc", "qdisc", "del", "dev", h.veth(net), "root"], check=False)

    # ---- jobs
    def host_list(self, per_host, hosts=None):
        hosts = self.hosts if hosts is None else [self.hosts[i] for i in hosts]
        return ",".join(f"{h.addr}:{per_host}" for h in hosts)

    def mpirun_argv(self, argv, per_host=1, hosts=None, mca=(), extra=()):
        """``mpirun`` over the bed: ``per_host`` ranks on each host (all of them, or the
        indices in ``hosts``), consecutive ranks on the same host."""
        hs = self.hosts if hosts is None else [self.hosts[i] for i in hosts]
        cmd = ["mpirun", "--host", self.host_list(per_host, hosts), "-n", str(per_host * len(hs)),
               "--map-by", "slot"]
        for key, val in (*MCA, *mca):
            cmd += ["--mca", key, val]
        return cmd + list(extra) + list(argv)

    def env(self, extra=None):
        from conftest import clean_mpi_env
        env = clean_mpi_env(extra)
        env["HPCGNN_TESTBED_DIR"] = self.state
        env.setdefault("SHELL", "/bin/sh")
        return env

    def popen(self, argv, per_host=1, hosts=None, env=None, mca=(), **kw):
        """Start a job over the bed (see :meth:`mpirun_argv`); the Popen of mpirun, its
        output piped unless ``stdout``/``stderr`` say otherwise.  Jobs still running at
        teardown are killed."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen(self.mpirun_argv(argv, per_host, hosts, mca), env=self.env(env), cwd=ROOT,
                             text=True, preexec_fn=_die_with_parent, **kw)
        self._jobs.append(p)
        return p

    def mpirun(self, argv, per_host=1, hosts=None, env=None, mca=(), timeout=120):
        """Run a job over the bed; returns the CompletedProcess (never raises on rc).
        A job past ``timeout`` is killed (with whatever it left in the hosts) and
        ``subprocess.TimeoutExpired`` raised, with the output so far."""
        p = self.popen(argv, per_host, hosts, env, mca)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.stop(p)
            try:
                out, err = p.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                out, err = "", ""
            raise subprocess.TimeoutExpired(e.cmd, timeout, out, err) from None
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def stop(self, p, grace=5):
        """End job ``p`` (a Popen of mpirun: SIGTERM, then SIGKILL after ``grace``
        seconds) and everything it left inside the hosts.  Does not read its output."""
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.kill_jobs()

    def kill_jobs(self):
        """SIGKILL every process inside the hosts except the namespace holders."""
        built = [h for h in self.hosts if h.holder is not None]
        return kill_inside([h.name for h in self.hosts], [h.pid for h in built], keep_holders=True)

    def teardown(self):
        for p in self._jobs:
            if p.poll() is None:
                with contextlib.suppress(Exception):
                    p.kill()
                    p.wait(10)
        for h in self.hosts:
            for relay in h.relays.values():
                with contextlib.suppress(Exception):
                    relay.kill()
                    relay.wait(5)
        self.kill_jobs()
        for h in self.hosts:
            if h.holder is not None:
                h.holder.kill()
                with contextlib.suppress(Exception):
                    h.holder.communicate(timeout=10)
        cleanup()


@contextlib.contextmanager
def hosts(k=2):
    """Build a test bed of ``k`` hosts, yield the :class:`Testbed`, tear it down.
    Raises :class:`Unavailable` (with the reason) where the machine cannot."""
    reason = unavailable_reason()
    if reason:
        raise Unavailable(reason)
    if not 1 <= k <= 200:
        raise ValueError(f"hosts({k}): 1 to 200 hosts")
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    lock = open(LOCK, "w")
    try:
        wait = float(os.environ.get("HPCGNN_TESTBED_WAIT", "240"))
        deadline = time.monotonic() + wait
        while True:                                    # another run's bed: wait for it
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Unavailable(f"another test bed is in use on this machine ({LOCK} held for more "
                                      f"than {wait:g} s; HPCGNN_TESTBED_WAIT)") from None
                time.sleep(1)
        cleanup()                                      # a crashed earlier run's remains
        bed = Testbed(k)
        try:
            bed._build()
            yield bed
        finally:
            bed.teardown()
    finally:
        lock.close()


def fixture(k=2, scope="module"):
    """A pytest fixture giving a :class:`Testbed` of ``k`` hosts, skipping (with the
    reason) where the machine cannot build one:

        bed = hosts.fixture(3)          # at module level of a test file
    """
    import pytest

    @pytest.fixture(scope=scope)
    def bed():
        reason = unavailable_reason()
        if reason:
            pytest.skip(reason)
        try:
            with hosts(k) as b:
                yield b
        except Unavailable as e:
            pytest.skip(str(e))

    return bed


# --------------------------------------------------------------------------- delay line

def _relay_main(dev_bridge, dev_host, ms):
    """Copy Ethernet frames between two interfaces, holding those that go towards the
    host (``dev_bridge`` -> ``dev_host``) ``ms`` milliseconds, the others not: netem's
    ``delay`` on the host's port, for kernels without sch_netem.  Frames keep their
    offload metadata (PACKET_VNET_HDR), so large TCP segments pass whole."""
    import heapq
    import select
    import socket

    SOL_PACKET, PACKET_VNET_HDR, PACKET_OUTGOING = 263, 15, 4
    ETH_P_ALL = 0x0003
    socks = {}
    for dev in (dev_bridge, dev_host):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((dev, 0))
        s.setblocking(False)
        socks[dev] = s
    other = {socks[dev_bridge]: socks[dev_host], socks[dev_host]: socks[dev_bridge]}
    held = socks[dev_bridge]                 # frames received here wait
    wait = ms / 1000.0
    queue, seq = [], 0
    print("relaying", flush=True)
    poll = select.epoll()
    for s in socks.values():
        poll.register(s.fileno(), select.EPOLLIN)
    by_fd = {s.fileno(): s for s in socks.values()}
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, dst, frame = heapq.heappop(queue)
            with contextlib.suppress(OSError):
                dst.send(frame)
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else 1.0
        for fd, _ in poll.poll(timeout):
            src = by_fd[fd]
            while True:
                try:
                    frame, addr = src.recvfrom(1 << 17)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:          # our own sends, seen again
                    continue
                if src is held:
                    seq += 1
                    heapq.heappush(queue, (time.monotonic() + wait, seq, other[src], frame))
                else:
                    with contextlib.suppress(OSError):
                        other[src].send(frame)


def _main(argv):
    import argparse

    ap = argparse.ArgumentParser(prog="python tests/hosts.py", description="the multi-host test bed by hand "
                                 "(docs/testbed.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build K hosts, print how to use them, tear down on Ctrl-C")
    up.add_argument("k", type=int)
    run = sub.add_parser("run", help="build K hosts, run one job over them, tear down")
    run.add_argument("k", type=int)
    run.add_argument("per_host", type=int, help="ranks per host")
    run.add_argument("--delay", type=float, default=0, help="ms of delay towards host 1 on the data network")
    run.add_argument("command", nargs="*", help="-- then the program and its arguments")
    sub.add_parser("cleanup", help="remove what a crashed run left")
    relay = sub.add_parser("relay")                 # internal: the user-space delay line
    relay.add_argument("dev_bridge")
    relay.add_argument("dev_host")
    relay.add_argument("ms", type=float)
    cmd = []
    if "--" in argv:                      # everything after -- is the job's command line
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    if a.cmd == "relay":
        return _relay_main(a.dev_bridge, a.dev_host, a.ms)
    if a.cmd == "cleanup":
        with open(LOCK, "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            cleanup()
        print("left:", leftovers() or "nothing")
        return 0
    reason = unavailable_reason()
    if reason:
        sys.exit(reason)
    with hosts(a.k) as bed:
        if a.cmd == "up":
            mpirun = " ".join(shlex.quote(x) for x in bed.mpirun_argv([], per_host=1))
            print(f"test bed up: {bed.hosts}\nshared directory: {bed.shared}\n"
                  f"export HPCGNN_TESTBED_DIR={bed.state} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
                  f"{mpirun} python -c 'import socket; print(socket.gethostname())'\n"
                  f"a shell on host 0: {AGENT} {bed[0].addr}\n"
                  f"Ctrl-C tears it down", flush=True)
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
            return 0
        cmd = a.command + cmd
        if not cmd:
            ap.error("run: no command")
        if a.delay:
            print(f"delay {a.delay:g} ms towards {bed[1].name} ({bed.delay(1, a.delay)})", flush=True)
        p = bed.popen(cmd, per_host=a.per_host, stdout=None, stderr=None)
        try:
            return p.wait()
        except KeyboardInterrupt:
            bed.stop(p)
            return 130


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
