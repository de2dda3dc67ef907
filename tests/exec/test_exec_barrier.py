"""AsyncNetBarrier: schema, pass-through, device placement, and the ordering it imposes."""

import random

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec.graph import graph_of_net
from asyncnet.exec.trace import profile
from asyncnet.ops.barrier import barrier_devices

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]


def test_schema():
    s = an.get_schema("AsyncNetBarrier")
    assert (s.min_inputs, s.max_inputs, s.min_outputs, s.max_outputs) == (1, None, 1, None)
    assert s.devices == ("cpu", "cuda") and not s.differentiable
    assert s.args["cross_device"].default == 0


def test_in_place_passes_the_same_object_and_copies_otherwise():
    with an.Workspace() as ws:
        a, b, m = np.arange(3.0), np.ones(2), object()
        ws.feed("a", a), ws.feed("b", b), ws.feed("m", m)
        net = an.Net("n", type="async_scheduling")
        net.AsyncNetBarrier(["a", "b", "m"], ["a", "b2", "m2"])
        ws.run_net_once(net)
        assert ws.fetch("a") is a
        assert ws.fetch("b2") is not b and np.array_equal(ws.fetch("b2"), b)
        assert ws.fetch("m2") is m  # opaque objects pass by reference


def test_torch_tensor_is_cloned():
    torch = pytest.importorskip("torch")
    with an.Workspace() as ws:
        t = torch.arange(3.0)
        ws.feed("t", t)
        ws.run_operator_once(an.OperatorDef("AsyncNetBarrier", ["t"], ["u"]))
        u = ws.fetch("u")
        assert u is not t and torch.equal(u, t)


def test_bad_arguments_rejected():
    with pytest.raises(an.NetDefinitionError, match="cross_device"):
        an.Net("n").AsyncNetBarrier(["a"], ["a"], cross_device=2)
    with pytest.raises(an.NetDefinitionError):
        an.Net("n").AsyncNetBarrier(["a", "b"], ["b", "a"])  # only one-to-one in place
    with pytest.raises(an.NetDefinitionError, match=r"ops\[0\].*as many outputs as inputs"):
        an.Net("n").AsyncNetBarrier(["a", "b"], ["c"])


def test_device_placement_like_caffe2():
    op = an.OperatorDef(
        "AsyncNetBarrier",
        ["a", "b", "c"],
        ["a", "b", "c"],
        {"cross_device": 1},
        device_option=an.DeviceOption("cuda", 3),
    )
    ins, outs = barrier_devices(op)
    assert [(d.device_type, d.device_id) for d in ins] == [("cuda", 0), ("cuda", 1), ("cuda", 2)]
    assert ins == outs
    op.args["cross_device"] = 0
    assert barrier_devices(op)[0] == [an.DeviceOption("cuda", 3)] * 3
    op2 = an.OperatorDef("AsyncNetBarrier", ["a"], ["a"])
    assert barrier_devices(op2, an.DeviceOption("cpu", 0, 1))[0] == [an.DeviceOption("cpu", 0, 1)]


def _barrier_net(n, with_barrier, seed):
    rng = random.Random(seed)
    net = an.Net("bar", type="async_scheduling", num_workers=3)
    names = [f"a{i}" for i in range(n)]
    net.ExecTestWork([], ["a0"], name="P0", sleep=rng.uniform(0, 0.004))
    net.ExecTestWork(["a0"], ["r0"], name="R0", sleep=rng.uniform(0, 0.01))  # an earlier reader
    for i in range(1, n):
        net.ExecTestWork([], [names[i]], name=f"P{i}", sleep=rng.uniform(0, 0.01))
    if with_barrier:
        net.AsyncNetBarrier(names, names, name="barrier")
    for i in range(n):
        net.ExecTestWork([names[i]], [f"c{i}"], name=f"C{i}", sleep=0.001)
    return net


def test_graph_with_barrier_joins_all_producers():
    g = graph_of_net(_barrier_net(4, True, 0).to_def())
    barrier = 5  # P0, R0, P1, P2, P3, barrier, C0..C3
    assert g.parents[barrier] == [1, 2, 3, 4]  # P0 is implied through R0
    assert [g.parents[barrier + 1 + i] for i in range(4)] == [[barrier]] * 4
    g2 = graph_of_net(_barrier_net(4, False, 0).to_def())
    assert g2.parents[5] == [0]  # without it C0 waits only for P0


@pytest.mark.parametrize("seed", range(12))
def test_barrier_orders_producers_before_consumers(seed):
    with an.Workspace() as ws:
        inst = ws.create_net(_barrier_net(4, True, seed))
        for _ in range(3):
            tops.LOG.clear()
            with profile(inst) as tl:
                ws.run_net("bar", timeout=10)
            times = {name: (start, end) for name, start, end, _ in tops.LOG}
            earlier = [times[k][1] for k in times if k[0] in "PR"]
            later = [times[k][0] for k in times if k[0] == "C"]
            assert len(earlier) == 5 and len(later) == 4
            assert max(earlier) <= min(later)
            (bar,) = [e for e in tl.events if e.op_type == "AsyncNetBarrier"]
            assert max(earlier) <= bar.start and bar.end <= min(later)
