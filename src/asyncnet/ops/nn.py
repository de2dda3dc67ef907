"""Neural-network layers and activations: FC, Relu, Sigmoid, Tanh, Softmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import as_array, axis_of, flatten_2d, float_array, same_dtype


@register_op("FC", inputs=3, outputs=1, args=[Arg("axis", int, 1, "X is flattened to 2-D from this axis")],
             inputs_doc=("X", "W [N, K]", "b [N]"), outputs_doc=("Y [M, N]",),
             doc="Fully connected layer: Y = X W^T + b, X flattened to [M, K] at `axis`.")
def fc(ctx: Any, x: Any, w: Any, b: Any) -> np.ndarray:
    x, w, b = float_array(ctx, x, 0), float_array(ctx, w, 1), float_array(ctx, b, 2)
    same_dtype(ctx, [x, w, b])
    x2 = flatten_2d(x, axis_of(ctx, x, ctx.args["axis"]))
    if w.ndim != 2 or w.shape[1] != x2.shape[1]:
        raise ValueError(f"expected W of shape [N, {x2.shape[1]}] for X flattened to {x2.shape}, got W {w.shape}")
    if b.shape != (w.shape[0],):
        raise ValueError(f"expected b of shape ({w.shape[0]},), got {b.shape}")
    y = x2 @ w.T
    y += b
    return y


def _activation(op_type: str, doc: str):  # type: ignore[no-untyped-def]
    return register_op(op_type, inputs=1, outputs=1, allow_inplace={0: 0}, doc=doc)


@_activation("Relu", "Y = max(X, 0).")
def relu(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    return as_array(np.maximum(x, x.dtype.type(0)))


@_activation("Sigmoid", "Y = 1 / (1 + exp(-X)), computed without overflow.")
def sigmoid(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


@_activation("Tanh", "Y = tanh(X).")
def tanh(ctx: Any, x: Any) -> np.ndarray:
    return as_array(np.tanh(float_array(ctx, x, 0)))


@register_op("Softmax", inputs=1, outputs=1, allow_inplace={0: 0}, args=[Arg("axis", int, 1, "X is flattened to 2-D from this axis; softmax runs over the columns")],
             doc="Softmax over the trailing dims: X viewed as [prod(dims[:axis]), prod(dims[axis:])].")
def softmax(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    x2 = flatten_2d(x, axis_of(ctx, x, ctx.args["axis"]))
    z = x2 - x2.max(axis=1, keepdims=True) if x2.size else x2
    e = np.exp(z)
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


__all__ = ["fc", "relu", "sigmoid", "tanh", "softmax", "same_dtype"]
