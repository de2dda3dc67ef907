"""The contract of each ONNX op's ``specialize`` (:mod:`asyncnet.exec.specialize`): its fast
kernel gives the general kernel's bits and writes for every input of the kinds it was made for,
or raises having written nothing; a straight net of ONNX ops takes its specialized code."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.core.registry import registered_ops

pytest.importorskip("onnx")
pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::RuntimeWarning")]  # inf and nan inputs

SPECIALIZED = sorted(t for t, s in registered_ops().items() if s.specialize is not None and t.startswith("ONNX"))


def _floats(draw, shape, dtype):
    values = st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])
    n = int(np.prod(shape))
    return np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=dtype).reshape(shape)


@st.composite
def op_cases(draw):
    """(op type, inputs, args) for one specializable ONNX op."""
    t = draw(st.sampled_from(SPECIALIZED))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    f = lambda *shape: _floats(draw, shape, dtype)
    dims = lambda lo=1, hi=3, n=3: tuple(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)))
    if t == "ONNXConv":
        n, c, m = dims(1, 3)
        k = draw(st.sampled_from([1, 2, 3]))
        group = draw(st.sampled_from([g for g in (1, 2) if c % g == 0 and m % g == 0]))
        pads = list(draw(st.sampled_from([(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)])))
        x, w = f(n, c, 4, 5), f(m, c // group, k, k)
        bias, residual = draw(st.booleans()), draw(st.booleans())
        oh, ow = 4 + pads[0] + pads[2] - k + 1, 5 + pads[1] + pads[3] - k + 1
        ins = [x, w, *([f(m)] if bias else []), *([f(n, m, oh, ow)] if residual else [])]
        act = draw(st.sampled_from([{}, {"activation": "Relu"}, {"activation": "Clip", "min": 0.0, "max": 6.0}]))
        args = {"kernels": [k, k], "pads": pads, "group": group, "bias": bias, "residual": residual, **act}
        return t, ins, args
    if t == "ONNXMaxPool":
        k = draw(st.sampled_from([1, 2, 3]))
        args = {"kernels": [k, k], "strides": [draw(st.sampled_from([1, 2]))] * 2, "pads": [k // 2] * 4}
        return t, [f(*dims(1, 3, 2), 5, 6)], args
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    if t == "ONNXBinary":
        tail = shape[draw(st.integers(0, len(shape))) :]  # broadcast from the right, or a 0-d operand
        a, b = (f(*shape), f(*tail)) if draw(st.booleans()) else (f(*tail), f(*shape))
        return t, [a, b], {"fn": draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))}
    if t in ("ONNXMatMul", "ONNXMatMulAdd"):
        m, k, n = dims(1, 9)
        lead = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
        a = f(*lead, m, k) if t == "ONNXMatMulAdd" or draw(st.booleans()) else f(k)
        b = f(k, n) if draw(st.booleans()) or t == "ONNXMatMulAdd" else f(*lead, k, n)
        if t == "ONNXMatMul":
            return t, [a, b], {}
        return t, [a, b, f(n)], {"activation": draw(st.sampled_from(["", "Relu"]))}
    if t in ("ONNXLSTM", "ONNXGRU"):
        return _recurrent_case(draw, t, f)
    if t == "ONNXEncoderLayer":
        heads = draw(st.integers(1, 2))
        e, ff = heads * draw(st.integers(1, 2)), draw(st.integers(1, 3))
        b, s = dims(1, 2, 2)
        shapes = [(b, s, e), (3 * e, e), (3 * e,), (e, e), (e,), (e,), (e,), (ff, e), (ff,), (e, ff), (e,), (e,), (e,)]
        ins = [f(*sh) for sh in shapes]
        ins[0].flags.writeable = draw(st.booleans())
        return t, ins, {"num_heads": heads, "batch_first": draw(st.booleans())}
    if t == "ONNXSoftmax":
        x = f(*shape)
        x.flags.writeable = draw(st.booleans())
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        return t, [x], {"axis": axis, "log": draw(st.booleans()), "legacy": draw(st.booleans())}
    if t == "ONNXLayerNorm":
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        inner = shape[axis % len(shape) :]
        ins = [f(*shape), f(*inner), *([f(*inner)] if draw(st.booleans()) else [])]
        return t, ins, {"axis": axis, "epsilon": draw(st.sampled_from([1e-5, 0.1]))}
    if t == "ONNXReduce":
        axes = sorted(set(draw(st.lists(st.integers(0, len(shape) - 1), max_size=len(shape)))))
        fn = draw(st.sampled_from(["mean", "sum", "max", "min"]))
        return t, [f(*shape)], {"fn": fn, "axes": axes, "keepdims": draw(st.booleans())}
    if t == "ONNXGlobalPool":
        return t, [f(*dims(1, 3, 4))], {"mode": draw(st.sampled_from(["avg", "max"]))}
    if t == "ONNXClip":
        bounds = draw(st.sampled_from([{}, {"min": 0.0}, {"max": 1.0}, {"min": -1.0, "max": 6.0}]))
        return t, [f(*shape)], bounds
    if t == "ONNXConcat":
        axis = draw(st.integers(0, len(shape) - 1))
        xs = [f(*(d if i != axis else draw(st.integers(1, 3)) for i, d in enumerate(shape))) for _ in range(3)]
        return t, xs[: draw(st.integers(1, 3))], {"axis": axis}
    if t == "ONNXIdentity":
        return t, [f(*shape)], {}
    if t == "ONNXTranspose":
        return (
            t,
            [f(*shape)],
            {"perm": draw(st.sampled_from([[], list(np.random.default_rng(len(shape)).permutation(len(shape)))]))},
        )
    if t in ("ONNXReshape", "ONNXFlatten", "ONNXSqueeze", "ONNXUnsqueeze", "ONNXLayout", "ONNXGather"):
        x = f(2, 3, 1, 4)
        if draw(st.booleans()):
            x = x.transpose(3, 1, 2, 0).copy().transpose(3, 1, 2, 0)  # the same shape, other strides
        steps = {
            "ONNXReshape": {"shape": [0, -1, 3]},
            "ONNXFlatten": {"axis": draw(st.integers(0, 4))},
            "ONNXSqueeze": {"axes": [draw(st.sampled_from([2, 0]))]},  # axis 0 is not 1: an error
            "ONNXUnsqueeze": {"axes": [0, 5]},
            "ONNXGather": {"axis": 2, "index": draw(st.integers(-4, 3))},
        }
        if t == "ONNXLayout":
            import json

            chain = [
                {"op": "ONNXTranspose", "perm": [0, 2, 1, 3]},
                {"op": "ONNXReshape", "shape": [2, 12]},
                {"op": "ONNXGather", "axis": 0, "index": 1},
            ]
            return t, [x], {"steps": [json.dumps(s) for s in chain[: draw(st.integers(1, 3))]]}
        return t, [x], steps[t]
    raise AssertionError(f"no inputs for {t}: add a case")


def _recurrent_case(draw, t, f):
    """An LSTM/GRU as exporters write it (weights in torch's gate order, forward, sequence first),
    or off that form in one respect (the general kernel then runs)."""
    gates, hidden = (4 if t == "ONNXLSTM" else 3), draw(st.integers(1, 3))
    seq, batch, size = (draw(st.integers(1, 3)) for _ in range(3))
    x = f(seq, batch, size)
    if draw(st.booleans()):  # a [batch, seq, in] array seen sequence first, as the exporters' Transpose gives
        x = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)
    x.flags.writeable = draw(st.booleans()) or not x.flags.writeable
    ins = [x, f(1, gates * hidden, size), f(1, gates * hidden, hidden)]
    if draw(st.booleans()):
        ins.append(f(1, 2 * gates * hidden))
        if draw(st.booleans()):  # an initial state: the general kernel
            ins += [f(1, batch, hidden)] * (2 if t == "ONNXLSTM" else 1)
    n_out = 3 if t == "ONNXLSTM" else 2
    produce = [int(p) for p in draw(st.lists(st.booleans(), min_size=n_out, max_size=n_out))]
    args = {"hidden_size": hidden, "gate_order": draw(st.sampled_from(["torch", "torch", "onnx"]))}
    args["produce"] = produce if any(produce) else [1, *produce[1:]]
    args["direction"] = draw(st.sampled_from(["forward", "forward", "reverse"]))
    if t == "ONNXGRU":
        args["linear_before_reset"] = draw(st.sampled_from([1, 1, 0]))
    return t, ins, args


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


@settings(max_examples=200, deadline=None)
@given(op_cases())
def test_each_fast_kernel_equals_its_general_kernel(case):
    t, inputs, args = case
    names = [f"i{k}" for k in range(len(inputs))]
    ws = an.Workspace()
    for name, x in zip(names, inputs):
        ws.feed(name, x)
    net = an.Net("c", type="straight")
    getattr(net, t)(names, [f"o{k}" for k in range(sum(args.get("produce", [1])))], **args)
    op = ws.create_net(net).operators[0]
    try:
        fast = op.schema.specialize(op.ctx, *inputs)
    except Exception:  # noqa: BLE001 - the specializer takes it as None: the general kernel runs
        fast = None
    if fast is None:
        return
    general, g_inputs = _call(op.fn, op, inputs)
    got, f_inputs = _call(fast, op, inputs)
    if isinstance(got, Exception):  # allowed when nothing was written: the executor goes on with the general kernel
        assert _bits(f_inputs) == _bits(inputs)
        return
    assert not isinstance(general, Exception), f"fast kernel returned where the general one raised {general!r}"
    assert _bits(got) == _bits(general)
    assert _bits(f_inputs) == _bits(g_inputs)


def test_the_cases_cover_every_specialized_onnx_op():
    assert set(SPECIALIZED) == {  # a new specialize needs a case in op_cases
        "ONNXBinary",
        "ONNXClip",
        "ONNXConcat",
        "ONNXConv",
        "ONNXEncoderLayer",
        "ONNXFlatten",
        "ONNXGather",
        "ONNXGlobalPool",
        "ONNXIdentity",
        "ONNXLayerNorm",
        "ONNXLayout",
        "ONNXMatMul",
        "ONNXMatMulAdd",
        "ONNXMaxPool",
        "ONNXReduce",
        "ONNXReshape",
        "ONNXSoftmax",
        "ONNXSqueeze",
        "ONNXTranspose",
        "ONNXUnsqueeze",
    } | set(GENERAL)


GENERAL = ("ONNXLSTM", "ONNXGRU")  # in ONNX's gate order, specialized as their general kernel


@pytest.mark.parametrize("t", GENERAL)
def test_recurrent_ops_specialize_to_their_general_kernel(t):
    x, w, r = np.ones((2, 1, 3), np.float32), np.ones((1, 8, 3), np.float32), np.ones((1, 8, 2), np.float32)
    if t == "ONNXGRU":
        w, r = w[:, :6], r[:, :6]
    ws = an.Workspace()
    for name, v in zip("xwr", (x, w, r)):
        ws.feed(name, v)
    net = an.Net("c", type="straight")
    getattr(net, t)(["x", "w", "r"], ["y"], hidden_size=2, produce=[1, 0] if t == "ONNXGRU" else [1, 0, 0])
    op = ws.create_net(net).operators[0]
    assert op.schema.specialize(op.ctx, x, w, r) is op.schema.fn


@pytest.mark.parametrize("t", GENERAL)
def test_a_recurrent_op_keeps_its_weights_views_and_sees_in_place_writes(t):
    """Runs of a straight net with the same weight arrays reuse their torch views; a write into
    the weights between runs is seen, as the general kernel sees it."""
    g = np.random.default_rng(0)
    gates, hidden = (4 if t == "ONNXLSTM" else 3), 3
    x = g.standard_normal((5, 2, 4), dtype=np.float32)
    w, r = (
        g.standard_normal((1, gates * hidden, 4), dtype=np.float32),
        g.standard_normal((1, gates * hidden, hidden), dtype=np.float32),
    )
    b = g.standard_normal((1, 2 * gates * hidden), dtype=np.float32)
    ws = an.Workspace()
    for name, v in zip("xwrb", (x, w, r, b)):
        ws.feed(name, v)
    net = an.Net("c", type="straight")
    extra = {"linear_before_reset": 1} if t == "ONNXGRU" else {}
    getattr(net, t)(["x", "w", "r", "b"], ["y"], hidden_size=hidden, gate_order="torch", produce=[1], **extra)
    created = ws.create_net(net)
    op = created.operators[0]
    fast = op.schema.specialize(op.ctx, x, w, r, b)
    assert fast is not op.schema.fn
    for _ in range(3):
        ws.feed("w", w)
        created.run()
        np.testing.assert_array_equal(ws.fetch("y"), op.fn(op.ctx, x, w, r, b))
        np.testing.assert_array_equal(fast(op.ctx, x, w, r, b), op.fn(op.ctx, x, w, r, b))
        w *= 0.5  # in place: the same array, new values
