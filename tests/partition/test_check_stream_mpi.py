"""The streaming partition check under ``mpirun -n K python -m pytest --with-mpi -m mpi``
(and in one process): every rank reads a share of both files, a clean partition
passes whatever the ranks and chunk sizes, and a damaged one fails on every rank with
the same line naming the dataset and the partition."""
import argparse
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from hpcgnn.cli.verify import run
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.partition import partition_graph
from hpcgnn.partition.check import check_partition_stream
from harness import make_raw, planted_graph

world = MPI.COMM_WORLD


def _graph(shared_dir, types=False, **kw):
    src, dst, _ = planted_graph(2400, 6, 4, seed=7)
    raw, _ = make_raw(world, shared_dir, 2400, src, dst, types=types, feat_dim=5)
    cfg = partition_graph(raw, os.path.join(shared_dir, "p"), 4, comm=world, return_mapping=True, seed=1, **kw)
    return raw, cfg


def _damage(cfg, shared_dir, fn):
    """Rank 0: a copy of the partitioned graph with ``fn(h5py.File)`` applied."""
    d = os.path.join(shared_dir, "bad")
    if world.Get_rank() == 0:
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.dirname(cfg), d)
        with h5py.File(os.path.join(d, "g.h5"), "r+") as f:
            fn(f)
    world.Barrier()
    return os.path.join(d, os.path.basename(cfg))


def _fails_alike(raw, cfg, *needles):
    with pytest.raises(InputError) as e:
        check_partition_stream(raw, cfg, world, chunk_rows=500)
    msgs = world.allgather(str(e.value))
    assert len(set(msgs)) == 1, msgs                    # the same line on every rank
    for n in needles:
        assert n in msgs[0], msgs[0]


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("types,kw", [(False, {}), (True, {"feat_dtype": "bf16", "edge_dir": "out"})])
def test_a_clean_partition_passes_at_any_ranks_and_chunks(shared_dir, types, kw):
    raw, cfg = _graph(shared_dir, types, **kw)
    for chunk in (1 << 20, 97):             # one chunk; many, some splitting a node's edges
        got = check_partition_stream(raw, cfg, world, chunk_rows=chunk)
        assert got["ok"] and got["ranks"] == world.Get_size() and got["num_edges"] == 2400 * 3
    assert got["half_precision"] == ({"node/feat": "bfloat16"} if types else {})


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
def test_damage_fails_on_every_rank_naming_it(shared_dir):
    raw, cfg = _graph(shared_dir)

    def edge(f):
        d = f["part3/csr/indices"]
        j = int(np.flatnonzero(d[:-1] != d[1:])[-1])
        d[j] = d[j + 1]
    _fails_alike(raw, _damage(cfg, shared_dir, edge), "/part3/csr/indices (partition 3)", "an edge is missing")

    def feat(f):
        f["part1/node/feat"][-1] = 0.5
    _fails_alike(raw, _damage(cfg, shared_dir, feat), "/part1/node/feat (partition 1) differs")

    def orig(f):
        f["part3/orig_nid"][-1] = f["part0/orig_nid"][0]
    _fails_alike(raw, _damage(cfg, shared_dir, orig), "/part3/orig_nid (partition 3)",
                 "stored by partitions 0 and 3")


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(120)
def test_bf16_and_the_command_at_every_rank(shared_dir, capsys):
    raw, cfg = _graph(shared_dir, feat_dtype="bf16")
    capsys.readouterr()
    assert run(argparse.Namespace(config=cfg, raw=raw, json=True, chunk_rows=400)) == 0
    out = capsys.readouterr().out.splitlines()
    if world.Get_rank() == 0:
        s = json.loads(out[-1])
        assert s["ok"] and s["raw_check"]["half_precision"] == {"node/feat": "bfloat16"}
        assert len(s["peak_rss_bytes_per_rank"]) == world.Get_size()

    def bits(f):
        d = f["part2/node/feat"]
        d[0] = d[0] ^ np.uint16(1)                    # the last bit of each value of one row
    bad = _damage(cfg, shared_dir, bits)
    assert run(argparse.Namespace(config=bad, raw=raw, json=False)) == 1     # the same status on every rank
    err = capsys.readouterr().err
    assert f"hpcgnn verify: error (rank {world.Get_rank()}/{world.Get_size()}):" in err
    assert "/part2/node/feat (partition 2) differs" in err and "rounded to bfloat16" in err
