"""Start DGL's distributed training (bench/dgl_peer/train.py) on this one host the way
TARGETS.md describes its rows: 2 partitions, 2 servers + 2 trainers, each
(server, trainer) pair an emulated machine.

DGL keys its shared memory by graph name, so two machines on one host would share
(and overwrite) each other's segments.  Each emulated machine therefore runs in its
own mount and IPC namespace (``unshare``, root) with a private ``/dev/shm``; all share
the host's network (loopback), each machine's server on its own port.  No ssh, no
launcher: the processes get the environment DGL's launcher would give them.

    .dglvenv/bin/python bench/dgl_peer/run.py --part-config PEER.json --classes 16 [train.py options]
    .dglvenv/bin/python bench/dgl_peer/run.py --part-config PEER.json --example DGL_SCRIPT.py [its flags]

Prints one JSON object: trainer 0's epochs (the first is warm-up) and final test
accuracy, with means over the later epochs.
"""
import argparse
import atexit
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--machines", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--script", default="train.py", help="the trainer script in bench/dgl_peer (default train.py)")
    ap.add_argument("--example", help="instead, DGL's own example script at this path (DGL's flag names; "
                                      "prints each trainer's summary lines)")
    a, rest = ap.parse_known_args()
    with open(a.part_config) as f:
        name = json.load(f)["graph_name"]
    work = tempfile.mkdtemp(prefix="hpcgnn-dglpeer-")
    atexit.register(shutil.rmtree, work, True)          # its logs are printed on failure
    ipcfg = os.path.join(work, "ip_config.txt")
    with open(ipcfg, "w") as f:
        for _ in range(a.machines):
            f.write(f"127.0.0.1 {free_port()}\n")
    common = {"DGL_DIST_MODE": "distributed", "DGL_NUM_SERVER": "1", "DGL_NUM_SAMPLER": "0",
              "DGL_IP_CONFIG": ipcfg, "DGL_CONF_PATH": os.path.abspath(a.part_config),
              "DGL_NUM_CLIENT": str(a.machines), "DGL_GRAPH_FORMAT": "csc", "OMP_NUM_THREADS": "1",
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(a.machines)}
    flag = "_" if a.example else "-"         # DGL's examples spell their flags --ip_config
    script = [sys.executable, *([os.path.join(HERE, "example.py"), os.path.abspath(a.example)] if a.example
                                else [os.path.join(HERE, a.script)]),
              f"--ip{flag}config", ipcfg, f"--part{flag}config", os.path.abspath(a.part_config),
              f"--graph{flag}name", name, *rest]
    def env_of(role: dict) -> str:
        return " ".join(f"{key}={shlex.quote(val)}" for key, val in {**common, **role}.items())

    cmd = " ".join(shlex.quote(x) for x in script)
    procs = []
    for k in range(a.machines):
        server = {"DGL_ROLE": "server", "DGL_SERVER_ID": str(k)}
        trainer = {"DGL_ROLE": "client", "HPCGNN_PEER_MACHINE": str(k), "RANK": str(k), "DGL_GROUP_ID": "0"}
        shell = (f"mount -t tmpfs tmpfs /dev/shm && "
                 f"(env {env_of(server)} {cmd} > {shlex.quote(os.path.join(work, f'server{k}.log'))} 2>&1 &) && "
                 f"exec env {env_of(trainer)} {cmd}")
        out = open(os.path.join(work, f"trainer{k}.log"), "w")
        procs.append(subprocess.Popen(["unshare", "--mount", "--ipc", "--propagation", "private", "--",
                                       "sh", "-c", shell], stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    failed = False
    for p in procs:
        try:
            failed |= p.wait(timeout=a.timeout) != 0
        except subprocess.TimeoutExpired:
            failed = True
    if failed:                           # a server left waiting for its clients goes too
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for fn in sorted(os.listdir(work)):
            if fn.endswith(".log"):
                with open(os.path.join(work, fn)) as f:
                    sys.stderr.write(f"--- {fn}\n" + f.read()[-3000:])
        raise SystemExit("dgl peer run failed")
    if a.example:
        return print_example(work, a.machines)
    with open(os.path.join(work, "trainer0.log")) as f:
        rows = [json.loads(ln) for ln in f if ln.startswith("{")]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    later = epochs[1:] or epochs
    keys = ("epoch_s", "sample_s", "fetch_s", "compute_s", "sampled_edges_per_s")
    mean = {k: round(sum(r[k] for r in later) / len(later), 4) for k in keys}
    final = [r for r in rows if r["kind"] == "final"][-1]
    print(json.dumps({"peer": "dgl", "steps_per_epoch": epochs[0]["steps"], **mean,
                      "best_epoch_s": min(r["epoch_s"] for r in later), "test_acc": final["test_acc"],
                      "inference_s": final["inference_s"], "epochs": epochs}), flush=True)


def print_example(work: str, machines: int) -> None:
    """One JSON object: each trainer's lines that mention an accuracy or an epoch's time."""
    keep = ("Summary", "Acc", "Epoch Time")
    trainers = []
    for k in range(machines):
        with open(os.path.join(work, f"trainer{k}.log")) as f:
            trainers.append([ln.rstrip() for ln in f if any(w in ln for w in keep)])
    print(json.dumps({"peer": "dgl", "machines": machines, "trainers": trainers}), flush=True)


if __name__ == "__main__":
    main()
