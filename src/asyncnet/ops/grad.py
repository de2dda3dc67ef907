"""Gradients of the math and nn operators: the gradient kernels and the makers that emit them.

Each forward op's gradient sits in one block below, with its math written out, in the order of
``math.py`` and ``nn.py``. A *gradient maker* (attached with :func:`register_gradient`) takes the
forward :class:`OperatorDef` and the names of its output gradients (``None`` where an output has
none) and returns ``(grad_ops, input_grads)``: the ops computing the input gradients and, per
input, the blob holding its gradient (``None`` when the input is not differentiable). Makers may
pick any names for the blobs they create (ours start with ``#``, so they cannot be mistaken for
forward blobs); :func:`asyncnet.autodiff.add_gradient_ops` renames every one of them.

    >>> from asyncnet.core.registry import get_schema
    >>> ops, grads = get_schema("Relu").gradient(OperatorDef("Relu", ["x"], ["y"]), ["y_grad"])
    >>> [(o.type, o.inputs, o.outputs) for o in ops], grads
    ([('ReluGradient', ['y', 'y_grad'], ['#dx'])], ['#dx'])

Every gradient kernel returns new arrays and never writes its inputs. Kernels run on numpy arrays
or torch tensors alike (:mod:`asyncnet.tensor.namespace`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet.core.bound import is_bound
from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.errors import NetDefinitionError
from asyncnet.ops._check import as_array, flatten_2d, float_array, same_dtype
from asyncnet.ops._half import to_half
from asyncnet.ops.math import CPU_CUDA, canonical_axis, legacy_axis, legacy_shape, matmul_operands
from asyncnet.ops.nn import _ZERO, _nd, fc_shapes, plain_fc, plain_fc_torch
from asyncnet.tensor import parallel
from asyncnet.tensor.namespace import is_torch, namespace

GradOut = list[str | None]
MakerResult = tuple[list[OperatorDef], list[str | None]]


def g(name: str) -> str:
    """The conventional gradient name of blob ``name`` (``"w"`` -> ``"w_grad"``)."""
    return f"{name}_grad"


def _op(op_type: str, inputs: list[str], outputs: list[str], **args: Any) -> OperatorDef:
    return OperatorDef(op_type, list(inputs), list(outputs), args)


def output_grad(op: OperatorDef, gout: GradOut) -> str:
    """The gradient of a one-output op (makers run only when some output has a gradient)."""
    if gout[0] is None:
        raise NetDefinitionError(f"{op.type} gradient called without an output gradient")
    return gout[0]


# -- helper: undo numpy broadcasting --------------------------------------------------------
def reduce_to_shape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``x`` over the dims numpy broadcasting added or stretched to reach ``x.shape``."""
    lead = x.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"cannot reduce shape {x.shape} to the larger rank shape {shape}")
    y = x.sum(axis=tuple(range(lead))) if lead else x
    y = as_array(y)  # a sum over every axis is a numpy scalar
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and y.shape[i] != 1)
    y = y.sum(axis=axes, keepdims=True) if axes else y
    if y.shape != tuple(shape):
        raise ValueError(f"shape {x.shape} is not a broadcast of {shape}")
    return y


@register_op(
    "SumReduceLike",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    args=[
        Arg("scale", float, 1.0, "multiplier applied after the reduction"),
        Arg(
            "axis",
            int,
            None,
            "Caffe2's rule: Like's dims are a contiguous run of X's starting here (-1: X's last dims); "
            "absent: numpy broadcasting's rule",
        ),
        Arg("axis_str", str, "", "the axis as a letter of `order`"),
        Arg("order", str, "NCHW", "dim letters for axis_str"),
        Arg(
            "broadcast",
            bool,
            True,
            "taken and not read, as Caffe2's SumReduceLike does (its tests pass "
            "broadcast=1): the op always reduces a broadcast",
        ),
    ],
    inputs_doc=("X (a broadcast shape)", "Like"),
    outputs_doc=("Y, shaped like Like",),
    doc="Y = scale * X summed over the dims broadcasting added to Like's shape (gradient of broadcasting).",
)
def sum_reduce_like(ctx: Any, x: Any, like: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x, like)
    shape = tuple(like.shape if hasattr(like, "shape") else np.shape(like))
    if ctx.args["axis"] is not None or ctx.args["axis_str"]:
        axis = legacy_axis({**ctx.args, "axis": -1 if ctx.args["axis"] is None else ctx.args["axis"]})
        y = reduce_to_shape(x, legacy_shape(x.shape, shape, axis)).reshape(shape)
    else:
        y = reduce_to_shape(x, shape)
    s = ctx.args["scale"]
    return as_array(y * s) if s != 1.0 else (xp.copy(y) if y is x else as_array(y))


def _legacy(op: OperatorDef) -> tuple[dict[str, Any], dict[str, Any]]:
    """With Caffe2's broadcast=1: the args of an op applying B to dC, and of reducing dC to B."""
    if not op.args.get("broadcast"):
        return {}, {}
    where = {k: op.args[k] for k in ("axis", "axis_str", "order") if k in op.args}
    return {"broadcast": True, **where}, {"axis": -1, **where}


# -- Add, Sub: C = A + B, C = A - B;  dA = reduce(dC), dB = +-reduce(dC) ---------------------
@register_gradient("Add")
def _add_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    a, b = op.inputs
    dc = output_grad(op, gout)
    to_b = _legacy(op)[1]
    return [_op("SumReduceLike", [dc, a], ["#da"]), _op("SumReduceLike", [dc, b], ["#db"], **to_b)], ["#da", "#db"]


@register_gradient("Sub")
def _sub_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    a, b = op.inputs
    dc = output_grad(op, gout)
    to_b = _legacy(op)[1]
    return (
        [_op("SumReduceLike", [dc, a], ["#da"]), _op("SumReduceLike", [dc, b], ["#db"], scale=-1.0, **to_b)],
        ["#da", "#db"],
    )


# -- Mul: C = A * B;  dA = reduce(dC * B), dB = reduce(dC * A) -------------------------------
def _refuse_overwritten(op: OperatorDef, needed: Sequence[str]) -> None:
    """Raise when the op wrote its output over an input its gradient reads (Caffe2's makers refuse
    it too): the backward pass would read the output in the input's place."""
    if op.outputs[0] in needed:
        raise ValueError(
            f"cannot differentiate {op.type}{list(op.inputs)}->{list(op.outputs)} in place: its gradient "
            f"reads the input {op.outputs[0]!r}, which the output overwrote; write the output to another blob"
        )


@register_gradient("Mul")
def _mul_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    a, b = op.inputs
    _refuse_overwritten(op, (a, b))
    dc = output_grad(op, gout)
    with_b, to_b = _legacy(op)
    ops = [
        _op("Mul", [dc, b], ["#da_full"], **with_b),
        _op("SumReduceLike", ["#da_full", a], ["#da"]),
        _op("Mul", [dc, a], ["#db_full"]),
        _op("SumReduceLike", ["#db_full", b], ["#db"], **to_b),
    ]
    return ops, ["#da", "#db"]


# -- Div: C = A / B;  dA = reduce(dC / B), dB = -reduce(dC * C / B) --------------------------
@register_gradient("Div")
def _div_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    a, b = op.inputs
    c = op.outputs[0]
    _refuse_overwritten(op, (b,))  # A in place is fine: dB reads C and B
    dc = output_grad(op, gout)
    with_b, to_b = _legacy(op)
    ops = [
        _op("Div", [dc, b], ["#da_full"], **with_b),
        _op("SumReduceLike", ["#da_full", a], ["#da"]),
        _op("Mul", ["#da_full", c], ["#db_full"]),
        _op("SumReduceLike", ["#db_full", b], ["#db"], scale=-1.0, **to_b),
    ]
    return ops, ["#da", "#db"]


# -- Sum: Y = X0 + X1 + ...;  dXi = dY -------------------------------------------------------
@register_gradient("Sum")
def _sum_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    dy = output_grad(op, gout)
    names = [f"#d{i}" for i in range(len(op.inputs))]
    return [_op("Copy", [dy], [n]) for n in names], list(names)


# -- Scale: Y = s X;  dX = s dY --------------------------------------------------------------
@register_gradient("Scale")
def _scale_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    dy = output_grad(op, gout)
    return [_op("Scale", [dy], ["#dx"], scale=op.args.get("scale", 1.0))], ["#dx"]


# -- Copy: Y = X;  dX = dY -------------------------------------------------------------------
@register_gradient("Copy")
def _copy_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [_op("Copy", [output_grad(op, gout)], ["#dx"])], ["#dx"]


# -- MatMul: C = op(A2) op(B2), A2 and B2 the 2-D views of A and B;  dA2, dB2 as below, reshaped back
@register_op(
    "MatMulGradient",
    inputs=3,
    outputs=2,
    devices=CPU_CUDA,
    args=[Arg("trans_a", bool, False), Arg("trans_b", bool, False), Arg("axis_a", int, 1), Arg("axis_b", int, 1)],
    inputs_doc=("A", "B", "dC"),
    outputs_doc=("dA, shaped like A", "dB, shaped like B"),
    doc="Gradient of MatMul (the forward op's args): the 2-D gradients, reshaped to A's and B's shapes.",
)
def matmul_gradient(ctx: Any, a: Any, b: Any, dc: Any) -> tuple[np.ndarray, np.ndarray]:
    a2, b2 = matmul_operands(ctx, a, b)  # op(A2), op(B2)
    dc = float_array(ctx, dc, 2)
    if math.prod(dc.shape) != a2.shape[0] * b2.shape[1]:
        raise ValueError(
            f"expected dC {ctx.op.inputs[2]!r} of {a2.shape[0]} x {b2.shape[1]} elements (the MatMul output), "
            f"got shape {tuple(dc.shape)}"
        )
    dc = dc.reshape(a2.shape[0], b2.shape[1])
    d_opa, d_opb = dc @ b2.T, a2.T @ dc
    da = d_opa.T if ctx.args["trans_a"] else d_opa
    db = d_opb.T if ctx.args["trans_b"] else d_opb
    return da.reshape(a.shape), db.reshape(b.shape)


@register_gradient("MatMul")
def _matmul_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    a, b = op.inputs
    return [_op("MatMulGradient", [a, b, output_grad(op, gout)], ["#da", "#db"], **op.args)], ["#da", "#db"]


# -- BatchMatMul: Caffe2's GetBatchMatMulGradient (BatchMatMuls of dC with the other operand) --
@register_gradient("BatchMatMul")
def _batch_matmul_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    if op.args.get("broadcast"):
        raise NetDefinitionError(
            f"BatchMatMul {op.inputs} -> {op.outputs}: no gradient with broadcast=1 "
            "(as in Caffe2); expected broadcast=0"
        )
    a, b = op.inputs
    dc = output_grad(op, gout)
    ta, tb = bool(op.args.get("trans_a", False)), bool(op.args.get("trans_b", False))
    if ta and tb:  # C = A'B': dA = B'G', dB = G'A'
        da, db = ([b, dc], {"trans_a": True, "trans_b": True}), ([dc, a], {"trans_a": True, "trans_b": True})
    elif ta:  # C = A'B: dA = BG', dB = AG
        da, db = ([b, dc], {"trans_b": True}), ([a, dc], {})
    elif tb:  # C = AB': dA = GB, dB = G'A
        da, db = ([dc, b], {}), ([dc, a], {"trans_a": True})
    else:  # C = AB: dA = GB', dB = A'G
        da, db = ([dc, b], {"trans_b": True}), ([a, dc], {"trans_a": True})
    return [_op("BatchMatMul", da[0], ["#da"], **da[1]), _op("BatchMatMul", db[0], ["#db"], **db[1])], ["#da", "#db"]


# -- FC: Y = X W^T + b;  dW = dY^T X, db = sum_rows(dY), dX = dY W ---------------------------
# -- FCTransposed: Y = X W + b;  dW = X^T dY, db = sum_rows(dY), dX = dY W^T  (X, W as 2-D views)
def _fc_gradient(ctx: Any, x: Any, w: Any, dy: Any, transposed: bool) -> tuple[np.ndarray, ...]:
    x, w, dy = float_array(ctx, x, 0), float_array(ctx, w, 1), float_array(ctx, dy, 2)
    xp = namespace(ctx, x, w, dy)
    same_dtype(ctx, [x, w, dy])
    x2, w2, _ = fc_shapes(ctx, x, w, transposed)
    n = w2.shape[1] if transposed else w2.shape[0]
    if xp.size(dy) != x2.shape[0] * n:
        raise ValueError(f"expected dY of {x2.shape[0]} x {n} elements, got {dy.shape}")
    dy2 = dy.reshape(x2.shape[0], n)
    half = xp.name == "numpy" and x.dtype == np.float16  # float16 data, float32 accumulation (Caffe2's GPU FC)
    if half:
        x2, w2, dy2 = x2.astype(np.float32), w2.astype(np.float32), dy2.astype(np.float32)
    dw = (x2.T @ dy2 if transposed else dy2.T @ x2).reshape(w.shape)
    db = dy2.sum(axis=0)
    outs = (dw, db) if len(ctx.op.outputs) == 2 else (dw, db, (dy2 @ (w2.T if transposed else w2)).reshape(x.shape))
    return tuple(to_half(o) for o in outs) if half else outs


_FC_GRAD_ARGS = [Arg("axis", int, 1, "the forward op's axis"), Arg("axis_w", int, 1, "the forward op's axis_w")]


def _fc_gradient_plain(ctx: Any, x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    """FCGradient where :func:`plain_fc` holds: the general path's math without its reshapes."""
    if x.dtype == np.float16:  # float16 data, float32 accumulation (Caffe2's GPU FC)
        wide = x.astype(np.float32), w.astype(np.float32), dy.astype(np.float32)
        dw, db = wide[2].T @ wide[0], np.add.reduce(wide[2], axis=0)
        outs = (dw, db) if len(ctx.op.outputs) == 2 else (dw, db, wide[2] @ wide[1])
        return tuple(to_half(o) for o in outs)
    if is_bound(ctx.output(0)):  # a gradient bucket's view: written in place, no copy later
        return _fc_gradient_into(ctx, x, w, dy)
    dw, db = parallel.matmul(dy.T, x), np.add.reduce(dy, axis=0)  # halves on an idle executor thread
    return (dw, db) if len(ctx.op.outputs) == 2 else (dw, db, parallel.matmul(dy, w))


def _specialize_fc_gradient(ctx: Any, x: Any, w: Any, dy: Any) -> Any:
    if plain_fc(ctx, x, w, dy, 2):
        return _fc_gradient_plain
    return _fc_gradient_with_axes(ctx, x, w, dy)


def _fc_gradient_with_axes(ctx: Any, x: Any, w: Any, dy: Any) -> Any:
    """For numpy float X, W, dY of one dtype whose shapes pass the general kernel's checks (any
    axis, axis_w): the gradient with those shapes bound, the general path's math. Else None."""
    if not (type(x) is np.ndarray and type(w) is np.ndarray and type(dy) is np.ndarray):
        return None
    if not (x.dtype is w.dtype is dy.dtype) or x.dtype.kind != "f" or ctx.device.device_type != "cpu":
        return None
    x2, w2, _ = fc_shapes(ctx, x, w, False)
    m, n = x2.shape[0], w2.shape[0]
    if dy.size != m * n:
        return None
    x_2d, w_2d, w_shape, x_shape, with_dx = x2.shape, w2.shape, w.shape, x.shape, len(ctx.op.outputs) == 3

    def fc_gradient_axes(ctx: Any, x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
        x2, dy2 = x.reshape(x_2d), dy.reshape(m, n)
        if m == 1:
            # one row: dY^T X is an outer product, ~3x cheaper as a broadcast than numpy's
            # matmul with an inner dim of 1; BLAS adds each product to 0, so a -0.0 product
            # is +0.0 there, and adding 0.0 gives the same bits
            dw = dy2.T * x2
            dw += 0.0
        else:
            dw = dy2.T @ x2
        dw = dw.reshape(w_shape)
        db = dy2.sum(axis=0)
        return (dw, db, (dy2 @ w.reshape(w_2d)).reshape(x_shape)) if with_dx else (dw, db)

    return fc_gradient_axes


@register_op(
    "FCGradient",
    inputs=3,
    outputs=(2, 3),
    args=_FC_GRAD_ARGS,
    devices=CPU_CUDA,
    specialize=_specialize_fc_gradient,
    inputs_doc=("X", "W [N, K]", "dY [M, N]"),
    outputs_doc=("dW, shaped like W", "db [N]", "dX (optional), shaped like X"),
    doc="Gradient of FC: dW = dY^T X, db = column sums of dY, and (when a third output is given) dX = dY W.",
)
def fc_gradient(ctx: Any, x: Any, w: Any, dy: Any) -> tuple[np.ndarray, ...]:
    if plain_fc(ctx, x, w, dy, 2):
        return _fc_gradient_plain(ctx, x, w, dy)
    if plain_fc_torch(ctx, x, w, dy, 2):
        dw, db = parallel.torch_mm(dy.t(), x), dy.sum(0)
        return (dw, db) if len(ctx.op.outputs) == 2 else (dw, db, parallel.torch_mm(dy, w))
    return _fc_gradient(ctx, x, w, dy, transposed=False)


def _fc_gradient_into(ctx: Any, x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    """FCGradient's short path writing dW and db into their bound outputs (same BLAS call and
    reduction, so the same bits); an output that is not a bound array of the right shape gets a
    fresh one."""
    dw, db = ctx.bound_output(0, w.shape, w.dtype), ctx.bound_output(1, w.shape[:1], w.dtype)
    dw = parallel.matmul(dy.T, x) if dw is None else parallel.matmul_into(dy.T, x, dw)
    db = np.add.reduce(dy, axis=0, out=db)
    return (dw, db) if len(ctx.op.outputs) == 2 else (dw, db, parallel.matmul(dy, w))


@register_op(
    "FCTransposedGradient",
    inputs=3,
    outputs=(2, 3),
    args=_FC_GRAD_ARGS,
    devices=CPU_CUDA,
    inputs_doc=("X", "W [K, N]", "dY [M, N]"),
    outputs_doc=("dW, shaped like W", "db [N]", "dX (optional), shaped like X"),
    doc="Gradient of FCTransposed: dW = X^T dY, db = column sums of dY, and (optional third output) dX = dY W^T.",
)
def fc_transposed_gradient(ctx: Any, x: Any, w: Any, dy: Any) -> tuple[np.ndarray, ...]:
    return _fc_gradient(ctx, x, w, dy, transposed=True)


def _fc_maker(grad_type: str):  # type: ignore[no-untyped-def]
    def maker(op: OperatorDef, gout: GradOut) -> MakerResult:
        x, w, b = op.inputs
        return [_op(grad_type, [x, w, output_grad(op, gout)], ["#dw", "#db", "#dx"], **op.args)], ["#dx", "#dw", "#db"]

    return maker


register_gradient("FC")(_fc_maker("FCGradient"))
register_gradient("FCTransposed")(_fc_maker("FCTransposedGradient"))


# -- Relu: Y = max(X, 0);  dX = dY * (Y > 0) -------------------------------------------------
def _specialize_relu_gradient(ctx: Any, y: Any, dy: Any) -> Any:
    """dY * (Y > 0) with the 0 of Y's float dtype bound, for numpy Y and dY of one dtype and shape."""
    if not (type(y) is _nd and type(dy) is _nd and y.dtype is dy.dtype and y.shape == dy.shape and y.dtype in _ZERO):
        return None
    zero = _ZERO[y.dtype]

    def relu_gradient_plain(ctx: Any, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return dy * (y > zero)

    return relu_gradient_plain if y.ndim else (lambda ctx, y, dy: as_array(dy * (y > zero)))  # 0-d: a scalar product


@register_op(
    "ReluGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    devices=CPU_CUDA,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    specialize=_specialize_relu_gradient,
    doc="Gradient of Relu from its output: dX = dY where Y > 0, else 0.",
)
def relu_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    if type(y) is _nd and type(dy) is _nd and y.dtype is dy.dtype and y.shape == dy.shape and y.dtype in _ZERO:
        return as_array(dy * (y > _ZERO[y.dtype]))
    y, dy = _pair(ctx, y, dy)
    return as_array(dy * (y > 0))  # bool times float keeps dY's dtype; ~16x cheaper than where()


# -- Sigmoid: Y = 1 / (1 + e^-X);  dX = dY * Y * (1 - Y) -------------------------------------
@register_op(
    "SigmoidGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    devices=CPU_CUDA,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="Gradient of Sigmoid from its output: dX = dY * Y * (1 - Y).",
)
def sigmoid_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    y, dy = _pair(ctx, y, dy)
    return as_array(dy * y * (1 - y))


# -- Tanh: Y = tanh(X);  dX = dY * (1 - Y^2) -------------------------------------------------
@register_op(
    "TanhGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    devices=CPU_CUDA,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="Gradient of Tanh from its output: dX = dY * (1 - Y^2).",
)
def tanh_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    y, dy = _pair(ctx, y, dy)
    return as_array(dy * (1 - y * y))


# -- Softmax: Y = softmax(X) per row;  dX = Y * (dY - sum_row(dY * Y)) -----------------------
@register_op(
    "SoftmaxGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    devices=CPU_CUDA,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    args=[Arg("axis", int, 1, "the axis the forward Softmax used")],
    doc="Gradient of Softmax from its output: dX = Y * (dY - rowsum(dY * Y)), rows as in the forward op.",
)
def softmax_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    y, dy = _pair(ctx, y, dy)
    y2, dy2 = flatten_2d(y, canonical_axis(ctx, y, "axis")), None
    dy2 = dy.reshape(y2.shape)
    return (y2 * (dy2 - (dy2 * y2).sum(axis=1, keepdims=True))).reshape(y.shape)


def _pair(ctx: Any, y: Any, dy: Any) -> tuple[np.ndarray, np.ndarray]:
    y, dy = float_array(ctx, y, 0), float_array(ctx, dy, 1)
    namespace(ctx, y, dy)
    same_dtype(ctx, [y, dy])
    if y.shape != dy.shape:
        raise ValueError(f"expected dY of the forward output's shape {y.shape}, got {dy.shape}")
    return y, dy


def _from_output(grad_type: str, **keep: Any):  # type: ignore[no-untyped-def]
    """Maker for activations whose gradient needs only Y and dY (works in place, Y == X)."""

    def maker(op: OperatorDef, gout: GradOut) -> MakerResult:
        args = {k: op.args.get(k, v) for k, v in keep.items()}
        return [_op(grad_type, [op.outputs[0], output_grad(op, gout)], ["#dx"], **args)], ["#dx"]

    return maker


register_gradient("Relu")(_from_output("ReluGradient"))
register_gradient("Sigmoid")(_from_output("SigmoidGradient"))
register_gradient("Tanh")(_from_output("TanhGradient"))
register_gradient("Softmax")(_from_output("SoftmaxGradient", axis=1))


# -- StopGradient: Y = X in the forward pass; autodiff stops here (Caffe2's NO_GRADIENT) ---------
@register_op(
    "StopGradient",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    doc="Y = X (a copy, or X itself in place); the gradient stops here: ops before it get none "
    "through it (Caffe2's StopGradient).",
)
def stop_gradient(ctx: Any, x: Any) -> Any:
    if x is None:
        raise TypeError(f"input 0 {ctx.op.inputs[0]!r} holds None; expected a tensor (or another object to pass on)")
    if ctx.op.outputs[0] == ctx.op.inputs[0]:
        return x
    if isinstance(x, np.ndarray):
        return x.copy()
    return x.clone() if is_torch(x) else x


register_no_gradient("StopGradient")

__all__ = [
    "g",
    "reduce_to_shape",
    "fc_gradient",
    "fc_transposed_gradient",
    "relu_gradient",
    "sigmoid_gradient",
    "tanh_gradient",
    "softmax_gradient",
    "sum_reduce_like",
    "stop_gradient",
]
