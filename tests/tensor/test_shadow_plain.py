"""A whole run on numpy views (asyncnet.tensor.shadow) calls each routed op's numpy kernel
directly: on the run's arrays the routed kernel would only pass its inputs on. An op whose kernel
was replaced after the net was made runs the replacement."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.tensor import route

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)


def _net(net_type: str) -> an.Net:
    net = an.Net("n", type=net_type)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.SGD(["w", "g", "lr"], "w")
    return net


def _feed(ws: an.Workspace, lib: str) -> None:
    rng = np.random.default_rng(3)
    arrays = {
        "x": rng.standard_normal((4, 3)).astype(np.float32),
        "w": rng.standard_normal((5, 3)).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
        "g": rng.standard_normal((5, 3)).astype(np.float32),
        "lr": np.array([-0.1], np.float32),
    }
    for k, v in arrays.items():
        ws.feed(k, torch.from_numpy(v) if lib == "torch" and k != "lr" else v)


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
def test_the_whole_run_calls_the_numpy_kernels_the_routing_wraps(net_type):
    with an.Workspace() as ws:
        _feed(ws, "torch")
        inst = ws.create_net(_net(net_type))
        plain = inst._shadow._plain
        assert [route.is_routed(op.fn) for op, _, _ in plain] == [True] * 3
        assert all(p.fn is op.fn.__wrapped__ and p is not op for op, _, p in plain)
        assert [(p.index, p.type, p.inputs, p.outputs) for _, _, p in plain] == [
            (op.index, op.type, op.inputs, op.outputs) for op in inst.operators
        ]


def test_a_kernel_replaced_after_the_net_was_made_runs_in_the_whole_run():
    net_type = "simple"  # async_scheduling's first runs are parallel: its in-line runs are tested in test_shadow
    results = {}
    for lib in ("numpy", "torch"):
        with an.Workspace() as ws:
            _feed(ws, lib)
            inst = ws.create_net(_net(net_type))
            relu = inst.operators[1]
            calls = []

            def doubled(ctx, x, _fn=relu.fn):
                calls.append(type(x))
                return _fn(ctx, x) * 2

            relu.fn = doubled
            inst.run()
            inst.run()
            assert len(calls) == 2
            if lib == "torch":
                assert inst._shadow is not None and calls == [np.ndarray, np.ndarray]  # on the run's arrays
                assert isinstance(ws.fetch("r"), torch.Tensor)
            results[lib] = {n: np.asarray(ws.fetch(n)).copy() for n in ("h", "r", "w")}
    for n in ("h", "r", "w"):
        np.testing.assert_array_equal(results["torch"][n], results["numpy"][n], err_msg=n)


def test_fed_tensors_keep_their_arrays_for_the_last_few_feeds_only():
    route._FED.clear()
    arrays = [np.full(3, i, np.float32) for i in range(route.FED_KEPT + 5)]
    tensors = [route.fed_tensor(a) for a in arrays]
    assert len(route._FED) == route.FED_KEPT
    assert [route.numpy_view(t) is a for t, a in zip(tensors, arrays)] == [False] * 5 + [True] * route.FED_KEPT
    assert all(np.shares_memory(route.numpy_view(t), a) for t, a in zip(tensors, arrays))
    big = np.zeros(route.FED_MAX_BYTES // 4 + 1, np.float32)
    route.fed_tensor(big)
    assert len(route._FED) == route.FED_KEPT and all(e[1] is not big for e in route._FED.values())


def test_threads_feeding_at_once_leave_the_last_few_feeds_kept():
    import threading

    route._FED.clear()
    start = threading.Barrier(4)
    errors = []

    def feed():
        start.wait()
        try:
            for i in range(2000):
                route.fed_tensor(np.full(2, i, np.float32))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and 0 < len(route._FED) <= route.FED_KEPT + 3  # two threads may drop one each
    a = np.ones(2, np.float32)
    t = route.fed_tensor(a)  # one feed alone brings it back within the bound, and keeps its array
    assert len(route._FED) <= route.FED_KEPT and route.numpy_view(t) is a
