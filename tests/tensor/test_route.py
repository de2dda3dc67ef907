"""Ops on torch CPU tensors run the numpy kernel where it is faster (asyncnet.tensor.route):
same values as numpy, torch tensors out, in-place updates on the same storage."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.tensor import route

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(60)


def _net(net_type: str) -> an.Net:
    net = an.Net("n", type=net_type)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "h")
    net.FC(["h", "w2", "b2"], "y")
    net.Flatten("y", "f")
    net.SGD(["w", "g", "lr"], "w")  # in place: w keeps its storage
    return net


def _feeds(lib: str) -> dict:
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.standard_normal((4, 3)),
        "w": rng.standard_normal((5, 3)),
        "b": rng.standard_normal(5),
        "w2": rng.standard_normal((2, 5)),
        "b2": rng.standard_normal(2),
        "g": rng.standard_normal((5, 3)),
        "lr": np.array([-0.1]),
    }
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    return arrays if lib == "numpy" else {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}


@pytest.mark.parametrize("net_type", ["simple", "straight", "async_scheduling"])
def test_routed_ops_give_numpy_values_as_torch_tensors_and_update_in_place(net_type):
    with an.Workspace() as wn, an.Workspace() as wt:
        for k, v in _feeds("numpy").items():
            wn.feed(k, v)
        feeds = _feeds("torch")
        w_before = feeds["w"]
        for k, v in feeds.items():
            wt.feed(k, v)
        nn_, nt = wn.create_net(_net(net_type)), wt.create_net(_net(net_type))
        assert route.is_routed(nt.operators[0].fn)
        for _ in range(3):
            nn_.run()
            nt.run()
        for name in ("h", "y", "f", "w"):
            got = wt.fetch(name)
            assert isinstance(got, torch.Tensor), name
            np.testing.assert_array_equal(got.numpy(), wn.fetch(name))
        assert wt.fetch("w") is w_before  # SGD wrote into the fed tensor


def test_autograd_and_mixed_inputs_take_the_ops_own_kernel():
    calls = []

    def kernel(ctx, *xs):
        calls.append(tuple(type(x).__name__ for x in xs))
        return xs[0]

    k = route.routed(kernel)
    route._TENSOR, route._from_numpy = torch.Tensor, torch.from_numpy
    t = torch.ones(2, requires_grad=True)
    assert k(None, t) is t
    assert k(None, torch.ones(2), np.ones(2)) is not None
    assert calls == [("Tensor",), ("Tensor", "ndarray")]


def test_a_result_made_here_is_viewed_without_a_new_array_and_forgotten_with_its_tensor():
    route._TENSOR, route._from_numpy = torch.Tensor, torch.from_numpy
    double = route.routed(lambda ctx, x: x * 2)
    seen = []
    spy = route.routed(lambda ctx, x: seen.append(x) or x + 0)
    y = double(None, torch.ones(3))
    assert isinstance(y, torch.Tensor) and y.tolist() == [2.0, 2.0, 2.0]
    spy(None, y)
    assert seen[0] is route._MADE[id(y)][1]
    key = id(y)
    del y
    assert key not in route._MADE


def test_reversed_and_read_only_results_come_back_as_tensors():
    route._TENSOR, route._from_numpy = torch.Tensor, torch.from_numpy
    rev = route.routed(lambda ctx, x: x[::-1])
    ro = route.routed(lambda ctx, x: np.broadcast_to(x[:1], (3,)))
    x = torch.arange(3.0)
    assert rev(None, x).tolist() == [2.0, 1.0, 0.0]
    assert ro(None, x).tolist() == [0.0, 0.0, 0.0]


def test_numpy_only_nets_keep_their_specialized_straight_code():
    from asyncnet.exec.specialize import specializable

    with an.Workspace() as ws:
        for k, v in _feeds("numpy").items():
            ws.feed(k, v)
        net = an.Net("m", type="straight")
        net.FC(["x", "w", "b"], "h")
        net.Relu("h", "h")
        inst = ws.create_net(net)
        assert route.is_routed(inst.operators[0].fn)
        assert specializable(inst.operators)


def test_an_optimizer_with_a_host_learning_rate_takes_the_numpy_kernel():
    route._TENSOR, route._from_numpy = torch.Tensor, torch.from_numpy
    seen = []

    def sgd(ctx, w, g, lr):
        seen.append((type(w).__name__, type(lr).__name__))
        return w

    k = route.routed(sgd, route.HOST_INPUTS["SGD"])
    w = torch.ones(3)
    assert k(None, w, torch.ones(3), np.array([0.1], np.float32)) is w
    assert seen == [("ndarray", "ndarray")]
    k(None, w, np.ones(3, np.float32), np.array([0.1], np.float32))  # a numpy gradient is not a host input
    assert seen[-1] == ("Tensor", "ndarray")


def test_fed_tensors_keep_their_arrays_a_bounded_number_and_size():
    small = [np.ones(3, np.float32) for _ in range(route.FED_KEPT + 4)]
    tensors = [route.fed_tensor(a) for a in small]
    assert all(torch.equal(t, torch.ones(3)) for t in tensors)
    assert route.numpy_view(tensors[-1]) is small[-1]  # the array itself, not a new view
    assert route.numpy_view(tensors[0]) is not small[0]  # forgotten: a new view of the same memory
    assert np.shares_memory(route.numpy_view(tensors[0]), small[0])
    assert len(route._FED) <= route.FED_KEPT
    big = np.ones(route.FED_MAX_BYTES // 4 + 1, np.float32)
    t = route.fed_tensor(big)
    assert id(t) not in route._FED and np.shares_memory(t.numpy(), big)


def test_fed_tensors_from_many_threads_at_once():
    import threading

    errors = []

    def feed():
        try:
            for _ in range(2000):
                route.fed_tensor(np.ones(2, np.float32))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(route._FED) <= route.FED_KEPT
