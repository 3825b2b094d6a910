"""Role layouts: pure logic, one process."""
import pytest

from hpcgnn.comm.layout import Layout, plan_roles
from hpcgnn.errors import LayoutError


def test_parse_roundtrip():
    lay = Layout.parse("servers=1,samplers=1,trainers=2")
    assert (lay.servers, lay.samplers, lay.trainers, lay.server_nodes) == (1, 1, 2, 0)
    assert Layout.parse(str(lay)) == lay
    assert Layout.parse("servers=2,trainers=rest").trainers is None
    assert Layout.parse(None) == Layout.parse("servers=1,samplers=0,trainers=rest")


@pytest.mark.parametrize("text,needle", [
    ("servers=1,trainer=2", "did you mean 'trainers'"),
    ("servers=-1", "negative"),
    ("servers=x", "not a non-negative integer"),
    ("servers", "not key=value"),
])
def test_parse_rejects(text, needle):
    with pytest.raises(LayoutError, match=needle):
        Layout.parse(text)


def test_plan_per_node():
    plan = plan_roles(Layout.parse("servers=1,samplers=1,trainers=2"), [4, 4])
    assert plan == [["server", "sampler", "trainer", "trainer"]] * 2
    plan = plan_roles(Layout.parse("servers=1,trainers=rest"), [3, 2])
    assert plan == [["server", "trainer", "trainer"], ["server", "trainer"]]


def test_plan_separate_mode():
    plan = plan_roles(Layout.parse("server_nodes=1,servers=1,samplers=1,trainers=2"), [2, 2, 2])
    assert plan == [["server", "sampler"], ["trainer", "trainer"], ["trainer", "trainer"]]


@pytest.mark.parametrize("text,sizes,needle", [
    ("servers=1,samplers=1,trainers=2", [4, 3],
     r"node 1 has 3 rank\(s\), which does not fit 1 server\(s\) \+ 1 sampler\(s\) \+ 2 trainer\(s\) = 4 ranks"),
    ("servers=2,trainers=rest", [2], "at least one trainer"),
    ("servers=1,samplers=0,trainers=1", [4], "to run them as 2 nodes of 2 ranks, set HPCGNN_RANKS_PER_NODE=2"),
    ("server_nodes=2,servers=1,trainers=1", [1, 1], "leaves no node for trainers"),
    ("server_nodes=1,servers=1,samplers=1,trainers=1", [1, 1], "server node 0 has 1 rank"),
    ("server_nodes=1,servers=1,samplers=1,trainers=1", [2, 2], "node 1 has 2 rank.*does not fit trainers=1"),
])
def test_plan_rejects(text, sizes, needle):
    with pytest.raises(LayoutError, match=needle):
        plan_roles(Layout.parse(text), sizes)


def test_current_context_required_names_the_caller(monkeypatch):
    from hpcgnn.comm import context
    from hpcgnn.errors import InputError

    monkeypatch.setattr(context, "_open_contexts", [])
    assert context.current_context() is None
    with pytest.raises(InputError, match=r"^DistTensor: runs after hpcgnn.initialize\(...\)"):
        context.current_context(required="DistTensor")
    with pytest.raises(InputError, match=r"^Trainer: runs on trainer ranks, after hpcgnn.initialize"):
        context.current_context(required="Trainer", trainer=True)
