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
    raise AssertionError(f"no inputs for {t}: add a case")


def _call(fn, op, inputs):
    copies = [np.array(x, copy=True) for x in inputs]
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
    getattr(net, t)(names, ["o"], **args)
    op = ws.create_net(net).operators[0]
    fast = op.schema.specialize(op.ctx, *inputs)
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
    assert set(SPECIALIZED) == {"ONNXConv"}  # a new specialize needs a case in op_cases
