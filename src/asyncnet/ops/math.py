"""Elementwise and linear-algebra operators on numpy arrays or torch tensors (one kernel each,
written against :mod:`asyncnet.tensor.namespace`; results keep the inputs' library and device).

Binary ops broadcast like numpy and require both inputs to share a dtype (no silent
promotion). Every kernel returns a new array, so in-place use (``net.Add(["a", "b"], "a")``)
rebinds the blob rather than mutating an array a caller may still hold.

Caffe2's legacy broadcasting is accepted on the binary elementwise ops (Add, Sub, Mul, Div and
the comparisons and logic ops of ``logic.py``): with ``broadcast=1``, B's shape (its leading and
trailing 1s dropped) must equal a contiguous run of A's dims starting at ``axis`` (default -1:
B's dims are A's last ones; ``axis_str`` names the axis by a letter of ``order``), and C has
A's shape. A B of one element is a scalar::

    >>> import asyncnet as an
    >>> ws = an.Workspace(); ws.feed("a", np.zeros((2, 3, 4))); ws.feed("b", np.arange(3.0))
    >>> net = an.Net("n"); _ = net.Add(["a", "b"], "c", broadcast=1, axis=1)
    >>> ws.run_net_once(net); ws.fetch("c")[1, :, 0]
    array([0., 1., 2.])
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import array, as_array, broadcast_shape, flatten_2d, float_array, same_dtype
from asyncnet.tensor import parallel
from asyncnet.tensor.namespace import cpu_tensors, is_array, is_torch, namespace

CPU_CUDA = ("cpu", "cuda")

#: Caffe2's arguments of the binary elementwise ops (elementwise_ops.h, BinaryElementwiseWithArgsOp)
LEGACY_ARGS = (
    Arg("broadcast", bool, False, "Caffe2's legacy broadcasting: B matches a contiguous run of A's dims"),
    Arg("axis", int, -1, "with broadcast=1: the dim of A where B's dims start (-1: B matches A's last dims)"),
    Arg("axis_str", str, "", "with broadcast=1: the axis as a letter of `order` (instead of axis)"),
    Arg("order", str, "NCHW", "the dim letters axis_str refers to"),
)


def validate_legacy(op: OperatorDef) -> None:
    """Caffe2's constructor checks of the legacy arguments, at net creation."""
    args = op.args
    if not args.get("broadcast"):
        if args.get("axis", -1) != -1 or args.get("axis_str"):
            raise ValueError(
                "argument axis or axis_str given without broadcast=1; expected broadcast=1 "
                "(Caffe2: do not specify axis or axis_str if broadcast is not enabled)"
            )
        return
    if args.get("axis", -1) != -1 and args.get("axis_str"):
        raise ValueError("arguments axis and axis_str given together; expected one of them")
    axis_str = args.get("axis_str", "")
    if axis_str and (
        not isinstance(axis_str, str) or len(axis_str) != 1 or axis_str not in str(args.get("order", "NCHW"))
    ):
        raise ValueError(f"argument axis_str={axis_str!r}: expected one letter of order={args.get('order', 'NCHW')!r}")
    if len(op.inputs) > 1 and op.outputs and op.outputs[0] == op.inputs[1]:
        raise ValueError(
            "output 0 overwrites input 1 with broadcast=1; expected in place only with input 0 "
            "(Caffe2: in-place is allowed only with the first tensor when legacy-broadcasting)"
        )


def legacy_axis(args: dict[str, Any]) -> int:
    """The axis of a legacy broadcast, from ``axis`` or ``axis_str`` + ``order``."""
    return str(args["order"]).index(args["axis_str"]) if args.get("axis_str") else int(args["axis"])


def legacy_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """B's shape padded with 1s so that numpy broadcasting does Caffe2's legacy broadcast.

    >>> legacy_shape((2, 3, 4, 5), (3, 4), 1), legacy_shape((2, 3, 4), (1, 3, 1), 0), legacy_shape((2, 3), (1,), -1)
    ((1, 3, 4, 1), (1, 3, 1), ())
    """
    if int(np.prod(b_shape, dtype=np.int64)) == 1:
        return ()
    if len(b_shape) > len(a_shape):
        raise ValueError(f"broadcast=1 needs B to have at most A's {len(a_shape)} dims; A {a_shape}, B {b_shape}")
    if axis == -1:
        axis = len(a_shape) - len(b_shape)
    if not 0 <= axis <= len(a_shape) - len(b_shape):
        raise ValueError(
            f"broadcast axis={axis} out of range [0, {len(a_shape) - len(b_shape)}] for A {a_shape}, B {b_shape}"
        )
    start, end = 0, len(b_shape) - 1
    while start < len(b_shape) and b_shape[start] == 1:
        start += 1
    while end >= start and b_shape[end] == 1:
        end -= 1
    for i in range(start, end + 1):
        if a_shape[axis + i] != b_shape[i]:
            raise ValueError(
                f"broadcast dimension mismatch: B {b_shape} dim {i} is {b_shape[i]}, A {a_shape} "
                f"dim {axis + i} is {a_shape[axis + i]} (axis={axis})"
            )
    return (1,) * (axis + start) + tuple(b_shape[start : end + 1]) + (1,) * (len(a_shape) - axis - end - 1)


def binary_operands(ctx: Any, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """A and B of a binary elementwise op, B reshaped for a legacy broadcast; shapes checked."""
    a, b = array(ctx, a, 0), array(ctx, b, 1)
    namespace(ctx, a, b)
    same_dtype(ctx, [a, b])
    if ctx.args.get("broadcast"):
        try:
            return a, b.reshape(legacy_shape(a.shape, b.shape, legacy_axis(ctx.args)))
        except ValueError as e:
            raise ValueError(f"{e} (inputs {ctx.op.inputs[0]!r}, {ctx.op.inputs[1]!r})") from None
    broadcast_shape(ctx, a, b)
    return a, b


def _binary(op_type: str, fn: Callable[[Any, Any], Any], doc: str) -> None:
    @register_op(
        op_type,
        inputs=2,
        outputs=1,
        allow_inplace={0: 0, 1: 0},
        devices=CPU_CUDA,
        doc=doc,
        inputs_doc=("A", "B"),
        outputs_doc=("C",),
        args=LEGACY_ARGS,
        validate=validate_legacy,
    )
    def kernel(ctx: Any, a: Any, b: Any) -> np.ndarray:
        a, b = binary_operands(ctx, a, b)
        return as_array(fn(a, b))

    kernel.__name__ = op_type.lower()


_binary("Add", operator.add, "C = A + B, with numpy broadcasting (or Caffe2's legacy broadcast=1, axis).")
_binary("Sub", operator.sub, "C = A - B, with numpy broadcasting (or Caffe2's legacy broadcast=1, axis).")
_binary("Mul", operator.mul, "C = A * B (elementwise), with numpy broadcasting (or Caffe2's legacy broadcast=1, axis).")


@register_op(
    "Div",
    inputs=2,
    outputs=1,
    allow_inplace={0: 0, 1: 0},
    args=LEGACY_ARGS,
    validate=validate_legacy,
    devices=CPU_CUDA,
    doc="C = A / B (elementwise), with numpy broadcasting (or Caffe2's legacy broadcast=1, axis); "
    "integer inputs divide with truncation toward zero.",
)
def div(ctx: Any, a: Any, b: Any) -> np.ndarray:
    a, b = binary_operands(ctx, a, b)
    xp = namespace(ctx, a, b)
    if xp.kind(a) in "iu":
        if bool(xp.any(b == 0)):
            raise ZeroDivisionError(f"integer division by zero: B {ctx.op.inputs[1]!r} holds a 0")
        if xp.name == "torch":  # torch's trunc rounding is exact for every int64
            return xp.lib.div(a, b, rounding_mode="trunc")
        return as_array(_trunc_divide(a, b))
    return as_array(a / b)


def _trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero, exact for every int64 (no float round trip); the
    one overflow, INT_MIN / -1, wraps to INT_MIN as in two's complement.

    >>> _trunc_divide(np.array([7, -7, 2**62 + 1]), np.array([2, 2, 1]))
    array([                  3,                  -3, 4611686018427387905])
    """
    with np.errstate(over="ignore", divide="ignore"):
        q = np.floor_divide(a, b)
        if a.dtype.kind == "i":  # floor differs from trunc when the signs differ and it is inexact
            q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def _specialize_sum(ctx: Any, *xs: Any) -> Callable[..., Any] | None:
    """For numpy float arrays of one dtype and one shape (at least 1-d) on a cpu op: the sum
    with no checks, in the general kernel's order (x0 + x1, then += each further input)."""
    x0 = xs[0]
    if ctx.device.device_type != "cpu" or type(x0) is not np.ndarray or x0.dtype not in _FLOATS or not x0.ndim:
        return None
    if any(type(x) is not np.ndarray or x.dtype is not x0.dtype or x.shape != x0.shape for x in xs[1:]):
        return None
    if len(xs) == 1:
        return lambda ctx, x: x.copy()
    if len(xs) == 2:
        return lambda ctx, a, b: a + b

    def sum_plain(ctx: Any, *xs: np.ndarray) -> np.ndarray:
        out = xs[0] + xs[1]
        for x in xs[2:]:
            out += x
        return out

    return sum_plain


@register_op(
    "Sum",
    inputs=(1, None),
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    specialize=_specialize_sum,
    doc="Elementwise sum of one or more inputs of the same shape and dtype.",
)
def sum_(ctx: Any, *xs: Any) -> np.ndarray:
    arrays = [array(ctx, x, i) for i, x in enumerate(xs)]
    xp = namespace(ctx, *arrays)
    same_dtype(ctx, arrays)
    for i, x in enumerate(arrays[1:], 1):
        if x.shape != arrays[0].shape:
            raise ValueError(
                f"expected every input of shape {arrays[0].shape}, got {x.shape} in input {i} {ctx.op.inputs[i]!r}"
            )
    out = xp.copy(arrays[0])
    for x in arrays[1:]:
        out += x
    return out


@register_op(
    "Scale",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    args=[Arg("scale", float, 1.0, "multiplier")],
    devices=CPU_CUDA,
    doc="Y = scale * X, keeping X's dtype.",
)
def scale(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    s = ctx.args["scale"]
    if type(x) is np.ndarray:
        if x.dtype.kind not in "biufc":
            raise TypeError(f"expected a numeric array in input 0 {ctx.op.inputs[0]!r}, got dtype {x.dtype}")
        if x.dtype.kind == "f":
            return as_array(x * x.dtype.type(s))
        if x.dtype.kind in "iu" and float(s).is_integer() and abs(s) < 2**63:
            # exact (wrapping) integer product: a float round trip loses int64 values above 2**53
            return as_array(x * np.array(int(s)).astype(x.dtype))
        return as_array(x * s).astype(x.dtype)
    xp = namespace(ctx, x)
    if xp.kind(x) == "f":
        return x * s
    if xp.kind(x) in "iu" and float(s).is_integer() and abs(s) < 2**63:
        k = int(s) % (1 << 8 * x.element_size()) if xp.kind(x) == "u" else int(s)  # wraps as numpy's astype
        return x * xp.scalar_like(k, x)
    return (x.to(xp.lib.float64) * s).to(
        x.dtype
    )  # in float64 as numpy's (x * s).astype: torch's int * float is float32


def _copy_array(ctx: Any, x: np.ndarray) -> np.ndarray:
    return x.copy()


def _specialize_copy(ctx: Any, x: Any) -> Callable[..., Any] | None:
    """A numpy array on a cpu op: its copy, with no checks."""
    return _copy_array if ctx.device.device_type == "cpu" and type(x) is np.ndarray else None


@register_op(
    "Copy",
    inputs=1,
    outputs=1,
    devices=CPU_CUDA,
    specialize=_specialize_copy,
    doc="Y = a copy of X (arrays are copied; other objects passed through); on a cuda op Y is on the op's "
    "device wherever X is (Caffe2's Copy: 'potentially across devices').",
)
def copy(ctx: Any, x: Any) -> Any:
    if x is None:
        raise TypeError(f"input 0 {ctx.op.inputs[0]!r} holds None; expected a tensor (or another object to pass on)")
    if ctx.device.device_type == "cuda" and is_array(x):
        from asyncnet.tensor.place import device_name, place

        y = place(x, device_name(ctx.device), "torch")
        return y.clone() if y is x else y
    if isinstance(x, np.ndarray):
        return x.copy()
    return x.clone() if is_torch(x) else x


@register_op(
    "MatMul",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    args=[
        Arg("trans_a", bool, False, "transpose A (after flattening)"),
        Arg("trans_b", bool, False, "transpose B (after flattening)"),
        Arg("axis_a", int, 1, "A is flattened to 2-D at this axis"),
        Arg("axis_b", int, 1, "B is flattened to 2-D at this axis"),
    ],
    doc="C = op(A) @ op(B), A and B float, flattened to 2-D at axis_a and axis_b, op an optional transpose "
    "(Caffe2's MatMul); C is 2-D.",
)
def matmul(ctx: Any, a: Any, b: Any) -> np.ndarray:
    a2, b2 = matmul_operands(ctx, a, b)
    if type(a2) is np.ndarray and type(b2) is np.ndarray:
        return parallel.matmul(a2, b2)  # in two halves on an idle executor thread, when one is free
    if cpu_tensors(a2, b2):  # plain CPU tensors (no autograd), 2-D here
        return parallel.torch_mm(a2, b2)
    return a2 @ b2


def canonical_axis(ctx: Any, x: np.ndarray, name: str) -> int:
    """Caffe2's canonical_axis_index: argument ``name`` in [-ndim, ndim), made non-negative."""
    a = ctx.args[name]
    if not -x.ndim <= a < x.ndim:
        raise ValueError(f"argument {name}={a} is out of range for an input of shape {x.shape}")
    return a % x.ndim


def matmul_operands(ctx: Any, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """op(A) and op(B) of MatMul as 2-D views, their inner dims checked."""
    a, b = float_array(ctx, a, 0), float_array(ctx, b, 1)
    namespace(ctx, a, b)
    same_dtype(ctx, [a, b])
    for i, x in enumerate((a, b)):
        if x.ndim < 1:
            raise ValueError(f"expected an array of at least 1 dim in input {i} {ctx.op.inputs[i]!r}, got a scalar")
    a2 = flatten_2d(a, canonical_axis(ctx, a, "axis_a"))
    b2 = flatten_2d(b, canonical_axis(ctx, b, "axis_b"))
    a2 = a2.T if ctx.args["trans_a"] else a2
    b2 = b2.T if ctx.args["trans_b"] else b2
    if a2.shape[1] != b2.shape[0]:
        raise ValueError(
            f"expected A's columns ({a2.shape[1]}) to equal B's rows ({b2.shape[0]}) after flattening "
            f"(axis_a={ctx.args['axis_a']}, axis_b={ctx.args['axis_b']}) and transposes; A {a.shape}, B {b.shape}"
        )
    return a2, b2


@register_op(
    "BatchMatMul",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    args=[
        Arg("trans_a", bool, False, "transpose the last two dims of A"),
        Arg("trans_b", bool, False, "transpose the last two dims of B"),
        Arg("broadcast", bool, False, "numpy.matmul's broadcasting (1-D operands, batch dims); no gradient"),
    ],
    inputs_doc=("A (..., M, K)", "B (..., K, N)"),
    outputs_doc=("Y (..., M, N)",),
    doc="Y_i = op(A_i) @ op(B_i) over the leading (batch) dims (Caffe2's BatchMatMul): without broadcast A and B "
    "have one rank >= 2 and equal batch dims; with broadcast=1 it behaves as numpy.matmul.",
)
def batch_matmul(ctx: Any, a: Any, b: Any) -> np.ndarray:
    a, b = float_array(ctx, a, 0), float_array(ctx, b, 1)
    xp = namespace(ctx, a, b)
    same_dtype(ctx, [a, b])
    ta, tb = ctx.args["trans_a"], ctx.args["trans_b"]
    if not ctx.args["broadcast"]:
        if a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
            raise ValueError(
                f"expected A and B of one rank >= 2 with equal batch dims (or broadcast=1), got A {a.shape}, B {b.shape}"
            )
    a = xp.swapaxes(a, -1, -2) if ta and a.ndim >= 2 else a
    b = xp.swapaxes(b, -1, -2) if tb and b.ndim >= 2 else b
    try:
        return as_array(xp.matmul(a, b))
    except (ValueError, RuntimeError):
        raise ValueError(
            f"BatchMatMul shapes do not match: op(A) {a.shape}, op(B) {b.shape} "
            f"(trans_a={ta}, trans_b={tb}, broadcast={ctx.args['broadcast']})"
        ) from None
