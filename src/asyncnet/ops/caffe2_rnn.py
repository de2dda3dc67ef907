"""Caffe2's LSTMUnit and LSTMUnitGradient: one step of an LSTM on precomputed gates, aware of
each sequence's length (caffe2/operators/lstm_unit_op.h); GRUUnit and GRUUnitGradient, the
same for a GRU (gru_unit_op.h: ``H = u * H_prev + (1 - u) * tanh(o)``, gates reset, update,
output, the reset gate applied by the step net before); ElementwiseLinear and its gradient
(``Y = X * a + b`` column-wise), the multiplicative-integration LSTM's op; SequenceMask
('sequence' mode, attention's mask of the encoder positions past each sequence's end).

Inputs: H_prev [1, N, D], C_prev [1, N, D], gates [1, N, 4D] (Caffe2's order: i, f, o, g),
seq_lengths [N] int32 (absent when ``sequence_lengths=0``) and the timestep t (int32, 1 element).
For a sequence with ``t < seq_lengths[n]``::

    i, f, o = sigmoid(gates_i), sigmoid(gates_f + forget_bias), sigmoid(gates_o); g = tanh(gates_g)
    C = f * C_prev + i * g;   H = o * tanh(C)

and past its end the state is carried over (``drop_states=1``: zeroed). The gradient follows
Caffe2's: dgates and dC_prev through the cell; dH_prev is dH carried over past a sequence's end
and 0 inside it (H_prev reaches the gates through the step net's FC, whose gradient adds it).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> for k, v in {"h": np.zeros((1, 2, 1)), "c": np.ones((1, 2, 1)), "x": np.zeros((1, 2, 4)),
    ...              "len": np.array([1, 0], np.int32), "t": np.array([0], np.int32)}.items():
    ...     ws.feed(k, v.astype(np.float32) if v.dtype == np.float64 else v)
    >>> net = an.Net("step"); _ = net.LSTMUnit(["h", "c", "x", "len", "t"], ["h1", "c1"])
    >>> ws.run_net_once(net)
    >>> ws.fetch("c1").ravel()   # sequence 0: 0.5 * 1 + 0.5 * 0; sequence 1 has ended: carried over
    array([0.5, 1. ], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, float_array

__all__ = [
    "elementwise_linear",
    "elementwise_linear_gradient",
    "gru_unit",
    "gru_unit_gradient",
    "lstm_unit",
    "lstm_unit_gradient",
    "sequence_mask",
]

_ARGS = [
    Arg("forget_bias", float, 0.0, "added to the forget gate's input"),
    Arg("sequence_lengths", bool, True, "0: no seq_lengths input (every sequence is valid at every step)"),
    Arg("drop_states", bool, False, "past a sequence's end, zero the state instead of carrying it over"),
]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _state(ctx: Any, arrays: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(H_prev, C_prev, gates, valid [N, 1] bool, number of inputs read) with Caffe2's shape checks."""
    want = (5 if ctx.args["sequence_lengths"] else 4) + (4 if ctx.op.type.endswith("Gradient") else 0)
    if len(arrays) != want:
        raise ValueError(
            f"expected {want} inputs with sequence_lengths={int(ctx.args['sequence_lengths'])}, got {len(arrays)}"
        )
    h, c, x = (np.asarray(float_array(ctx, a, i)) for i, a in enumerate(arrays[:3]))
    if c.ndim != 3 or c.shape[0] != 1 or h.shape != c.shape:
        raise ValueError(
            f"expected H_prev and C_prev of one shape [1, N, D], got {tuple(h.shape)} and {tuple(c.shape)}"
        )
    n, d = c.shape[1], c.shape[2]
    if x.shape != (1, n, 4 * d):
        raise ValueError(f"expected gates of shape [1, N, 4D] = {(1, n, 4 * d)}, got {tuple(x.shape)}")
    k = 3
    lengths = None
    if ctx.args["sequence_lengths"]:
        lengths = np.asarray(array(ctx, arrays[3], 3))
        if lengths.size != n or lengths.dtype.kind not in "iu":
            raise ValueError(
                f"expected {n} integer sequence lengths in input 3, got {lengths.size} of dtype {lengths.dtype}"
            )
        k = 4
    step = np.asarray(array(ctx, arrays[k], k))
    if step.size != 1 or step.dtype.kind not in "iu":
        raise ValueError(
            f"expected an integer timestep (1 element) in input {k} {ctx.op.inputs[k]!r}, got {step.dtype} {step.shape}"
        )
    t = int(step.reshape(-1)[0])
    valid = np.ones((n, 1), bool) if lengths is None else (t < lengths.reshape(n, 1))
    return h[0], c[0], x[0], valid, k + 1


def _gates(x: np.ndarray, d: int, forget_bias: float) -> tuple[np.ndarray, ...]:
    act = _activate(x, d, forget_bias)
    return act[:, :d], act[:, d : 2 * d], act[:, 2 * d : 3 * d], act[:, 3 * d :]


def _activate(x: np.ndarray, d: int, forget_bias: float) -> np.ndarray:
    """[N, 4D] gates activated in one array: sigmoid(i, f + forget_bias, o), tanh(g) (the ufuncs
    of :func:`_sigmoid` and ``np.tanh``, written in place: no temporaries)."""
    act = np.empty_like(x)
    s = act[:, : 3 * d]
    np.negative(x[:, : 3 * d], out=s)
    if forget_bias:
        s[:, d : 2 * d] -= x.dtype.type(forget_bias)
    np.exp(s, out=s)
    s += x.dtype.type(1)  # a scalar of x's dtype: ~3x cheaper than a Python float per ufunc call
    np.reciprocal(s, out=s)  # 1 / (1 + e^-z), IEEE division as np.divide
    np.tanh(x[:, 3 * d :], out=act[:, 3 * d :])
    return act


def _lstm_step(
    h_prev: np.ndarray, c_prev: np.ndarray, x: np.ndarray, valid: np.ndarray, forget_bias: float, drop: bool
) -> tuple[np.ndarray, np.ndarray]:
    i, f, o, g = _gates(x, c_prev.shape[1], forget_bias)
    c = f * c_prev + i * g
    h = o * np.tanh(c)
    if not valid.all():
        keep_h, keep_c = (0, 0) if drop else (h_prev, c_prev)
        h = np.where(valid, h, keep_h)
        c = np.where(valid, c, keep_c)
    return h.astype(x.dtype, copy=False)[None], c.astype(x.dtype, copy=False)[None]


def _fast_valid(arrays: tuple[Any, ...], seq_lengths: bool, n: int) -> np.ndarray | None:
    """valid [N, 1] from the lengths and the timestep (None: every sequence valid), no checks."""
    if not seq_lengths:
        return None
    t = int(arrays[4].reshape(-1)[0])
    return t < arrays[3].reshape(n, 1)


def _plain_inputs(ctx: Any, arrays: tuple[Any, ...]) -> bool:
    """Numpy float32/float64 H, C and gates of one dtype that pass the general kernel's checks."""
    if not all(type(a) is np.ndarray for a in arrays):
        return False
    dt = arrays[0].dtype
    if dt not in (np.float32, np.float64) or any(a.dtype != dt for a in arrays[:3]):
        return False
    try:
        _state(ctx, arrays)
    except (TypeError, ValueError):
        return False
    return True


def _specialize_lstm_unit(ctx: Any, *arrays: Any) -> Any:
    """Numpy float inputs of checked shapes: the step with no checks (same math, same bits)."""
    if ctx.op.type.endswith("Gradient") or not _plain_inputs(ctx, arrays):
        return None
    fb, drop, seq = ctx.args["forget_bias"], ctx.args["drop_states"], ctx.args["sequence_lengths"]
    n = arrays[1].shape[1]
    ones = np.ones((n, 1), bool)

    def lstm_unit_plain(ctx: Any, *a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        valid = _fast_valid(a, seq, n)
        return _lstm_step(a[0][0], a[1][0], a[2][0], ones if valid is None else valid, fb, drop)

    return lstm_unit_plain


@register_op(
    "LSTMUnit",
    inputs=(4, 5),
    outputs=2,
    args=_ARGS,
    differentiable=True,
    inputs_doc=(
        "hidden_t_prev [1, N, D]",
        "cell_t_prev [1, N, D]",
        "gates [1, N, 4D] (i, f, o, g)",
        "seq_lengths [N] int32 (absent with sequence_lengths=0)",
        "timestep (int32, 1 element)",
    ),
    outputs_doc=("hidden_t [1, N, D]", "cell_t [1, N, D]"),
    specialize=_specialize_lstm_unit,
    doc="Caffe2's LSTMUnit: one LSTM step on precomputed gates (order i, f, o, g); sequences past their "
    "length carry their state over (drop_states=1: zero it).",
)
def lstm_unit(ctx: Any, *arrays: Any) -> tuple[np.ndarray, np.ndarray]:
    h_prev, c_prev, x, valid, _ = _state(ctx, arrays)
    return _lstm_step(h_prev, c_prev, x, valid, ctx.args["forget_bias"], ctx.args["drop_states"])


def _specialize_lstm_unit_gradient(ctx: Any, *arrays: Any) -> Any:
    """Numpy float inputs of checked shapes: the gradient with no checks (same math, same bits)."""
    if not _plain_inputs(ctx, arrays):
        return None
    k = 5 if ctx.args["sequence_lengths"] else 4
    if len(arrays) != k + 4 or any(
        arrays[j].dtype != arrays[0].dtype or arrays[j].shape != arrays[1].shape for j in (k + 1, k + 2, k + 3)
    ):
        return None
    fb, drop, seq = ctx.args["forget_bias"], ctx.args["drop_states"], ctx.args["sequence_lengths"]
    n = arrays[1].shape[1]
    ones = np.ones((n, 1), bool)

    def lstm_unit_gradient_plain(ctx: Any, *a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        valid = _fast_valid(a, seq, n)
        valid = ones if valid is None else valid
        return _lstm_step_grad(a[1][0], a[2][0], valid, a[k + 1][0], a[k + 2][0], a[k + 3][0], fb, drop)

    return lstm_unit_gradient_plain


@register_op(
    "LSTMUnitGradient",
    inputs=(8, 9),
    outputs=3,
    args=_ARGS,
    inputs_doc=(
        "hidden_t_prev",
        "cell_t_prev",
        "gates",
        "seq_lengths (absent with sequence_lengths=0)",
        "timestep",
        "hidden_t",
        "cell_t",
        "hidden_t_grad",
        "cell_t_grad",
    ),
    outputs_doc=("hidden_t_prev_grad", "cell_t_prev_grad", "gates_grad"),
    specialize=_specialize_lstm_unit_gradient,
    doc="Gradient of LSTMUnit (Caffe2's): dgates and dC_prev through the cell; dH_prev carries dH past a "
    "sequence's end and is 0 inside it.",
)
def lstm_unit_gradient(ctx: Any, *arrays: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _, c_prev, x, valid, k = _state(ctx, arrays)
    c, dh, dc = (np.asarray(float_array(ctx, arrays[j], j))[0] for j in (k + 1, k + 2, k + 3))
    if not (c.shape == dh.shape == dc.shape == c_prev.shape):
        raise ValueError(
            f"expected cell_t, hidden_t_grad and cell_t_grad of shape {(1, *c_prev.shape)}, got "
            f"{[tuple(np.shape(arrays[j])) for j in (k + 1, k + 2, k + 3)]}"
        )
    return _lstm_step_grad(c_prev, x, valid, c, dh, dc, ctx.args["forget_bias"], ctx.args["drop_states"])


def _lstm_step_grad(
    c_prev: np.ndarray,
    x: np.ndarray,
    valid: np.ndarray,
    c: np.ndarray,
    dh: np.ndarray,
    dc: np.ndarray,
    forget_bias: float,
    drop: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = c_prev.shape[1]
    act = _activate(x, d, forget_bias)
    i, f, o, g = act[:, :d], act[:, d : 2 * d], act[:, 2 * d : 3 * d], act[:, 3 * d :]
    one = x.dtype.type(1)
    tanh_c = np.tanh(c)
    dcell = dh * o
    dcell *= one - tanh_c * tanh_c
    dcell += dc
    # dgates: what each gate multiplies times its activation's derivative, all gates at once
    dx = np.empty_like(x)
    np.multiply(dcell, g, out=dx[:, :d])
    np.multiply(dcell, c_prev, out=dx[:, d : 2 * d])
    np.multiply(dh, tanh_c, out=dx[:, 2 * d : 3 * d])
    np.multiply(dcell, i, out=dx[:, 3 * d :])
    deriv = np.subtract(one, act)
    deriv[:, : 3 * d] *= act[:, : 3 * d]  # sigmoid: s (1 - s)
    np.multiply(g, g, out=deriv[:, 3 * d :])
    np.subtract(one, deriv[:, 3 * d :], out=deriv[:, 3 * d :])  # tanh: 1 - g^2
    dx *= deriv
    if valid.all():
        dh_prev, dc_prev = np.zeros_like(dh), dcell * f
    else:
        carry_h, carry_c = (np.zeros_like(dh), np.zeros_like(dc)) if drop else (dh, dc)
        dh_prev = np.where(valid, 0, carry_h)
        dc_prev = np.where(valid, dcell * f, carry_c)
        dx = np.where(valid, dx, 0)
    return tuple(a.astype(x.dtype, copy=False)[None] for a in (dh_prev, dc_prev, dx))  # type: ignore[return-value]


@register_gradient("LSTMUnit")
def _lstm_unit_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    """Caffe2's GetLSTMUnitGradient; an output without a gradient gets zeros (a ConstantFill like it)."""
    ops: list[OperatorDef] = []
    grads = []
    for j, go in enumerate(gout[:2]):
        if go is None:
            go = f"#zero_{j}"
            ops.append(OperatorDef("ConstantFill", [op.outputs[j]], [go], {"value": 0.0}))
        grads.append(go)
    args = {k: op.args[k] for k in ("forget_bias", "sequence_lengths", "drop_states") if k in op.args}
    ops.append(
        OperatorDef(
            "LSTMUnitGradient", [*op.inputs, *op.outputs[:2], *grads], ["#dh_prev", "#dc_prev", "#dgates"], args
        )
    )
    return ops, ["#dh_prev", "#dc_prev", "#dgates", *([None] * (len(op.inputs) - 3))]


_GRU_ARGS = [
    Arg("drop_states", bool, False, "past a sequence's end, zero the state instead of carrying it over"),
    Arg("sequence_lengths", bool, True, "0: no seq_lengths input (every sequence is valid at every step)"),
    Arg("forget_bias", float, 0.0, "accepted and unused, as in Caffe2"),
]


def _gru_state(ctx: Any, arrays: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(H_prev [N, D], gates [N, 3D], valid [N, 1] bool, number of inputs read) with Caffe2's checks."""
    h, x = (np.asarray(float_array(ctx, a, i)) for i, a in enumerate(arrays[:2]))
    if h.ndim != 3 or h.shape[0] != 1:
        raise ValueError(f"expected hidden_t_prev of shape [1, N, D], got {tuple(h.shape)}")
    n, d = h.shape[1], h.shape[2]
    if x.shape != (1, n, 3 * d):
        raise ValueError(f"expected gates of shape [1, N, 3D] = {(1, n, 3 * d)}, got {tuple(x.shape)}")
    k, lengths = 2, None
    if ctx.args["sequence_lengths"]:
        lengths = np.asarray(array(ctx, arrays[2], 2))
        if lengths.size != n or lengths.dtype.kind not in "iu":
            raise ValueError(
                f"expected {n} integer sequence lengths in input 2, got {lengths.size} of dtype {lengths.dtype}"
            )
        k = 3
    step = np.asarray(array(ctx, arrays[k], k))
    if step.size != 1 or step.dtype.kind not in "iu":
        raise ValueError(f"expected an integer timestep (1 element) in input {k}, got {step.dtype} {step.shape}")
    t = int(step.reshape(-1)[0])
    valid = np.ones((n, 1), bool) if lengths is None else (t < lengths.reshape(n, 1))
    return h[0], x[0], valid, k + 1


def _gru_gates(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    return _sigmoid(x[:, d : 2 * d]), np.tanh(x[:, 2 * d :])


@register_op(
    "GRUUnit",
    inputs=(3, 4),
    outputs=1,
    args=_GRU_ARGS,
    differentiable=True,
    inputs_doc=(
        "hidden_t_prev [1, N, D]",
        "gates [1, N, 3D] (reset, update, output; the reset part is not read)",
        "seq_lengths [N] int32 (absent with sequence_lengths=0)",
        "timestep (int32, 1 element)",
    ),
    outputs_doc=("hidden_t [1, N, D]",),
    doc="Caffe2's GRUUnit: H = u * H_prev + (1 - u) * tanh(o), u = sigmoid(update gate); sequences past their "
    "length carry their state over (drop_states=1: zero it).",
)
def gru_unit(ctx: Any, *arrays: Any) -> np.ndarray:
    h_prev, x, valid, k = _gru_state(ctx, arrays)
    if len(arrays) != k:
        raise ValueError(f"expected {k} inputs with sequence_lengths={int(ctx.args['sequence_lengths'])}")
    u, o = _gru_gates(x, h_prev.shape[1])
    h = u * h_prev + (1 - u) * o
    keep = 0 if ctx.args["drop_states"] else h_prev
    return np.where(valid, h, keep).astype(x.dtype, copy=False)[None]


@register_op(
    "GRUUnitGradient",
    inputs=(5, 6),
    outputs=2,
    args=_GRU_ARGS,
    inputs_doc=(
        "hidden_t_prev",
        "gates",
        "seq_lengths (absent with sequence_lengths=0)",
        "timestep",
        "hidden_t",
        "hidden_t_grad",
    ),  # fmt: skip
    outputs_doc=("hidden_t_prev_grad", "gates_grad (0 for the reset gate)"),
    doc="Gradient of GRUUnit (Caffe2's): the reset gate's part is 0 (its effect reaches the output gate "
    "through the step net's ops).",
)
def gru_unit_gradient(ctx: Any, *arrays: Any) -> tuple[np.ndarray, np.ndarray]:
    h_prev, x, valid, k = _gru_state(ctx, arrays)
    dh = np.asarray(float_array(ctx, arrays[k + 1], k + 1))[0]
    if dh.shape != h_prev.shape:
        raise ValueError(f"expected hidden_t_grad of shape {(1, *h_prev.shape)}, got {(1, *dh.shape)}")
    u, o = _gru_gates(x, h_prev.shape[1])
    dx = np.concatenate([np.zeros_like(dh), dh * (h_prev - o) * u * (1 - u), dh * (1 - u) * (1 - o * o)], axis=1)
    carry = np.zeros_like(dh) if ctx.args["drop_states"] else dh
    dh_prev = np.where(valid, dh * u, carry).astype(x.dtype, copy=False)
    dx = np.where(valid, dx, 0).astype(x.dtype, copy=False)
    return dh_prev[None], dx[None]


@register_gradient("GRUUnit")
def _gru_unit_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    """Caffe2's GetGRUUnitGradient: all inputs, the output and its gradient."""
    args = {k: op.args[k] for k in ("drop_states", "sequence_lengths", "forget_bias") if k in op.args}
    gop = OperatorDef("GRUUnitGradient", [*op.inputs, op.outputs[0], gout[0]], ["#dh_prev", "#dgates"], args)
    return [gop], ["#dh_prev", "#dgates", *([None] * (len(op.inputs) - 2))]


def _elementwise_linear_shapes(ctx: Any, x: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    axis = ctx.args["axis"]
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise ValueError(f"axis {ctx.args['axis']} is out of range for X of shape {x.shape}")
    rows, cols = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    if a.shape != (cols,) or b.shape != (cols,):
        raise ValueError(
            f"expected a and b of shape ({cols},) for X {x.shape} at axis {axis}, got {a.shape}, {b.shape}"
        )
    return rows, cols


@register_op(
    "ElementwiseLinear",
    inputs=3,
    outputs=1,
    args=[Arg("axis", int, 1, "X is seen as [prod(dims before axis), prod(the rest)]")],
    differentiable=True,
    inputs_doc=("X", "a [D]", "b [D]"),
    outputs_doc=("Y = X * a + b, column-wise",),
    doc="Caffe2's ElementwiseLinear: Y[n, d] = X[n, d] * a[d] + b[d] on X flattened at axis.",
)
def elementwise_linear(ctx: Any, x: Any, a: Any, b: Any) -> np.ndarray:
    x, a, b = (np.asarray(float_array(ctx, v, i)) for i, v in enumerate((x, a, b)))
    rows, cols = _elementwise_linear_shapes(ctx, x, a, b)
    return (x.reshape(rows, cols) * a + b).reshape(x.shape).astype(x.dtype, copy=False)


@register_op(
    "ElementwiseLinearGradient",
    inputs=3,
    outputs=3,
    args=[Arg("axis", int, 1, "as the forward op's")],
    inputs_doc=("dY", "X", "a"),
    outputs_doc=("dX", "da", "db"),
    doc="Gradient of ElementwiseLinear: dX = dY * a, da = sum over rows of dY * X, db = sum over rows of dY.",
)
def elementwise_linear_gradient(ctx: Any, dy: Any, x: Any, a: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dy, x, a = (np.asarray(float_array(ctx, v, i)) for i, v in enumerate((dy, x, a)))
    rows, cols = _elementwise_linear_shapes(ctx, x, a, a)
    if dy.shape != x.shape:
        raise ValueError(f"expected dY of X's shape {x.shape}, got {dy.shape}")
    d2, x2 = dy.reshape(rows, cols), x.reshape(rows, cols)
    return (d2 * a).reshape(x.shape), (d2 * x2).sum(axis=0).astype(a.dtype), d2.sum(axis=0).astype(a.dtype)


@register_gradient("ElementwiseLinear")
def _elementwise_linear_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    args = {"axis": op.args["axis"]} if "axis" in op.args else {}
    gop = OperatorDef("ElementwiseLinearGradient", [gout[0], op.inputs[0], op.inputs[1]], ["#dx", "#da", "#db"], args)
    return [gop], ["#dx", "#da", "#db"]


_MASK_MODES = ("sequence", "window", "upper", "lower", "upperdiag", "lowerdiag")


@register_op(
    "SequenceMask",
    inputs=(1, 2),
    outputs=1,
    args=[
        Arg("mode", str, Arg.REQUIRED, "sequence, window, upper, lower, upperdiag or lowerdiag", choices=_MASK_MODES),
        Arg("axis", int, 1, "X is seen as [prod(dims before axis), prod(the rest)]"),
        Arg("batch", int, -1, "dims up to this one form a batch the mask repeats over (-1: none)"),
        Arg("repeat_from_axis", int, None, "dims from this one on repeat the mask (default: none)"),
        Arg("radius", int, 10, "window mode: entries within radius of the center are kept"),
        Arg("fill_val", float, float("-inf"), "the value of masked entries"),
        Arg("grad", bool, False, "gradient mode: masked entries are 0"),
    ],
    differentiable=True,
    inputs_doc=("X", "sequence_lengths or window centers [rows] ints (sequence and window modes)"),
    outputs_doc=("X with the masked entries set to fill_val",),
    doc="Caffe2's SequenceMask: X seen as rows i and columns j (split at axis; optionally a leading "
    "batch and a repeated tail); 'sequence' masks j >= lengths[i], 'window' masks |j - centers[i]| > "
    "radius, 'upper'/'lower' mask j > i / j < i, 'upperdiag'/'lowerdiag' j >= i / j <= i; masked "
    "entries become fill_val (0 with grad=1).",
)
def sequence_mask(ctx: Any, x: Any, *lengths: Any) -> np.ndarray:
    x = np.asarray(float_array(ctx, x, 0))
    view = _mask_view(ctx, x.shape)
    rows, cols = view[1], view[2]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    mode = ctx.args["mode"]
    if mode in ("sequence", "window"):
        if len(lengths) != 1:
            raise ValueError(f"expected the lengths (or centers) input in {mode} mode")
        v = np.asarray(array(ctx, lengths[0], 1))
        if v.size != rows or v.dtype.kind not in "iu":
            raise ValueError(f"expected {rows} integer sequence lengths for X {x.shape}, got {v.shape}")
        v = v.reshape(rows, 1).astype(np.int64)
        r = ctx.args["radius"]
        masked = j >= v if mode == "sequence" else (j > v + r) | (j < v - r)
    else:
        masked = {"upper": j > i, "lower": j < i, "upperdiag": j >= i, "lowerdiag": j <= i}[mode]
    fill = x.dtype.type(0 if ctx.args["grad"] else ctx.args["fill_val"])
    out = np.where(masked[None, :, :, None], fill, x.reshape(view))
    return out.reshape(x.shape).astype(x.dtype, copy=False)


def _mask_view(ctx: Any, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """X as [batch, rows, cols, repeated tail]."""
    nd = len(shape)
    axis = ctx.args["axis"] + nd if ctx.args["axis"] < 0 else ctx.args["axis"]
    batch = ctx.args["batch"]
    batch = batch + nd if batch < -1 else batch
    rep = ctx.args["repeat_from_axis"]
    rep = nd if rep is None else (rep + nd if rep < 0 else rep)
    if not (-1 <= batch < axis <= rep <= nd):
        raise ValueError(f"expected batch < axis <= repeat_from_axis within X's {nd} dims, got {batch}, {axis}, {rep}")
    return (
        int(np.prod(shape[: batch + 1])),
        int(np.prod(shape[batch + 1 : axis])),
        int(np.prod(shape[axis:rep])),
        int(np.prod(shape[rep:])),
    )


@register_gradient("SequenceMask")
def _sequence_mask_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    """Caffe2's: the output gradient masked the same way, with zeros."""
    args = {**op.args, "grad": True}
    return [OperatorDef("SequenceMask", [gout[0], *op.inputs[1:]], ["#dx"], args)], ["#dx"] + [None] * (
        len(op.inputs) - 1
    )
