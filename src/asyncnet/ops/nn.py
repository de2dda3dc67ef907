"""Neural-network layers and activations: FC, FCTransposed, Relu, Sigmoid, Tanh, Softmax, on numpy
arrays or torch tensors (:mod:`asyncnet.tensor.namespace`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import as_array, flatten_2d, float_array, same_dtype
from asyncnet.ops._half import to_half
from asyncnet.ops.math import CPU_CUDA, canonical_axis
from asyncnet.tensor import parallel
from asyncnet.tensor.namespace import cpu_tensors, namespace


def _fc_args(default_axis_w: int) -> list[Arg]:
    return [
        Arg("axis", int, 1, "X is flattened to [M, K] at this axis; Y keeps X's dims before it"),
        Arg("axis_w", int, default_axis_w, "W is flattened to 2-D at this axis"),
    ]


def fc_shapes(ctx: Any, x: np.ndarray, w: np.ndarray, transposed: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """X as [M, K] and W as [N, K] (FC) or [K, N] (FCTransposed), and the canonical axis of X (Caffe2's rule)."""
    axis, axis_w = canonical_axis(ctx, x, "axis"), canonical_axis(ctx, w, "axis_w")
    x2, w2 = flatten_2d(x, axis), flatten_2d(w, axis_w)
    k = w2.shape[0] if transposed else w2.shape[1]
    if k != x2.shape[1]:
        expected = f"[{x2.shape[1]}, N]" if transposed else f"[N, {x2.shape[1]}]"
        raise ValueError(
            f"expected W flattened at axis_w={ctx.args['axis_w']} to be {expected} for X {x.shape} flattened "
            f"at axis={ctx.args['axis']} to {x2.shape}, got W {w.shape} -> {w2.shape}"
        )
    return x2, w2, axis


_nd = np.ndarray
_ZERO = {np.dtype(t): np.dtype(t).type(0) for t in (np.float16, np.float32, np.float64)}
_HALF = np.dtype(np.float16)


def plain_fc(ctx: Any, x: Any, w: Any, v: Any, v_ndim: int) -> bool:
    """True for the common FC of a numpy MLP: X [M, K], W [N, K] and ``v`` (b [N] for FC, dY [M, N]
    for its gradient; ``v_ndim`` 1 or 2) numpy arrays of one float dtype, default axes. The kernels then take a
    short path with the same math (same bits) and no flattening; anything else takes the general
    path and its checks."""
    return (
        type(x) is _nd
        and type(w) is _nd
        and type(v) is _nd
        and x.ndim == 2
        and w.ndim == 2
        and x.dtype is w.dtype is v.dtype
        and x.dtype in _ZERO
        and x.shape[1] == w.shape[1]
        and v.ndim == v_ndim
        and v.shape[-1] == w.shape[0]
        and (v_ndim == 1 or v.shape[0] == x.shape[0])
        and ctx.args["axis"] == 1
        and ctx.args["axis_w"] == 1
    )


def plain_fc_torch(ctx: Any, x: Any, w: Any, v: Any, v_ndim: int) -> bool:
    """:func:`plain_fc` for torch CPU tensors (the kernels then call torch's fused addmm / mm)."""
    return (
        cpu_tensors(x, w, v)
        and x.dim() == 2
        and w.dim() == 2
        and x.dtype is w.dtype is v.dtype
        and x.is_floating_point()
        and x.shape[1] == w.shape[1]
        and v.dim() == v_ndim
        and v.shape[-1] == w.shape[0]
        and (v_ndim == 1 or v.shape[0] == x.shape[0])
        and ctx.args["axis"] == 1
        and ctx.args["axis_w"] == 1
    )


def _fc(ctx: Any, x: Any, w: Any, b: Any, transposed: bool) -> np.ndarray:
    x, w, b = float_array(ctx, x, 0), float_array(ctx, w, 1), float_array(ctx, b, 2)
    xp = namespace(ctx, x, w, b)
    same_dtype(ctx, [x, w, b])
    x2, w2, axis = fc_shapes(ctx, x, w, transposed)
    n = w2.shape[1] if transposed else w2.shape[0]
    if xp.size(b) != n or (b.ndim and b.shape[0] != n):
        raise ValueError(f"expected b of shape ({n},), got {b.shape}")
    if xp.name == "numpy" and x.dtype == np.float16:  # float16 data, float32 accumulation (as Caffe2's GPU FC)
        x2, w2, b = x2.astype(np.float32), w2.astype(np.float32), b.astype(np.float32)
    y = x2 @ (w2 if transposed else w2.T)
    y += b.reshape(n)
    return (to_half(y) if y.dtype != x.dtype else y).reshape(x.shape[:axis] + (n,))


def _fc_plain(ctx: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FC where :func:`plain_fc` holds: the general path's math without its reshapes."""
    if x.dtype is _HALF:  # float16 data, float32 accumulation (as Caffe2's GPU FC)
        return to_half(_fc_plain(ctx, x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)))
    y = parallel.matmul(x, w.T)  # in two halves on an idle executor thread, when one is free
    y += b
    return y


def _specialize_fc(ctx: Any, x: Any, w: Any, b: Any) -> Any:
    if plain_fc(ctx, x, w, b, 1):
        return _fc_plain
    return fc_with_axes(ctx, x, w, b)


def fc_with_axes(ctx: Any, x: Any, w: Any, b: Any) -> Any:
    """For numpy float X, W, b of one dtype whose shapes pass the general kernel's checks (any
    axis, axis_w): FC with those shapes bound, the general path's math (same bits). Else None."""
    if not (type(x) is _nd and type(w) is _nd and type(b) is _nd and x.dtype is w.dtype is b.dtype):
        return None
    if x.dtype not in _ZERO or ctx.device.device_type != "cpu":
        return None
    x2, w2, axis = fc_shapes(ctx, x, w, transposed=False)
    n = w2.shape[0]
    if b.size != n or (b.ndim and b.shape[0] != n):
        return None
    x_2d, w_2d, y_shape = x2.shape, w2.shape, x.shape[:axis] + (n,)

    def fc_axes(ctx: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = x.reshape(x_2d) @ w.reshape(w_2d).T
        y += b.reshape(n)
        return y.reshape(y_shape)

    return fc_axes


@register_op(
    "FC",
    inputs=3,
    outputs=1,
    args=_fc_args(1),
    devices=CPU_CUDA,
    specialize=_specialize_fc,
    inputs_doc=("X", "W [N, K] (flattened at axis_w)", "b [N]"),
    outputs_doc=("Y, X.shape[:axis] + [N]",),
    doc="Fully connected layer: Y = X W^T + b, X flattened to [M, K] at `axis`, W to [N, K] at `axis_w`; "
    "Y keeps X's dims before `axis` (Caffe2's FC).",
)
def fc(ctx: Any, x: Any, w: Any, b: Any) -> np.ndarray:
    if plain_fc(ctx, x, w, b, 1):
        return _fc_plain(ctx, x, w, b)
    if plain_fc_torch(ctx, x, w, b, 1):
        return parallel.torch_addmm(b, x, w.t())  # b + X W^T in one call (torch.nn.Linear's)
    return _fc(ctx, x, w, b, transposed=False)


@register_op(
    "FCTransposed",
    inputs=3,
    outputs=1,
    args=_fc_args(1),
    devices=CPU_CUDA,
    inputs_doc=("X", "W [K, N] (flattened at axis_w)", "b [N]"),
    outputs_doc=("Y, X.shape[:axis] + [N]",),
    doc="FC with the weight stored transposed: Y = X W + b, W flattened to [K, N] at `axis_w` (Caffe2's FCTransposed).",
)
def fc_transposed(ctx: Any, x: Any, w: Any, b: Any) -> np.ndarray:
    return _fc(ctx, x, w, b, transposed=True)


def _activation(op_type: str, doc: str, specialize: Any = None):  # type: ignore[no-untyped-def]
    return register_op(
        op_type, inputs=1, outputs=1, allow_inplace={0: 0}, devices=CPU_CUDA, doc=doc, specialize=specialize
    )


def _specialize_relu(ctx: Any, x: Any) -> Any:
    """max(X, 0) with the 0 of X's float dtype bound (numpy skips the Python-int conversion)."""
    if not (type(x) is _nd and x.dtype in _ZERO):
        return None
    zero = _ZERO[x.dtype]

    def relu_plain(ctx: Any, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, zero)

    return relu_plain if x.ndim else (lambda ctx, x: as_array(np.maximum(x, zero)))  # 0-d: ufuncs give scalars


@_activation("Relu", "Y = max(X, 0).", _specialize_relu)
def relu(ctx: Any, x: Any) -> np.ndarray:
    if type(x) is _nd and x.dtype in _ZERO:  # a 0 of X's dtype: numpy skips the Python-int conversion
        return as_array(np.maximum(x, _ZERO[x.dtype]))
    if cpu_tensors(x) and x.is_floating_point():
        return x.relu()
    x = float_array(ctx, x, 0)
    return as_array(namespace(ctx, x).maximum(x, 0))


@_activation("Sigmoid", "Y = 1 / (1 + exp(-X)), computed without overflow.")
def sigmoid(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x)
    e = xp.exp(-xp.abs(x))
    return xp.astype(xp.result(xp.where(x >= 0, 1 / (1 + e), e / (1 + e))), x)


@_activation("Tanh", "Y = tanh(X).")
def tanh(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    return as_array(namespace(ctx, x).tanh(x))


@register_op(
    "Softmax",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    args=[Arg("axis", int, 1, "X is flattened to 2-D from this axis; softmax runs over the columns")],
    doc="Softmax over the trailing dims: X viewed as [prod(dims[:axis]), prod(dims[axis:])].",
)
def softmax(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x)
    x2 = flatten_2d(x, canonical_axis(ctx, x, "axis"))
    z = x2 - xp.amax(x2, axis=1, keepdims=True) if xp.size(x2) else x2
    e = xp.exp(z)
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


__all__ = ["fc", "fc_transposed", "fc_shapes", "relu", "sigmoid", "tanh", "softmax", "same_dtype"]
