"""Specialized straight nets (asyncnet.exec.specialize): the same bits and errors as the simple
net whatever is fed between runs, and every op's fast kernel equal to its general kernel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.core.registry import registered_ops
from asyncnet.exec.specialize import MAX_VARIANTS, Variant, external_inputs
from asyncnet.train import MLP

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

SPECIALIZED = sorted(  # the ONNX ops' cases: tests/interop/onnx/test_onnx_specialize.py
    t for t, s in registered_ops().items() if s.specialize is not None and not t.startswith("ONNX")
)


def _mlp_workspace(net_type: str) -> tuple[an.Workspace, object]:
    model = MLP(8, hidden=(16,), num_classes=5, seed=3, lr=0.1)
    ws = an.Workspace()
    ws.run_net_once(model.init_net)
    net_def = model.train_net("train").to_def()
    net_def.type = net_type
    return ws, ws.create_net(net_def)


def _batch(rng: np.random.Generator, n: int, dtype=np.float32, label_dtype=np.int32) -> dict[str, np.ndarray]:
    return {"data": rng.standard_normal((n, 8)).astype(dtype), "label": rng.integers(0, 5, n).astype(label_dtype)}


def _step(ws: an.Workspace, net, feeds: dict) -> None:
    for k, v in feeds.items():
        ws.feed(k, v)
    net.run()


def _state(ws: an.Workspace) -> dict[str, bytes]:
    return {
        k: (type(v).__name__, np.asarray(v).dtype.str, np.asarray(v).shape, np.asarray(v).tobytes())
        for k in ws.blobs()
        if isinstance(v := ws.fetch(k), np.ndarray)
    }


def test_every_op_of_the_default_train_net_is_specialized():
    ws, net = _mlp_workspace("straight")
    _step(ws, net, _batch(np.random.default_rng(0), 4))
    assert isinstance(net._specializer.variant(ws._blobs), Variant)
    assert set(op.type for op in net.operators) <= set(SPECIALIZED)
    assert set(external_inputs(net.operators)) == {"data", "label", "fc1_w", "fc1_b", "fc2_w", "fc2_b", "iter"}


def test_runs_equal_the_simple_net_bit_for_bit_across_signature_changes():
    rng = np.random.default_rng(1)
    batches = [_batch(rng, 6) for _ in range(3)] + [_batch(rng, 2)] + [_batch(rng, 6)]  # a smaller last batch
    batches += [_batch(rng, 6, np.float64)]  # a new dtype: the general kernels refuse the mix, as simple does
    nets = {t: _mlp_workspace(t) for t in ("simple", "straight")}
    for feeds in batches:
        outcome = {}
        for t, (ws, net) in nets.items():
            try:
                _step(ws, net, feeds)
                outcome[t] = None
            except an.OperatorError as e:
                outcome[t] = (str(e), e.op_index)
        assert outcome["simple"] == outcome["straight"]
        assert _state(nets["simple"][0]) == _state(nets["straight"][0])
    assert len(nets["straight"][1]._specializer._variants) >= 2  # 6 and 2 examples


def test_variants_are_bounded_and_reused():
    ws, net = _mlp_workspace("straight")
    rng = np.random.default_rng(2)
    for n in range(1, MAX_VARIANTS + 4):
        _step(ws, net, _batch(rng, n))
    assert len(net._specializer._variants) == MAX_VARIANTS
    _step(ws, net, _batch(rng, MAX_VARIANTS + 3))
    assert net._specializer._current.matches(ws._blobs)


@pytest.mark.parametrize(
    "fault",
    ["label out of range", "negative label int64", "read-only weight", "negative iter", "missing blob", "torch data"],
)
def test_a_fault_after_specializing_is_the_simple_nets_error(fault):
    rng = np.random.default_rng(3)
    warm = [_batch(rng, 4, label_dtype=np.int64 if "int64" in fault else np.int32) for _ in range(2)]
    states, errors = {}, {}
    for t in ("simple", "straight"):
        ws, net = _mlp_workspace(t)
        for feeds in warm:
            _step(ws, net, feeds)
        feeds = {k: v.copy() for k, v in warm[0].items()}
        if fault == "label out of range":
            feeds["label"][2] = 7
        elif fault == "negative label int64":
            feeds["label"][1] = -1
        elif fault == "read-only weight":
            ws.fetch("fc2_w").flags.writeable = False
        elif fault == "negative iter":
            ws.fetch("iter")[0] = -3
        elif fault == "missing blob":
            ws.remove("fc1_b")
        else:
            torch = pytest.importorskip("torch")
            feeds["data"] = torch.from_numpy(feeds["data"])
        try:
            _step(ws, net, feeds)
            errors[t] = None
        except an.OperatorError as e:
            errors[t] = (str(e), e.op_index, type(e.__cause__).__name__)
        states[t] = _state(ws)
    assert errors["simple"] == errors["straight"]
    assert errors["simple"] is not None or fault == "torch data"
    assert states["simple"] == states["straight"]


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_other_optimizers_specialize_with_the_same_bits(optimizer):
    rng = np.random.default_rng(5)
    batches = [_batch(rng, 6) for _ in range(4)]
    states = {}
    for t in ("simple", "straight"):
        model = MLP(8, hidden=(16,), num_classes=5, seed=3, lr=0.1, optimizer=optimizer)
        ws = an.Workspace()
        ws.run_net_once(model.init_net)
        net_def = model.train_net("train").to_def()
        net_def.type = t
        net = ws.create_net(net_def)
        for feeds in batches:
            _step(ws, net, feeds)
        states[t] = _state(ws)
        if t == "straight":
            assert isinstance(net._specializer.variant(ws._blobs), Variant)
    assert states["simple"] == states["straight"]


def test_a_floating_point_error_raised_after_a_write_is_not_run_twice():
    # MomentumSGDUpdate writes the moment, then overflows writing the param: numpy raises after
    # both writes, so running the op again (as after a fast kernel's clean failure) would move the moment twice
    states, errors = {}, {}
    for t in ("simple", "straight"):
        ws = an.Workspace()
        for k, v in {"g": [0.5], "m": [0.0], "lr": [0.1], "p": [1.0]}.items():
            ws.feed(k, np.array(v, np.float32))
        net = an.Net("u", type=t)
        net.MomentumSGDUpdate(["g", "m", "lr", "p"], ["g", "m", "p"], momentum=0.9, formula="torch")
        created = ws.create_net(net)
        for _ in range(2):
            created.run()
        ws.fetch("p")[:] = 3e38
        ws.fetch("g")[:] = 1e38
        ws.fetch("lr")[:] = -2.0
        with np.errstate(over="raise"):
            with pytest.raises(an.OperatorError) as info:
                created.run()
        errors[t] = (str(info.value), type(info.value.__cause__).__name__)
        states[t] = _state(ws)
    assert errors["simple"] == errors["straight"] and "FloatingPointError" in errors["simple"][1]
    assert states["simple"] == states["straight"]


def test_a_net_with_an_op_without_fast_kernel_is_not_specialized():
    ws = an.Workspace()
    ws.feed("x", np.ones((2, 2), np.float32))
    net = an.Net("n", type="straight")
    net.Relu("x", "y")
    net.Sigmoid("y", "z")  # no specialize
    created = ws.create_net(net)
    created.run()
    assert created._specializer is None and ws.fetch("z").shape == (2, 2)


# -- the contract of each op's specialize: fast == general on every input of the same kinds ----------
def _floats(draw, shape, dtype):
    values = st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])
    return np.array(
        draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))), dtype=dtype
    ).reshape(shape)


@st.composite
def op_cases(draw):
    """(op type, inputs, outputs count, args) for one specializable op."""
    t = draw(st.sampled_from(SPECIALIZED))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    f = lambda *shape: _floats(draw, shape, dtype)
    labels = lambda rows, d: np.array(
        draw(st.lists(st.integers(-2, d + 1), min_size=rows, max_size=rows)),
        dtype=draw(st.sampled_from([np.int32, np.int64])),
    )
    lead = draw(st.sampled_from([(), (1,), (2,)]))  # X with dims before the FC's axis (a step net's [1, N, D])
    axes = {"axis": 1 + len(lead)} if lead else {}
    if t == "FC":
        return t, [f(*lead, m, k), f(n, k), f(n)], 1, axes
    if t == "FCGradient":
        return t, [f(*lead, m, k), f(n, k), f(*lead, m, n)], draw(st.sampled_from([2, 3])), axes
    if t in ("Sum", "Copy"):
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        count = draw(st.integers(1, 3)) if t == "Sum" else 1
        return t, [f(*shape) for _ in range(count)], 1, {}
    if t in ("LSTMUnit", "LSTMUnitGradient"):
        with_lengths = draw(st.booleans())
        lengths = [np.array(draw(st.lists(st.integers(0, 3), min_size=m, max_size=m)), np.int32)]
        step = [np.array([draw(st.integers(0, 3))], np.int32)]
        ins = [f(1, m, k), f(1, m, k), f(1, m, 4 * k), *(lengths if with_lengths else []), *step]
        args = {
            "sequence_lengths": with_lengths,
            "drop_states": draw(st.booleans()),
            "forget_bias": draw(st.sampled_from([0.0, 1.0])),
        }
        if t == "LSTMUnit":
            return t, ins, 2, args
        return t, [*ins, *(f(1, m, k) for _ in range(4))], 3, args
    if t == "Relu":
        return t, [f(*draw(st.lists(st.integers(0, 3), max_size=3)))], 1, {}
    if t == "ReluGradient":
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        return t, [f(*shape), f(*shape)], 1, {}
    if t == "SoftmaxWithLoss":
        return t, [f(m, n + 1), labels(m, n + 1)], 2, {}
    if t == "SoftmaxWithLossGradient":
        p, lab, dloss = f(m, n + 1), labels(m, n + 1), f()
        four = draw(st.booleans())
        return t, ([f(m, n + 1), lab, p, dloss] if four else [p, lab, dloss]), 1, {"only_loss": draw(st.booleans())}
    if t == "ConstantFill":
        value = draw(st.sampled_from([1.0, 2.5, -0.0, 3, True, 1e40]))
        dtype_arg = draw(st.sampled_from([{}, {"dtype": "float64"}, {"dtype": "int32"}]))
        return t, [f(*draw(st.lists(st.integers(0, 3), max_size=2)))], 1, {"value": value, **dtype_arg}
    if t == "Iter":
        return t, [np.array([draw(st.sampled_from([0, 5, -1, np.iinfo(np.int64).max]))], np.int64)], 1, {}
    if t == "LearningRate":
        policy = draw(
            st.sampled_from(
                [
                    {"policy": "fixed"},
                    {"policy": "step", "stepsize": 3, "gamma": 0.5},
                    {"policy": "inv", "gamma": 0.1, "power": 0.5},
                ]
            )
        )
        return t, [np.array([draw(st.integers(-2, 10))], np.int64)], 1, {"base_lr": -0.1, **policy}
    if t == "SGD":
        p = f(m, k)
        p.flags.writeable = draw(st.booleans())
        return (
            t,
            [p, f(m, k), np.array(draw(st.floats(0, 1)), dtype)],
            1,
            {"weight_decay": draw(st.sampled_from([0.0, 0.1]))},
        )
    if t == "MomentumSGDUpdate":
        g, mom, p = f(m, k), f(m, k), f(m, k)
        p.flags.writeable = draw(st.booleans())
        return (
            t,
            [g, mom, np.array([draw(st.floats(0, 1))], dtype), p],
            3,
            {
                "momentum": 0.9,
                "nesterov": draw(st.booleans()),
                "formula": draw(st.sampled_from(["caffe2", "torch"])),
                "weight_decay": draw(st.sampled_from([0.0, 0.01])),
            },
        )
    if t == "Adam":
        return (
            t,
            [
                f(m, k),
                f(m, k),
                np.abs(f(m, k)),
                f(m, k),
                np.array([0.01], dtype),
                np.array([draw(st.integers(-1, 5))], np.int64),
            ],
            3,
            {"formula": draw(st.sampled_from(["caffe2", "torch"]))},
        )
    if t == "Accuracy":
        return t, [f(m, n + 1), labels(m, n + 1)], 1, {}
    raise AssertionError(f"no inputs for {t}: add a case")


def _call(fn, op, inputs):
    copies = [np.array(x, copy=True) for x in inputs]
    for c, x in zip(copies, inputs):
        c.flags.writeable = x.flags.writeable
    try:
        out = fn(op.ctx, *copies)
    except Exception as e:  # noqa: BLE001
        return e, copies
    return (out if isinstance(out, (tuple, list)) else (out,)), copies


def _bits(values):
    return [(type(v).__name__, np.asarray(v).dtype.str, np.asarray(v).shape, np.asarray(v).tobytes()) for v in values]


@settings(max_examples=300, deadline=None)
@given(op_cases())
def test_each_fast_kernel_equals_its_general_kernel(case):
    t, inputs, n_out, args = case
    names = [f"i{k}" for k in range(len(inputs))]
    in_place = {"Iter": [0], "SGD": [0], "MomentumSGDUpdate": [0, 1, 3], "Adam": [0, 1, 2]}
    outs = [names[i] for i in in_place[t]] if t in in_place else [f"o{k}" for k in range(n_out)]
    ws = an.Workspace()
    for name, x in zip(names, inputs):
        ws.feed(name, x)
    net = an.Net("c", type="straight")
    getattr(net, t)(names, outs, **args)
    op = ws.create_net(net).operators[0]
    fast = op.schema.specialize(op.ctx, *inputs)
    if fast is None:
        return
    general, g_inputs = _call(op.fn, op, inputs)
    got, f_inputs = _call(fast, op, inputs)
    if isinstance(got, Exception):  # allowed, when nothing was written: the executor goes on with the general kernel
        assert _bits(f_inputs) == _bits(inputs)
        return
    assert not isinstance(general, Exception), f"fast kernel returned where the general one raised {general!r}"
    assert _bits(got) == _bits(general)
    assert _bits(f_inputs) == _bits(g_inputs)  # the same in-place writes


def test_the_contract_cases_cover_every_specialized_op():
    covered = {
        "Accuracy",
        "Adam",
        "MomentumSGDUpdate",
        "FC",
        "FCGradient",
        "Sum",
        "Copy",
        "LSTMUnit",
        "LSTMUnitGradient",
        "Relu",
        "ReluGradient",
        "SoftmaxWithLoss",
        "SoftmaxWithLossGradient",
        "ConstantFill",
        "Iter",
        "LearningRate",
        "SGD",
    }
    assert set(SPECIALIZED) == covered  # a new specialize needs a case in op_cases


def test_fc_gradient_one_row_gives_blas_zero_signs():
    # BLAS adds each product to 0: a -0.0 product (dY = -0.0, X = 0) is +0.0 in the general kernel
    ws = an.Workspace()
    # axis=2 on a 3-D X: the specialized kernel with bound axes, one row (M = 1)
    inputs = [np.zeros((1, 1, 3), np.float32), np.ones((2, 3), np.float32), np.array([[-0.0, 1.0]], np.float32)]
    for name, x in zip(["x", "w", "dy"], inputs):
        ws.feed(name, x)
    net = an.Net("g", type="straight")
    net.FCGradient(["x", "w", "dy"], ["dw", "db"], axis=2)
    op = ws.create_net(net).operators[0]
    fast = op.schema.specialize(op.ctx, *inputs)
    assert fast is not None
    general, _ = _call(op.fn, op, inputs)
    got, _ = _call(fast, op, inputs)
    assert _bits(got) == _bits(general)
    assert not np.signbit(got[0]).any()
