"""async_scheduling's parallel runs on torch CPU tensors take the shadow (asyncnet.tensor.shadow):
numpy views made once per run, every chain's ops on those arrays, the written blobs stored back
when the last chain ends. The blobs are the op-by-op routed run's, bit for bit, in the same
libraries and with the same identities for in-place updates; a failing op leaves what the ops
that ran wrote; sync ops get the tensors the op-by-op run gives them."""

import contextlib

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import OperatorError
from asyncnet.exec import scheduling
from asyncnet.tensor import shadow

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def _shadow(on: bool):
    old, shadow.ENABLED = shadow.ENABLED, on
    try:
        yield
    finally:
        shadow.ENABLED = old


def _same_blobs(wa: an.Workspace, wb: an.Workspace) -> None:
    assert sorted(wa.blobs()) == sorted(wb.blobs())
    for name in wa.blobs():
        a, b = wa.fetch(name), wb.fetch(name)
        assert type(a) is type(b), name
        if isinstance(a, (np.ndarray, torch.Tensor)):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8), err_msg=name)


def _feeds(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    f = {
        "x": rng.standard_normal((6, 3)),
        "w": rng.standard_normal((5, 3)),
        "b": rng.standard_normal(5),
        "w2": rng.standard_normal((4, 5)),
        "b2": rng.standard_normal(4),
        "v": rng.standard_normal((4, 3)),
        "c": rng.standard_normal(4),
        "g": rng.standard_normal((5, 3)),
    }
    out = {k: torch.from_numpy(v.astype(np.float32)) for k, v in f.items()}
    out["label"] = torch.from_numpy(rng.integers(0, 4, 6).astype(np.int32))
    out["iter"] = np.zeros(1, np.int64)  # a host counter
    return out


def _branchy_net(net_type: str) -> an.Net:
    """Two branches from x that meet in a Sum, then a loss and in-place updates."""
    net = an.Net("branchy", type=net_type, num_workers=2)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.FC(["r", "w2", "b2"], "p")
    net.FC(["x", "v", "c"], "q")  # the other branch
    net.Sigmoid("q", "sq")
    net.Sum(["p", "sq"], "logits")
    net.SoftmaxWithLoss(["logits", "label"], ["prob", "loss"])
    net.Iter("iter", "iter")
    net.LearningRate("iter", "lr", base_lr=-0.1, policy="fixed")
    net.SGD(["w", "g", "lr"], "w")
    return net


def _workspace(feeds: dict) -> an.Workspace:
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    return ws


RUNS = {
    "helped": lambda net: scheduling.run_helped(net),
    "async": lambda net: net.run_async().wait(timeout=60),
}


@pytest.fixture
def write_backs(monkeypatch):
    """The runs whose written blobs the shadow stored back (each run's chain count)."""
    calls = []
    real = scheduling.write_back

    def counting(run):
        calls.append(len(run.net.chain_ops))
        return real(run)

    monkeypatch.setattr(scheduling, "write_back", counting)
    return calls


@pytest.mark.parametrize("how", sorted(RUNS))
def test_parallel_runs_on_tensors_take_the_shadow_and_give_the_op_by_op_runs_blobs(how, write_backs):
    feeds = _feeds()
    with _shadow(False):
        ref = _workspace(_feeds())
        simple = ref.create_net(_branchy_net("simple"))
        for _ in range(3):
            simple.run()
    wt = _workspace(feeds)
    net = wt.create_net(_branchy_net("async_scheduling"))
    assert net._shadow is not None and len(net.chain_ops) > 1
    for _ in range(3):
        RUNS[how](net)
    assert len(write_backs) == 3
    _same_blobs(ref, wt)
    assert wt.fetch("w") is feeds["w"] and isinstance(wt.fetch("sq"), torch.Tensor)
    assert type(wt.fetch("lr")) is np.ndarray and wt.fetch("iter") is feeds["iter"]
    assert all(cell[0] is None for _, cell in net._shadow._cells)
    ref.close()
    wt.close()


def test_a_done_callback_of_a_parallel_run_sees_the_written_blobs():
    wt = _workspace(_feeds())
    net = wt.create_net(_branchy_net("async_scheduling"))
    seen = []
    h = net.run_async()
    h.add_done_callback(lambda handle: seen.append(type(wt.fetch("prob"))))
    h.wait(timeout=60)
    assert seen == [torch.Tensor]
    wt.close()


def _failing_net(net_type: str) -> an.Net:
    """FC, Relu, an in-place SGD, then an FC that fails (r has 5 columns, w 3) and an op after it
    that would overwrite the external input x."""
    net = an.Net("failing", type=net_type, num_workers=2)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.ConstantFill([], "lr", shape=[1], value=-0.5)
    net.SGD(["w", "g", "lr"], "w")
    net.FC(["r", "w", "b"], "y")
    net.Relu("y", "x")
    return net


def test_a_failing_op_in_a_parallel_run_leaves_what_the_ops_that_ran_wrote(write_backs):
    errors, wss, fed = [], [], []
    for kind, shadowed in (("simple", False), ("async_scheduling", False), ("async_scheduling", True)):
        feeds = _feeds()
        fed.append(feeds)
        ws = _workspace(feeds)
        net = ws.create_net(_failing_net(kind))
        with _shadow(shadowed), pytest.raises(OperatorError) as info:
            RUNS["helped"](net) if kind == "async_scheduling" else net.run()
        errors.append((str(info.value), info.value.op_index))
        wss.append(ws)
    assert errors[0] == errors[1] == errors[2] and errors[0][1] == 4
    assert len(write_backs) == 1
    _same_blobs(wss[0], wss[2])
    _same_blobs(wss[1], wss[2])
    ws = wss[2]
    assert ws.fetch("x") is fed[2]["x"] and ws.fetch("w") is fed[2]["w"] and not ws.has("y")
    assert isinstance(ws.fetch("r"), torch.Tensor) and isinstance(ws.fetch("lr"), torch.Tensor) is False
    for ws in wss:
        ws.close()


class _TorchOnlySync:
    """A gradient sync that takes torch tensors only (a numpy array has no ``mul_``)."""

    num_workers = 1

    def __init__(self):
        self.seen = []

    def sync_gradients(self, grads):
        self.seen.append([type(g) for g in grads])
        for g in grads:
            g.mul_(0.5)


def _sync_net(net_type: str) -> an.Net:
    net = an.Net("sync", type=net_type, num_workers=2)
    net.FC(["x", "w", "b"], "h")
    net.SoftmaxWithLoss(["h", "label"], ["prob", "loss"])
    net.SoftmaxWithLossGradient(["prob", "label", "loss_grad"], "dh")
    net.FCGradient(["x", "w", "dh"], ["dw", "db"])
    net.Allreduce(["sync", "dw", "db"], ["dw", "db"])
    net.SGD(["w", "dw", "lr"], "w")
    net.SGD(["b", "db", "lr"], "b")
    return net


def test_sync_ops_in_a_parallel_run_get_the_op_by_op_runs_tensors(write_backs):
    wss = []
    for kind, shadowed in (("simple", False), ("async_scheduling", True)):
        sync = _TorchOnlySync()
        f = _feeds()
        feeds = {k: f[k] for k in ("x", "w", "b")}
        feeds["label"] = f["label"][:6] % 5
        feeds.update(loss_grad=torch.ones(()), lr=np.full(1, -0.1, np.float32), sync=sync)
        ws = _workspace(feeds)
        net = ws.create_net(_sync_net(kind))
        with _shadow(shadowed):
            for _ in range(2):
                RUNS["helped"](net) if kind == "async_scheduling" else net.run()
        assert sync.seen == [[torch.Tensor, torch.Tensor]] * 2
        assert ws.fetch("w") is feeds["w"] and isinstance(ws.fetch("dw"), torch.Tensor)
        wss.append(ws)
        if shadowed:
            assert all(cell[0] is None for _, cell in net._shadow._cells)
    assert len(write_backs) == 2
    _same_blobs(*wss)
    for ws in wss:
        ws.close()


def test_a_parallel_run_of_numpy_blobs_or_tensors_needing_grad_takes_no_shadow(write_backs):
    feeds = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in _feeds().items()}
    with an.Workspace() as wn:
        for k, v in feeds.items():
            wn.feed(k, v)
        net = wn.create_net(_branchy_net("async_scheduling"))
        RUNS["helped"](net)
        assert type(wn.fetch("prob")) is np.ndarray
    with an.Workspace() as wg:
        for k, v in _feeds().items():
            wg.feed(k, v)
        wg.feed("v", torch.ones(4, 3, requires_grad=True))
        net = wg.create_net(_branchy_net("async_scheduling"))
        RUNS["helped"](net)  # op by op: the ops reading v run torch's own kernels
        assert wg.fetch("q").requires_grad and not wg.fetch("h").requires_grad
    assert write_backs == []
