import threading

import numpy as np
import pytest

import asyncnet as an
from asyncnet import BlobNotFoundError, NetDefinitionError, OperatorError


def test_feed_fetch_has_remove_reset():
    ws = an.Workspace()
    ws.feed("x", [1, 2, 3])
    assert isinstance(ws.fetch("x"), np.ndarray) and ws.has("x") and "x" in ws
    arr = np.ones(3)
    ws.feed("a", arr)
    assert ws.fetch("a") is arr and ws.fetch("a", copy=True) is not arr
    obj = object()
    ws.feed("o", obj)
    assert ws.fetch("o") is obj
    assert ws.blobs() == ["a", "o", "x"]
    ws.remove("x")
    assert not ws.has("x")
    with pytest.raises(BlobNotFoundError):
        ws.remove("x")
    ws.reset()
    assert ws.blobs() == []


def test_fetch_missing_suggests_near_names_and_is_key_error():
    ws = an.Workspace()
    ws.feed("weights", np.zeros(1))
    with pytest.raises(KeyError) as info:
        ws.fetch("weight")
    assert isinstance(info.value, BlobNotFoundError) and "'weights'" in str(info.value)


def test_bad_blob_name():
    with pytest.raises(TypeError):
        an.Workspace().feed("", 1)


def test_create_run_net_and_overwrite():
    ws = an.Workspace()
    ws.feed("x", np.array([1.0, -2.0]))
    net = an.Net("n")
    net.Relu("x", "y")
    ws.create_net(net)
    with pytest.raises(NetDefinitionError, match="already exists"):
        ws.create_net(net)
    ws.create_net(net, overwrite=True)
    ws.run_net("n", num_iter=3)
    np.testing.assert_array_equal(ws.fetch("y"), [1.0, 0.0])
    assert ws.nets() == ["n"]
    with pytest.raises(an.ExecutionError, match="Did you mean 'n'"):
        ws.run_net("nn")
    with pytest.raises(ValueError):
        ws.run_net("n", num_iter=-1)


def test_run_operator_once():
    ws = an.Workspace()
    ws.run_operator_once(an.OperatorDef("ConstantFill", [], ["c"], {"shape": [2], "value": 3.0}))
    np.testing.assert_array_equal(ws.fetch("c"), [3.0, 3.0])


def test_failing_op_keeps_earlier_blobs_and_chains_cause():
    ws = an.Workspace()
    ws.feed("x", np.ones((2, 3), np.float32))
    ws.feed("w", np.ones((4, 5), np.float32))
    ws.feed("b", np.ones(4, np.float32))
    net = an.Net("n")
    net.Relu("x", "r")
    net.FC(["r", "w", "b"], "y", name="fc")
    net.Relu("y", "z")
    with pytest.raises(OperatorError) as info:
        ws.run_net_once(net)
    e = info.value
    assert (e.op_index, e.op_type, e.op_name, e.inputs) == (1, "FC", "fc", ["r", "w", "b"])
    assert isinstance(e.__cause__, ValueError) and "[N, 3]" in str(e)
    assert ws.has("r") and not ws.has("y")


def test_missing_input_blob_is_operator_error():
    ws = an.Workspace()
    net = an.Net("n")
    net.Relu("nope", "y")
    with pytest.raises(OperatorError, match="'nope' does not exist") as info:
        ws.run_net_once(net)
    assert isinstance(info.value.__cause__, BlobNotFoundError)


def test_concurrent_feeds_and_runs_are_safe():
    ws = an.Workspace()
    errors = []

    def worker(k):
        try:
            for i in range(200):
                ws.feed(f"x{k}", np.full(4, float(i)))
                net = an.Net(f"n{k}")
                net.Scale(f"x{k}", f"y{k}", scale=2.0)
                ws.run_net_once(net)
                assert ws.fetch(f"y{k}")[0] == 2.0 * i
        except Exception as e:  # noqa: BLE001 - reported below  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


def test_net_busy_refused():
    import asyncnet.core.netbase as nb

    ws = an.Workspace()
    ws.feed("x", np.ones(1))
    net = an.Net("n")
    net.Relu("x", "y")
    inst = ws.create_net(net)
    inst._claim()
    try:
        with pytest.raises(an.NetBusyError):
            ws.run_net("n")
    finally:
        inst._release()
    ws.run_net("n")
    assert isinstance(inst, nb.NetBase)


def test_builder_outputs_and_refs():
    net = an.Net("b")
    a, b = net.add_op("Relu", "x", 1), net.Relu("x", 1)
    assert a != b and a.startswith("b/")
    assert net.Relu("x", "y") == "y"
    with pytest.raises(NetDefinitionError, match="Did you mean"):
        net.Rellu("x", "y")
    with pytest.raises(NetDefinitionError):
        net.Relu(["x", "z"], "y")
    assert len(net.ops) == 3
    net.Scale("x", "s", scale=np.float32(2))
    assert net.to_def().ops[-1].args == {"scale": 2.0}


def test_run_net_timeout_bounds_all_iterations():
    import time as _time

    from asyncnet.core.registry import register_op

    @register_op("_TestSleep", inputs=1, outputs=1, allow_inplace={0: 0})
    def _sleep(ctx, x):
        _time.sleep(0.02)
        return x

    ws = an.Workspace()
    ws.feed("x", np.ones(1))
    net = an.Net("slow")
    net.add_op("_TestSleep", "x", "x")
    ws.create_net(net)
    t = _time.monotonic()
    with pytest.raises(TimeoutError, match="iterations done"):
        ws.run_net("slow", num_iter=1000, timeout=0.2)
    assert _time.monotonic() - t < 20
    ws.run_net("slow", num_iter=2, timeout=10)
