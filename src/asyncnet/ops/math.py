"""Elementwise and linear-algebra operators on numpy arrays.

Binary ops broadcast like numpy and require both inputs to share a dtype (no silent
promotion). Every kernel returns a new array, so in-place use (``net.Add(["a", "b"], "a")``)
rebinds the blob rather than mutating an array a caller may still hold.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import array, as_array, broadcast_shape, float_array, ndim, same_dtype


def _binary(op_type: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str) -> None:
    @register_op(op_type, inputs=2, outputs=1, allow_inplace={0: 0, 1: 0}, devices=("cpu",), doc=doc,
                 inputs_doc=("A", "B"), outputs_doc=("C",))
    def kernel(ctx: Any, a: Any, b: Any) -> np.ndarray:
        a, b = array(ctx, a, 0), array(ctx, b, 1)
        same_dtype(ctx, [a, b])
        broadcast_shape(ctx, a, b)
        return as_array(fn(a, b))

    kernel.__name__ = op_type.lower()


_binary("Add", np.add, "C = A + B, with numpy broadcasting.")
_binary("Sub", np.subtract, "C = A - B, with numpy broadcasting.")
_binary("Mul", np.multiply, "C = A * B (elementwise), with numpy broadcasting.")


@register_op("Div", inputs=2, outputs=1, allow_inplace={0: 0, 1: 0}, doc="C = A / B (elementwise), with numpy broadcasting; integer inputs divide with truncation toward zero.")
def div(ctx: Any, a: Any, b: Any) -> np.ndarray:
    a, b = array(ctx, a, 0), array(ctx, b, 1)
    same_dtype(ctx, [a, b])
    broadcast_shape(ctx, a, b)
    if a.dtype.kind in "iu":
        if np.any(b == 0):
            raise ZeroDivisionError("integer division by zero")
        return as_array(_trunc_divide(a, b))
    return as_array(np.divide(a, b))


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


@register_op("Sum", inputs=(1, None), outputs=1, allow_inplace={0: 0}, doc="Elementwise sum of one or more inputs of the same shape and dtype.")
def sum_(ctx: Any, *xs: Any) -> np.ndarray:
    arrays = [array(ctx, x, i) for i, x in enumerate(xs)]
    same_dtype(ctx, arrays)
    for i, x in enumerate(arrays[1:], 1):
        if x.shape != arrays[0].shape:
            raise ValueError(f"expected every input of shape {arrays[0].shape}, got {x.shape} in input {i} {ctx.op.inputs[i]!r}")
    out = arrays[0].copy()
    for x in arrays[1:]:
        out += x
    return out


@register_op("Scale", inputs=1, outputs=1, allow_inplace={0: 0}, args=[Arg("scale", float, 1.0, "multiplier")],
             doc="Y = scale * X, keeping X's dtype.")
def scale(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    s = ctx.args["scale"]
    if x.dtype.kind == "f":
        return as_array(x * x.dtype.type(s))
    if x.dtype.kind in "iu" and float(s).is_integer() and abs(s) < 2**63:
        # exact (wrapping) integer product: a float round trip loses int64 values above 2**53
        return as_array(x * np.array(int(s)).astype(x.dtype))
    return as_array(x * s).astype(x.dtype)


@register_op("Copy", inputs=1, outputs=1, devices=("cpu", "cuda"), doc="Y = a copy of X (arrays are copied; other objects passed through).")
def copy(ctx: Any, x: Any) -> Any:
    c = getattr(x, "copy", None) or getattr(x, "clone", None)
    return c() if c is not None else x


@register_op("MatMul", inputs=2, outputs=1, args=[Arg("trans_a", bool, False, "transpose A"), Arg("trans_b", bool, False, "transpose B")],
             doc="C = op(A) @ op(B) for 2-D float A and B, op being an optional transpose.")
def matmul(ctx: Any, a: Any, b: Any) -> np.ndarray:
    a, b = float_array(ctx, a, 0), float_array(ctx, b, 1)
    same_dtype(ctx, [a, b])
    ndim(ctx, a, 0, 2)
    ndim(ctx, b, 1, 2)
    a = a.T if ctx.args["trans_a"] else a
    b = b.T if ctx.args["trans_b"] else b
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"expected A's columns ({a.shape[1]}) to equal B's rows ({b.shape[0]}) after transposes; A {a.shape}, B {b.shape}")
    return a @ b
