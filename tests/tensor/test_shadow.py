"""Nets of routed ops on torch CPU tensors run whole on numpy views (asyncnet.tensor.shadow) on the
simple and straight executors and in async_scheduling's in-line runs: the op-by-op routed run's
blobs, bit for bit, in the same libraries, with the same object identities for in-place updates,
and the same errors and partial writes when an op fails."""

import contextlib

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import OperatorError
from asyncnet.tensor import route, shadow
from asyncnet.tensor.shadow import Shadow

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)


def _same_blobs(wa: an.Workspace, wb: an.Workspace) -> None:
    """Every blob of ``wa`` in ``wb``: same library, same dtype and shape, same bits."""
    assert sorted(wa.blobs()) == sorted(wb.blobs())
    for name in wa.blobs():
        a, b = wa.fetch(name), wb.fetch(name)
        assert type(a) is type(b), name
        if isinstance(a, (np.ndarray, torch.Tensor)):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8), err_msg=name)


def _mlp_net(net_type: str, flatten: bool = True) -> an.Net:
    net = an.Net("mlp", type=net_type)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.FC(["r", "w2", "b2"], "logits")
    net.SoftmaxWithLoss(["logits", "label"], ["prob", "loss"])
    if flatten:
        net.Flatten("prob", "flat")
    net.Iter("iter", "iter")
    net.LearningRate("iter", "lr", base_lr=-0.1, policy="fixed")
    net.SGD(["w", "g", "lr"], "w")
    return net


def _mlp_feeds(lib: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "x": rng.standard_normal((6, 3)),
        "w": rng.standard_normal((5, 3)),
        "b": rng.standard_normal(5),
        "w2": rng.standard_normal((4, 5)),
        "b2": rng.standard_normal(4),
        "g": rng.standard_normal((5, 3)),
    }
    out = {k: v.astype(np.float32) for k, v in arrays.items()}
    out["label"] = rng.integers(0, 4, 6).astype(np.int32)
    if lib == "torch":
        out = {k: torch.from_numpy(v.copy()) for k, v in out.items()}
    out["iter"] = np.zeros(1, np.int64)  # a host counter, as the trainers keep it
    return out


NET_TYPES = ["simple", "straight", "async_scheduling"]


@contextlib.contextmanager
def _shadow(on: bool):
    """Runs inside take the shadow (``on``) or go op by op through the routed kernels."""
    old, shadow.ENABLED = shadow.ENABLED, on
    try:
        yield
    finally:
        shadow.ENABLED = old


def _run(build, feeds, net_type: str, steps: int = 3, shadowed: bool = True):
    """(workspace, net) after ``steps`` runs of ``build(net_type)`` on ``feeds()``."""
    ws = an.Workspace()
    for k, v in feeds().items():
        ws.feed(k, v)
    net = ws.create_net(build(net_type))
    with _shadow(shadowed):
        for _ in range(steps):
            net.run()
    return ws, net


def _pair(build, feeds, net_type: str = "straight", steps: int = 3):
    """(the op-by-op routed (workspace, net), the shadowed one) after ``steps`` runs."""
    return _run(build, feeds, "simple", steps, shadowed=False), _run(build, feeds, net_type, steps)


@pytest.mark.parametrize("net_type", NET_TYPES)
def test_a_run_on_tensors_gives_the_routed_op_by_op_runs_blobs_bit_for_bit(net_type):
    (ws, _), (wt, net) = _pair(_mlp_net, lambda: _mlp_feeds("torch"), net_type)
    assert net._shadow is not None
    _same_blobs(ws, wt)
    assert isinstance(wt.fetch("prob"), torch.Tensor) and type(wt.fetch("lr")) is np.ndarray
    with an.Workspace() as wn:  # and the numpy backend's bits
        for k, v in _mlp_feeds("numpy").items():
            wn.feed(k, v)
        n = wn.create_net(_mlp_net("straight"))
        for _ in range(3):
            n.run()
        for name in ("h", "prob", "loss", "w", "flat"):
            np.testing.assert_array_equal(wt.fetch(name).numpy(), wn.fetch(name))
    ws.close()
    wt.close()


def _alias_net(net_type: str) -> an.Net:
    net = an.Net("n", type=net_type)
    net.Flatten("x", "fx")  # x is already 2-D: numpy returns the same array
    net.SGD(["w", "g", "lr"], "w")
    return net


@pytest.mark.parametrize("net_type", NET_TYPES)
def test_in_place_updates_keep_the_fed_tensor_and_a_returned_input_keeps_its_tensor(net_type):
    identities = []
    for kind, shadowed in (("simple", False), (net_type, True)):
        feeds = _mlp_feeds("torch")
        feeds["lr"] = torch.tensor([-0.5])
        ws, _ = _run(_alias_net, lambda f=feeds: f, kind, steps=2, shadowed=shadowed)
        assert ws.fetch("w") is feeds["w"]
        identities.append(ws.fetch("fx") is ws.fetch("x"))
        ws.close()
    assert identities[0] == identities[1]


@pytest.mark.parametrize("model", ["mlp", "cnn", "lstm", "dlrm"])
def test_zoo_train_steps_on_tensors_equal_the_numpy_backends_bits(model):
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import dataset_for, epoch_batches, load_clicks
    from asyncnet.train.program import build_program
    from asyncnet.train.worker import WorkerNets

    ds = load_clicks(600, 100) if model == "dlrm" else dataset_for(model)
    params = {}
    for tensor, net_type in (("numpy", "straight"), ("torch", "straight"), ("torch", "simple")):
        cfg = TrainConfig(model=model, mode="local", tensor=tensor, net_type=net_type, seed=0, trace=False, threads=1)
        w = WorkerNets(
            cfg, build_program(cfg, ds.input_dim, ds.num_classes), feeds=ds.feeds if model == "dlrm" else None
        )
        try:
            for xb, yb in list(epoch_batches(ds.x_train, ds.y_train, 32, 1, 0))[:4]:
                w.step(xb, yb)
            if tensor == "torch" and net_type == "straight":
                assert w.train_net._shadow is not None
            blobs = {p: w.ws.fetch(p, host=True) for p in w.ws.blobs()}
            params[(tensor, net_type)] = {p: np.array(v) for p, v in blobs.items() if hasattr(v, "dtype")}
        finally:
            w.close()
    ref = params[("numpy", "straight")]
    for key in (("torch", "straight"), ("torch", "simple")):
        assert sorted(params[key]) == sorted(ref)
        for p, v in ref.items():
            np.testing.assert_array_equal(params[key][p], v, err_msg=f"{key} {p}")


def _failing_net(net_type: str) -> an.Net:
    net = an.Net("f", type=net_type)
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.FC(["r", "bad_w", "b2"], "y")  # bad_w's inner size does not match r's
    net.Relu("y", "z")
    return net


@pytest.mark.parametrize("net_type", NET_TYPES)
def test_a_failing_op_raises_the_routed_runs_error_and_keeps_the_blobs_written_before_it(net_type):
    errors, wss = [], []
    for kind, shadowed in (("simple", False), (net_type, True)):
        ws = an.Workspace()
        for k, v in _mlp_feeds("torch").items():
            ws.feed(k, v)
        ws.feed("bad_w", torch.ones(4, 7))
        net = ws.create_net(_failing_net(kind))
        with _shadow(shadowed), pytest.raises(OperatorError) as info:
            net.run()
        errors.append((str(info.value), info.value.op_index))
        wss.append(ws)
    assert errors[0] == errors[1] and errors[0][1] == 2
    _same_blobs(*wss)
    assert isinstance(wss[1].fetch("r"), torch.Tensor) and not wss[1].has("y")
    for ws in wss:
        ws.close()


def test_a_fast_kernel_failing_after_specialization_resumes_on_the_general_kernels():
    (ws, simple), (wt, net) = _pair(lambda t: _mlp_net(t, flatten=False), lambda: _mlp_feeds("torch"))
    assert net._specializer is not None and net._specializer._current is not None  # a variant ran
    bad = torch.tensor([0, 1, 2, 9, 0, 1], dtype=torch.int32)  # a label out of range
    errors = []
    for w, inst, shadowed in ((ws, simple, False), (wt, net, True)):
        w.feed("label", bad.clone())
        with _shadow(shadowed), pytest.raises(OperatorError) as info:
            inst.run()
        errors.append((str(info.value), info.value.op_index))
    assert errors[0] == errors[1] and errors[0][1] == 3
    _same_blobs(ws, wt)
    ws.close()
    wt.close()


def test_tensors_needing_grad_and_mixed_libraries_take_the_op_by_op_path():
    with an.Workspace() as wt:
        for k, v in _mlp_feeds("torch").items():
            wt.feed(k, v)
        inst = wt.create_net(_mlp_net("straight"))
        shadow = inst._shadow
        assert shadow.views(inst.blobs) is not None
        wt.feed("x", torch.ones(6, 3, requires_grad=True))
        assert shadow.views(inst.blobs) is None
        wt.feed("x", np.ones((6, 3), np.float32))  # a numpy array beside tensors in FC: no shadow
        got = shadow.views(inst.blobs)
        assert got is not None and shadow.plan(got[1]) is None
        route.ENABLED = False
        try:
            wt.feed("x", torch.ones(6, 3))
            assert shadow.views(inst.blobs) is None
        finally:
            route.ENABLED = True


def test_a_net_of_numpy_arrays_plans_no_shadow():
    class Op:
        def __init__(self, t, i, o):
            self.type, self.inputs, self.outputs = t, i, o

    route.route_operators([])  # torch is imported: routing is on, as once any net was created
    s = Shadow([Op("Relu", ("x",), ("y",)), Op("SGD", ("w", "y", "lr"), ("w",))], ["x", "w", "lr"])
    got = s.views({"x": np.ones(2), "w": np.ones(2), "lr": np.ones(1)})
    assert got is not None and s.plan(got[1]) is None


def test_async_schedulings_in_line_runs_take_the_shadow(monkeypatch):
    taken = []
    run_ops = Shadow.run_ops

    def counting(self, blobs, stop=None):
        ok = run_ops(self, blobs, stop)
        taken.append(ok)
        return ok

    monkeypatch.setattr(Shadow, "run_ops", counting)
    ref, _ = _run(_mlp_net, lambda: _mlp_feeds("torch"), "simple", shadowed=False)
    wt = an.Workspace()
    for k, v in _mlp_feeds("torch").items():
        wt.feed(k, v)
    net = wt.create_net(_mlp_net("async_scheduling"))
    net.policy.mode = "inline"  # as the policy decides for a net this small once measured
    taken.clear()
    for _ in range(3):
        net.run()
    assert taken == [True, True, True]
    _same_blobs(ref, wt)
    ref.close()
    wt.close()


class _TorchOnlySync:
    """A user's gradient sync written for torch tensors only: it records what it is given and
    scales in place with torch methods (a numpy array has no ``mul_``)."""

    num_workers = 1

    def __init__(self):
        self.seen = []

    def sync_gradients(self, grads):
        self.seen.append([type(g) for g in grads])
        for g in grads:
            g.mul_(0.5)


def _sync_net(net_type: str, split: bool = False) -> an.Net:
    net = an.Net("sync", type=net_type)
    net.FC(["x", "w", "b"], "h")
    net.SoftmaxWithLoss(["h", "label"], ["prob", "loss"])
    net.SoftmaxWithLossGradient(["prob", "label", "loss_grad"], "dh")
    net.FCGradient(["x", "w", "dh"], ["dw", "db"])
    if split:
        net.AllreduceStart(["sync", "dw", "db"], ["dw", "db", "work"])
        net.AllreduceWait(["work", "dw", "db"], ["dw", "db"])
    else:
        net.Allreduce(["sync", "dw", "db"], ["dw", "db"])
    net.SGD(["w", "dw", "lr"], "w")
    net.SGD(["b", "db", "lr"], "b")
    return net


def _sync_feeds(lib: str, sync) -> dict:
    f = _mlp_feeds(lib)
    out = {k: f[k] for k in ("x", "w", "b", "label")}
    out["loss_grad"] = torch.ones(()) if lib == "torch" else np.ones((), np.float32)
    out["lr"] = np.full(1, -0.1, np.float32)  # a host value
    out["sync"] = sync
    return out


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("net_type", NET_TYPES)
def test_sync_ops_run_in_the_whole_run_and_hand_the_sync_the_op_by_op_runs_tensors(net_type, split, monkeypatch):
    taken = []
    run_ops = Shadow.run_ops

    def counting(self, blobs, stop=None):
        ok = run_ops(self, blobs, stop)
        taken.append(ok)
        return ok

    monkeypatch.setattr(Shadow, "run_ops", counting)
    results = []
    for kind, shadowed in (("simple", False), (net_type, True)):
        sync = _TorchOnlySync()
        ws = an.Workspace()
        for k, v in _sync_feeds("torch", sync).items():
            ws.feed(k, v)
        w_fed = ws.fetch("w")
        net = ws.create_net(_sync_net(kind, split))
        if kind == "async_scheduling":
            net.policy.mode = "inline"
        assert net._shadow is not None
        taken.clear()
        with _shadow(shadowed):
            for _ in range(3):
                net.run()
        assert sync.seen == [[torch.Tensor, torch.Tensor]] * 3
        assert ws.fetch("w") is w_fed and isinstance(ws.fetch("dw"), torch.Tensor)
        results.append(ws)
    if net_type != "straight":
        assert taken == [True] * 3
    _same_blobs(*results)
    with an.Workspace() as wn:  # the numpy backend's bits (a numpy sync gets arrays)
        sync = _TorchOnlySync()
        sync.sync_gradients = lambda grads: [np.multiply(g, np.float32(0.5), out=g) for g in grads]  # type: ignore[method-assign]
        for k, v in _sync_feeds("numpy", sync).items():
            wn.feed(k, v)
        n = wn.create_net(_sync_net("simple", split))
        for _ in range(3):
            n.run()
        for name in ("w", "b", "dw", "db", "prob"):
            np.testing.assert_array_equal(results[1].fetch(name).numpy(), wn.fetch(name), err_msg=name)
    for ws in results:
        ws.close()


def test_a_straight_sync_net_takes_the_whole_run(monkeypatch):
    from asyncnet.exec.straight import StraightNet

    calls = []
    real = StraightNet._run_shadow
    monkeypatch.setattr(StraightNet, "_run_shadow", lambda self, *a: calls.append(1) or real(self, *a))
    with an.Workspace() as ws:
        for k, v in _sync_feeds("torch", _TorchOnlySync()).items():
            ws.feed(k, v)
        net = ws.create_net(_sync_net("straight"))
        for _ in range(2):
            net.run()
    assert calls == [1, 1]
    assert all(cell[0] is None for _, cell in net._shadow._cells)  # disarmed after the run


def test_a_failing_sync_keeps_the_blobs_written_before_it_and_disarms():
    class Failing(_TorchOnlySync):
        def sync_gradients(self, grads):
            raise RuntimeError("peer gone")

    errors, wss = [], []
    for shadowed in (False, True):
        ws = an.Workspace()
        for k, v in _sync_feeds("torch", Failing()).items():
            ws.feed(k, v)
        net = ws.create_net(_sync_net("straight"))
        with _shadow(shadowed), pytest.raises(OperatorError) as info:
            net.run()
        errors.append((str(info.value), info.value.op_index))
        wss.append(ws)
        assert all(cell[0] is None for _, cell in net._shadow._cells)
    assert errors[0] == errors[1] and errors[0][1] == 4
    _same_blobs(*wss)
    assert isinstance(wss[1].fetch("dw"), torch.Tensor)
    for ws in wss:
        ws.close()


@pytest.mark.parametrize("model", ["mlp", "dlrm"])
def test_sync_mode_train_steps_on_tensors_run_whole_and_equal_the_numpy_backends_bits(model):
    from asyncnet.sync import run_parallel_workers
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import dataset_for, epoch_batches, load_clicks
    from asyncnet.train.program import build_program
    from asyncnet.train.worker import WorkerNets

    ds = load_clicks(600, 100) if model == "dlrm" else dataset_for(model)
    batches = list(epoch_batches(ds.x_train, ds.y_train, 32, 1, 0))[:6]

    def worker(tensor: str, sync):
        cfg = TrainConfig(model=model, mode="sync", workers=2, tensor=tensor, seed=0, trace=False, threads=1)
        w = WorkerNets(
            cfg,
            build_program(cfg, ds.input_dim, ds.num_classes),
            sync=sync,
            rank=sync.worker_id,
            feeds=ds.feeds if model == "dlrm" else None,
        )
        try:
            if tensor == "torch":
                assert w.train_net._shadow is not None
            for xb, yb in batches[sync.worker_id :: 2]:
                w.step(xb, yb)
            return {p: np.array(w.ws.fetch(p, host=True)) for p in w.model.checkpoint_blobs}
        finally:
            w.close()

    got = {t: run_parallel_workers(2, lambda s, t=t: worker(t, s), timeout=60) for t in ("numpy", "torch")}
    for rank in range(2):
        ref = got["numpy"][rank]
        assert sorted(got["torch"][rank]) == sorted(ref)
        for p, v in ref.items():
            np.testing.assert_array_equal(got["torch"][rank][p], v, err_msg=f"rank {rank} {p}")


_RESHAPES = {
    "t_": lambda t: t.t_(),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "resize_ smaller": lambda t: t.resize_(2, 2),
    "as_strided_": lambda t: t.as_strided_((3, 2), (1, 3)),
}


@pytest.mark.parametrize("change", sorted(_RESHAPES))
@pytest.mark.parametrize("shadowed", [True, False])
@pytest.mark.parametrize("net_type", ["simple", "straight"])
def test_a_tensor_reshaped_in_place_between_runs_is_read_with_its_new_shape(net_type, shadowed, change):
    kinds = {
        "fed": lambda: route.fed_tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3) - 2),
        "plain": lambda: torch.arange(6.0).reshape(2, 3) - 2,
    }
    for kind, make in kinds.items():
        with an.Workspace() as ws, _shadow(shadowed):
            x = make()
            ws.feed("x", x)
            net = an.Net("n", type=net_type)
            net.Relu("x", "y")
            net.Relu("y", "z")
            inst = ws.create_net(net)
            inst.run()
            _RESHAPES[change](x)
            inst.run()
            expected = torch.relu(x).numpy()
            for name in ("y", "z"):
                got = ws.fetch(name)
                assert tuple(got.shape) == tuple(x.shape), (kind, name)
                np.testing.assert_array_equal(got.numpy(), expected, err_msg=f"{kind} {name}")


def test_a_result_tensor_reshaped_in_place_is_read_with_its_new_shape_by_the_next_net():
    with an.Workspace() as ws:
        ws.feed("x", torch.arange(6.0).reshape(2, 3))
        first, second = an.Net("a"), an.Net("b")
        first.Relu("x", "y")
        second.Relu("y", "z")
        ws.run_net_once(first)
        y = ws.fetch("y")
        y.t_()
        ws.run_net_once(second)
        assert tuple(ws.fetch("z").shape) == (3, 2)
        np.testing.assert_array_equal(ws.fetch("z").numpy(), y.numpy())


@pytest.mark.parametrize("shadowed", [True, False])
@pytest.mark.parametrize("net_type", ["simple", "straight"])
def test_inference_tensors_run_and_are_read_with_their_shape_after_an_in_place_reshape(net_type, shadowed):
    with torch.inference_mode():
        x = torch.arange(6.0).reshape(2, 3) - 2  # an inference tensor keeps no version counter
    with an.Workspace() as ws, _shadow(shadowed):
        ws.feed("x", x)
        net = an.Net("n", type=net_type)
        net.Relu("x", "y")
        net.Relu("y", "z")
        inst = ws.create_net(net)
        inst.run()
        with torch.inference_mode():
            x.t_()
        inst.run()
        assert tuple(ws.fetch("z").shape) == (3, 2)
        np.testing.assert_array_equal(ws.fetch("z").numpy(), torch.relu(x).numpy())


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("net_type", NET_TYPES)
def test_a_fetched_result_keeps_its_values_after_the_next_run(net_type, lib):
    with an.Workspace() as ws:
        for k, v in _mlp_feeds(lib).items():
            ws.feed(k, v)
        inst = ws.create_net(_mlp_net(net_type))
        inst.run()
        fetched = {n: ws.fetch(n) for n in ("h", "r", "prob", "loss", "flat")}
        host = lambda v: v.numpy() if isinstance(v, torch.Tensor) else v
        kept = {n: host(v).copy() for n, v in fetched.items()}
        ws.feed("x", _mlp_feeds(lib, seed=1)["x"])  # other values: every result changes
        inst.run()
        for n, v in fetched.items():
            assert ws.fetch(n) is not v, n
            np.testing.assert_array_equal(host(v), kept[n], err_msg=n)
            assert not np.array_equal(host(ws.fetch(n)), kept[n]), n
