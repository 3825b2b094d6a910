"""initialize(): node and role splits, on real ranks with virtual nodes."""
import pytest

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm import failure
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import LayoutError

world = MPI.COMM_WORLD


@pytest.mark.mpi(min_size=1)
def test_default_single_node_layout():
    size = world.Get_size()
    if size < 2:
        with pytest.raises(LayoutError, match="at least one trainer"):
            hpcgnn.comm.initialize()
        return
    with hpcgnn.comm.initialize() as ctx:
        assert ctx.num_nodes == 1
        assert ctx.role == ("server" if ctx.rank == 0 else "trainer")
        assert ctx.ranks_of("server") == [0]
        assert ctx.ranks_of("trainer") == list(range(1, size))
        if ctx.is_trainer:
            assert ctx.trainer_comm.Get_size() == size - 1
        else:
            assert ctx.trainer_comm is None
    assert ctx.finalized


@pytest.mark.mpi(min_size=2)
def test_virtual_nodes_one_rank_each():
    size = world.Get_size()
    ctx = hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=1", ranks_per_node=1)
    assert ctx.num_nodes == size and ctx.node_id == world.Get_rank()
    assert ctx.local_rank == 0 and ctx.local_size == 1
    assert ctx.role_comm.Get_size() == size
    # the node communicator really is per node
    assert ctx.node_comm.allreduce(1) == 1
    # machines are hosts: the same values under those names
    assert ctx.num_hosts == size and ctx.host_id == world.Get_rank() and ctx.host_comm is ctx.node_comm
    assert [ctx.host_of(r) for r in range(size)] == list(range(size))
    ctx.finalize()


@pytest.mark.mpi(min_size=4)
def test_two_virtual_nodes_three_roles():
    if world.Get_size() != 4:
        pytest.skip("needs exactly 4 ranks")
    ctx = hpcgnn.comm.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
    assert ctx.num_nodes == 2
    assert ctx.node_id == world.Get_rank() // 2
    assert ctx.role == ("server" if world.Get_rank() % 2 == 0 else "trainer")
    assert ctx.ranks_of("server") == [0, 2] and ctx.ranks_of("trainer", node=1) == [3]
    assert ctx.node_role_comm.Get_size() == 1 and ctx.host_role_comm is ctx.node_role_comm
    assert ctx.ranks_of("trainer", host=1) == [3] and ctx.host_of(3) == ctx.node_of(3) == 1
    # an uncaught error's line names the rank's role and node (tests/e2e/test_failure.py: the job ends)
    line = failure.failure_line(ValueError, ValueError("server exploded"))
    assert line.startswith(f"hpcgnn: rank {world.Get_rank()}/4 ({ctx.role}, node {ctx.node_id}, host ")
    assert line.endswith("): ValueError: server exploded")
    if ctx.is_trainer:
        assert ctx.trainer_comm.allreduce(world.Get_rank()) == 1 + 3
    ctx.finalize()


@pytest.mark.mpi(min_size=4)
def test_separate_mode():
    if world.Get_size() != 4:
        pytest.skip("needs exactly 4 ranks")
    ctx = hpcgnn.comm.initialize(layout="server_nodes=1,servers=1,samplers=1,trainers=2", ranks_per_node=2)
    expect = ["server", "sampler", "trainer", "trainer"][world.Get_rank()]
    assert ctx.role == expect
    ctx.finalize()


@pytest.mark.mpi(min_size=2)
def test_layout_that_does_not_fit_fails_everywhere_with_same_message():
    size = world.Get_size()
    with pytest.raises(LayoutError) as info:
        hpcgnn.comm.initialize(layout=f"servers=1,samplers=1,trainers={size}")
    messages = world.allgather(str(info.value))
    assert len(set(messages)) == 1
    assert "does not fit" in messages[0]


@pytest.mark.mpi(min_size=2)
def test_bad_ranks_per_node_rejected_on_all_ranks():
    with pytest.raises(LayoutError, match="HPCGNN_RANKS_PER_NODE"):
        hpcgnn.comm.initialize(ranks_per_node=0)
    world.Barrier()


@pytest.mark.mpi(min_size=2)
def test_finalize_frees_tracked_windows_in_reverse_order():
    ctx = hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=1", ranks_per_node=1)
    freed = []

    class Res:
        def __init__(self, name):
            self.name = name
            self.win = MPI.Win.Allocate(64, 8, comm=ctx.world)

        def free(self):
            self.win.Free()  # collective
            freed.append(self.name)

    ctx.track(Res("a"))
    ctx.track(Res("b"))
    ctx.finalize()
    assert freed == ["b", "a"]
    ctx.finalize()  # idempotent


@pytest.mark.mpi(min_size=2)
def test_host_index_spans_virtual_nodes_and_pick_device():
    """GPUs are per physical host: the trainers of every virtual node on this host are
    numbered 0..count-1 together (what pick_device hands out GPUs by)."""
    import torch

    from hpcgnn.comm.context import host_index
    from hpcgnn.errors import InputError
    from hpcgnn.train.common import pick_device

    ctx = hpcgnn.comm.initialize(layout="servers=0,samplers=0,trainers=1", ranks_per_node=1)
    tc = ctx.trainer_comm
    index, count, host = host_index(tc)
    assert ctx.num_nodes == world.Get_size()          # one virtual node per rank, one host
    assert count == tc.Get_size() and host == MPI.Get_processor_name()
    assert sorted(tc.allgather(index)) == list(range(count))
    assert index == tc.Get_rank()                      # keyed by rank
    assert pick_device("cpu", ctx).type == "cpu"
    assert pick_device(torch.device("cpu"), ctx).type == "cpu"       # a torch.device as well as its name
    with pytest.raises(InputError, match="give 'cuda'"):             # GPUs are handed out per host
        pick_device(torch.device("cuda", 0), ctx)
    if not torch.cuda.is_available():
        assert pick_device("auto", ctx).type == "cpu"
        with pytest.raises(InputError, match="sees no CUDA device"):
            pick_device("cuda", ctx)
    elif count > torch.cuda.device_count():          # trainers outnumber this host's GPUs
        assert pick_device("auto", ctx).type == "cpu"
        with pytest.raises(InputError, match="share GPU"):
            pick_device("cuda", ctx)
    else:
        assert pick_device("auto", ctx) == torch.device("cuda", index % torch.cuda.device_count())
    ctx.finalize()


@pytest.mark.mpi(min_size=2)
def test_dgl_ip_config_as_layout_is_explained():
    """DGL's first line, renamed only: ``initialize('ip_config.txt')`` (the launch's
    path for an error raised alike on every rank: tests/comm/test_agree_mpi.py)."""
    from hpcgnn.errors import InputError

    with pytest.raises(InputError, match="'ip_config.txt' looks like DGL's ip_config file"):
        hpcgnn.initialize("ip_config.txt")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("value", ["abc", "-5"])
def test_a_bad_finish_timeout_fails_at_initialize_on_every_rank(monkeypatch, value):
    """Found when the job starts, not at its end (each bad value's wording:
    tests/e2e/test_watchdog.py); no rank goes on to split the world."""
    from hpcgnn.errors import InputError

    monkeypatch.setenv("HPCGNN_FINISH_TIMEOUT", value)
    with pytest.raises(InputError, match=f"HPCGNN_FINISH_TIMEOUT='{value}': expected a positive number of seconds"):
        hpcgnn.initialize(layout="servers=1,samplers=0,trainers=rest")
    assert MPI.COMM_WORLD.allreduce(1) == MPI.COMM_WORLD.Get_size()     # every rank came back


@pytest.mark.mpi(min_size=2)
def test_initialize_twice_is_refused_on_the_trainers():
    """A second ``hpcgnn.initialize`` while the servers serve would hang in its split:
    refused on the trainers, the first context still works."""
    from hpcgnn.errors import InputError

    ctx = hpcgnn.initialize(layout="servers=1,samplers=0,trainers=rest", serve=False)
    if ctx.is_trainer:
        with pytest.raises(InputError, match="hpcgnn.initialize: already initialized in this process"):
            hpcgnn.initialize(layout="servers=1,samplers=0,trainers=rest")
        assert ctx.trainer_comm.allreduce(1) == ctx.trainer_comm.Get_size()
    else:
        ctx.service.serve()
    ctx.finalize()
