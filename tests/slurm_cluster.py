"""A real single-node SLURM (munged + slurmctld + slurmd) for tests, all its state in
one temporary directory.

    with SlurmCluster() as cluster:                 # starts, waits for the node to be idle
        res = cluster.run(["sbatch", "--wait", "job.sbatch"])
        env = cluster.env()                         # SLURM_CONF=... for your own commands
    # every daemon it started is stopped here, by PID, even after an exception

``skip_reason()`` says why no cluster can be started here (binaries missing, not root)
or returns None.  Needs root: slurmd runs jobs as the submitting user, munged runs as
the ``munge`` user.
"""
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "sinfo", "squeue", "scontrol", "srun", "scancel")


def _which(name):
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)


def skip_reason():
    """Why a cluster cannot be started on this machine, or None."""
    missing = [b for b in DAEMONS + CLIENTS if _which(b) is None]
    if missing:
        return "SLURM/munge not installed (missing: %s); apt-get install slurm-wlm munge" % " ".join(missing)
    if os.geteuid() != 0:
        return "starting slurmd/munged needs root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    return None


def _free_ports(n):
    """n TCP ports free right now (bound to port 0, then released)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class SlurmCluster:
    """A single-node SLURM cluster named ``localhost`` with one partition ``debug``.

    ``cpus`` defaults to the real core count; more than that is declared with
    ``SlurmdParameters=config_overrides`` (SLURM then hands out more task slots than
    cores, e.g. 4 ranks on 2 cores).  The daemons run as root (SlurmUser=root);
    munged runs as ``munge`` on a private socket, so a system munged is never touched.
    """

    def __init__(self, root=None, cpus=None, start_timeout=30.0):
        self._own_root = root is None
        self.root = tempfile.mkdtemp(prefix="hpcgnn-slurm-") if root is None else str(root)
        self.cpus = cpus or os.cpu_count() or 1
        self.start_timeout = start_timeout
        self.conf = os.path.join(self.root, "slurm.conf")
        self.munge_dir = os.path.join(self.root, "munge")
        self.munge_socket = os.path.join(self.munge_dir, "munge.socket")
        self.pids = {}          # daemon name -> pid (read from its pid file)
        self._procs = []        # Popen objects of what we started (reaped in stop())

    # -- setup ----------------------------------------------------------------
    def _write_files(self):
        os.makedirs(self.root, exist_ok=True)
        # munged (user munge) must reach its directory through this one
        os.chmod(self.root, 0o755)
        for sub in ("state", "spool", "log", "run"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        mu = pwd.getpwnam("munge")
        os.makedirs(self.munge_dir, exist_ok=True)
        os.chmod(self.munge_dir, 0o700)
        os.chown(self.munge_dir, mu.pw_uid, mu.pw_gid)
        key = os.path.join(self.munge_dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chown(key, mu.pw_uid, mu.pw_gid)
        os.chmod(key, 0o400)

        ctld_port, d_port = _free_ports(2)
        # a node declaring more CPUs than it has would be drained, unless told otherwise
        overrides = "SlurmdParameters=config_overrides\n" if self.cpus > (os.cpu_count() or 1) else ""
        r = self.root
        conf = f"""\
ClusterName=hpcgnntest
MailProg=/bin/true
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket},cred_expire=5
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=5
InactiveLimit=0
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
{overrides}NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as f:
            f.write(conf)

    def env(self, extra=None):
        """The environment for client commands (sbatch, sinfo, ...)."""
        env = dict(os.environ)
        for k in list(env):     # nothing of an enclosing job or launch
            if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "OMPI_", "PMIX_", "PMI_")):
                del env[k]
        env["SLURM_CONF"] = self.conf
        if extra:
            env.update(extra)
        return env

    def run(self, argv, timeout=120, env=None, **kw):
        """Run a client command against this cluster (never raises on rc)."""
        return subprocess.run(argv, env=self.env(env), capture_output=True, text=True,
                              timeout=timeout, **kw)

    def _spawn(self, name, argv, **kw):
        """Start a daemon in the foreground as our child, so its PID is the Popen's."""
        log = open(os.path.join(self.root, "log", f"{name}.out"), "wb")
        try:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=self.env(), start_new_session=True, **kw)
        finally:
            log.close()
        self.pids[name] = p.pid
        self._procs.append((name, p))
        return p

    def _wait_for(self, name, proc, ready, deadline):
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.logs(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come up:\n{self.logs(name)}")
            time.sleep(0.02)

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        self._write_files()
        deadline = time.monotonic() + self.start_timeout
        md = self.munge_dir
        mu = pwd.getpwnam("munge")
        p = self._spawn("munged", [
            _which("munged"), "--foreground", "--force",
            f"--socket={self.munge_socket}", f"--pid-file={md}/munged.pid",
            f"--log-file={md}/munged.log", f"--seed-file={md}/munged.seed",
            f"--key-file={md}/munge.key"], user=mu.pw_uid, group=mu.pw_gid, extra_groups=[])
        self._wait_for("munged", p, lambda: os.path.exists(self.munge_socket), deadline)
        pidfile = f"{self.root}/run/slurmctld.pid"
        p = self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", self.conf])
        self._wait_for("slurmctld", p, lambda: os.path.exists(pidfile), deadline)
        pidfile = f"{self.root}/run/slurmd.pid"
        p = self._spawn("slurmd", [_which("slurmd"), "-D", "-f", self.conf, "-N", "localhost"])
        self._wait_for("slurmd", p, lambda: os.path.exists(pidfile), deadline)
        while True:
            res = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
            if res.returncode == 0 and res.stdout.split()[1:2] == ["idle"]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"node never became idle: {res.stdout!r} {res.stderr!r}\n"
                                   + self.logs())
            time.sleep(0.1)

    # -- teardown -------------------------------------------------------------
    def _our_pids(self):
        """PIDs of every process that carries this cluster's SLURM_CONF in its environment:
        the daemons, slurmstepd (started by our slurmd, inheriting its environment) and
        the jobs' processes.  Nothing else on the machine has this path."""
        me = os.getpid()
        tag = b"\0SLURM_CONF=" + self.conf.encode() + b"\0"
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == me:
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if tag in b"\0" + f.read() + b"\0":
                        found.append(int(d))
            except OSError:
                pass
        return found

    def stop(self, timeout=10.0):
        """Cancel the jobs, then stop every daemon this object started, by PID (SIGTERM,
        then SIGKILL), and any process left over from its jobs."""
        t0 = time.monotonic()
        ctld = dict(self._procs).get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            try:
                end = time.monotonic() + 10
                while time.monotonic() < end:
                    q = self.run(["squeue", "-h", "-o", "%A"], timeout=10)
                    if q.returncode != 0 or not q.stdout.split():
                        break
                    self.run(["scancel"] + q.stdout.split(), timeout=10)
                    time.sleep(0.2)
            except (OSError, subprocess.SubprocessError):
                pass
        # slurmd first (it may still talk to slurmctld), munged last
        order = {"slurmd": 0, "slurmctld": 1, "munged": 2}
        for name, p in sorted(self._procs, key=lambda np: order.get(np[0], 3)):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self._procs = []
        self.pids = {}
        # slurmstepd and job processes that outlived a cancelled job
        for pid in self._our_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def logs(self, *names):
        """The daemons' log files, for failure messages."""
        files = {"munged": [f"{self.munge_dir}/munged.log", f"{self.root}/log/munged.out"],
                 "slurmctld": [f"{self.root}/log/slurmctld.log", f"{self.root}/log/slurmctld.out"],
                 "slurmd": [f"{self.root}/log/slurmd.log", f"{self.root}/log/slurmd.out"]}
        out = []
        for name in names or files:
            for path in files[name]:
                try:
                    with open(path, errors="replace") as f:
                        text = f.read()[-3000:]
                except OSError:
                    continue
                if text.strip():
                    out.append(f"--- {path}\n{text}")
        return "\n".join(out)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
