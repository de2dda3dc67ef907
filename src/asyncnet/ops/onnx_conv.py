"""ONNX's Conv with what follows it fused: ``ONNXConv`` computes ``act(conv(X, W) + B + Z)``.

The importer makes one ``ONNXConv`` of an ONNX ``Conv`` (2-D, explicit pads), of a Conv and the
``Relu`` or constant ``Clip`` that alone reads it (``activation``), and of a Conv, the ``Add`` of
a tensor ``Z`` of the Conv's output shape that alone reads it, and that Add's own lone ``Relu``
or ``Clip`` (``residual``: a ResNet block's end). The sum and the activation are applied in
place on the convolution's fresh output: no intermediate arrays, one op instead of two or three.

Kernels. On torch tensors, torch's ``conv2d`` then in-place ``add_``/``relu_``/``clamp_``. On
numpy float32/float64 arrays, when torch is installed, the same torch calls on zero-copy views
(``torch.from_numpy``): torch's CPU convolution beats im2col + sgemm for every filter but one
kind, the pointwise one (1x1, stride 1, no pads, one group), which from batch
:data:`POINTWISE_NUMPY_BATCH` on stays numpy's one matmul per example (2-4x torch's at batch 32). Without torch, and for float16, asyncnet's ``Conv`` kernel
(:func:`asyncnet.ops.conv.conv_forward`) and numpy's in-place ufuncs. The choice depends only
on the inputs' types, dtypes and shapes and the installation, so a net gives the same bits run
after run.

    >>> import asyncnet as an, numpy as np
    >>> ws = an.Workspace()
    >>> ws.feed("x", np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) - 4)
    >>> ws.feed("w", np.ones((1, 1, 1, 1), np.float32))
    >>> net = an.Net("n"); _ = net.ONNXConv(["x", "w"], "y", kernels=[1, 1], bias=False, activation="Relu")
    >>> ws.run_net_once(net); ws.fetch("y")[0, 0].tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [2.0, 3.0, 4.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops.conv import Geometry, _conv_inputs, _symmetric, conv_forward, pad_input
from asyncnet.ops.conv import _torch as torch_if_installed
from asyncnet.ops.pool import _input as _pool_input
from asyncnet.ops.pool import _tiled, max_pool
from asyncnet.tensor.namespace import is_torch

__all__ = ["onnx_conv", "onnx_max_pool", "ACTIVATIONS"]

ACTIVATIONS = ("", "Relu", "Clip")
_TORCH_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _validate(op: Any) -> None:
    want = 2 + bool(op.args.get("bias", True)) + bool(op.args.get("residual", False))
    if len(op.inputs) != want:
        raise ValueError(
            f"expected {want} inputs (X, W{', B' if op.args.get('bias', True) else ''}"
            f"{', Z' if op.args.get('residual') else ''}) for bias={op.args.get('bias', True)}, "
            f"residual={op.args.get('residual', False)}, got {len(op.inputs)}"
        )
    if op.args.get("activation", "") != "Clip" and (op.args.get("min") is not None or op.args.get("max") is not None):
        raise ValueError("min and max are arguments of activation='Clip' only")


def _extras(ctx: Any, rest: tuple[Any, ...]) -> tuple[Any, Any]:
    """(B or None, Z or None) from the inputs after X and W."""
    b = rest[0] if ctx.args["bias"] else None
    z = rest[-1] if ctx.args["residual"] else None
    return b, z


def _pointwise(w: Any, g: Geometry, grp: int) -> bool:
    return grp == 1 and tuple(w.shape[2:]) == (1, 1) and g.stride == (1, 1) and not any(g.pads) and g.dilation == (1, 1)


#: batch from which a pointwise filter runs as numpy's matmuls (2-4x torch's 1x1 convolution at batch 32,
#: 1.1-1.4x slower than it below 8: measured on MobileNet's and Inception's shapes, one thread)
POINTWISE_NUMPY_BATCH = 16


def _torch_for(x: Any, w: Any, g: Geometry, grp: int) -> Any:
    """torch, when numpy arrays ``x``, ``w`` are convolved by torch's kernel (see the module doc); else None."""
    if x.dtype not in _TORCH_FLOATS or (x.shape[0] >= POINTWISE_NUMPY_BATCH and _pointwise(w, g, grp)):
        return None
    return torch_if_installed()


def _conv_torch(torch: Any, x: Any, w: Any, b: Any, g: Geometry, grp: int) -> Any:
    pads = _symmetric(g)
    if pads is None:
        x, pads = pad_input(x, g), (0, 0)
    return torch.conv2d(x, w, b, g.stride, pads, g.dilation, grp)


def _finish_torch(y: Any, z: Any, act: str, lo: Any, hi: Any) -> Any:
    if z is not None:
        y.add_(z)
    if act == "Relu":
        y.relu_()
    elif act == "Clip" and (lo is not None or hi is not None):
        y.clamp_(lo, hi)
    return y


def _finish_numpy(y: np.ndarray, z: Any, act: str, lo: Any, hi: Any) -> np.ndarray:
    if z is not None:
        np.add(y, z, out=y)
    if act == "Relu":
        np.maximum(y, y.dtype.type(0), out=y)
    elif act == "Clip" and (lo is not None or hi is not None):
        t = y.dtype.type
        np.clip(y, None if lo is None else t(lo), None if hi is None else t(hi), out=y)
    return y


def _check_z(ctx: Any, z: Any, x: Any, out: tuple[int, ...]) -> None:
    if z is None:
        return
    if type(z) is not type(x) and not (is_torch(z) and is_torch(x)):
        raise TypeError(f"expected Z {ctx.op.inputs[-1]!r} of X's library ({type(x).__name__}), got {type(z).__name__}")
    if tuple(z.shape) != out or z.dtype != x.dtype:
        raise ValueError(
            f"expected Z {ctx.op.inputs[-1]!r} of the convolution's shape {out} and dtype {x.dtype}, "
            f"got {tuple(z.shape)} {z.dtype}"
        )


def _specialize(ctx: Any, x: Any, w: Any, *rest: Any) -> Callable[..., Any] | None:
    """For numpy float arrays that pass the general kernel's checks: the convolution with its
    geometry and kernel chosen once (the general kernel's calls, so the same bits)."""
    if type(x) is not np.ndarray or type(w) is not np.ndarray or x.dtype not in _TORCH_FLOATS:
        return None
    if any(type(r) is not np.ndarray for r in rest) or ctx.device.device_type != "cpu":
        return None
    x, w, grp, g = _conv_inputs(ctx, x, w)
    b, z = _extras(ctx, rest)
    if b is not None and (b.dtype != x.dtype or b.shape != (w.shape[0],)):
        return None
    out = (x.shape[0], w.shape[0], *g.out)
    _check_z(ctx, z, x, out)
    act, lo, hi = ctx.args["activation"], ctx.args["min"], ctx.args["max"]
    has_b, has_z = b is not None, z is not None
    torch = _torch_for(x, w, g, grp)
    if torch is None:

        def conv_numpy(ctx: Any, x: Any, w: Any, *rest: Any) -> Any:
            y = conv_forward(x, w, rest[0] if has_b else None, g, grp)
            return _finish_numpy(y, rest[-1] if has_z else None, act, lo, hi)

        return conv_numpy
    t, asc = torch.from_numpy, np.ascontiguousarray
    pads = _symmetric(g)
    if pads is None:
        return None  # the general kernel pads first
    conv2d, stride, dil = torch.conv2d, g.stride, g.dilation

    def conv_torch(ctx: Any, x: Any, w: Any, *rest: Any) -> Any:
        y = conv2d(t(asc(x)), t(asc(w)), t(rest[0]) if has_b else None, stride, pads, dil, grp)
        return _finish_torch(y, t(asc(rest[-1])) if has_z else None, act, lo, hi).numpy()

    return conv_torch


@register_op(
    "ONNXConv",
    inputs=(2, 4),
    outputs=1,
    args=[
        Arg("kernels", list, Arg.REQUIRED, "[kh, kw], the filter's size", item_type=int),
        Arg("strides", list, [1, 1], "[sh, sw]", item_type=int),
        Arg("pads", list, [0, 0, 0, 0], "[top, left, bottom, right]", item_type=int),
        Arg("dilations", list, [1, 1], "[dh, dw]", item_type=int),
        Arg("group", int, 1, "groups of channels"),
        Arg("bias", bool, True, "input 2 is the bias B [M]"),
        Arg("residual", bool, False, "the last input Z (the output's shape) is added before the activation"),
        Arg("activation", str, "", "applied last, in place", choices=ACTIVATIONS),
        Arg("min", float, None, "Clip's lower bound (none if not given)"),
        Arg("max", float, None, "Clip's upper bound (none if not given)"),
    ],
    devices=("cpu", "cuda"),
    validate=_validate,
    specialize=_specialize,
    inputs_doc=("X [N, C, H, W]", "W [M, C/group, kh, kw]", "B [M] (bias=1)", "Z [N, M, OH, OW] (residual=1)"),
    outputs_doc=("Y [N, M, OH, OW]",),
    doc="Y = activation(conv(X, W) + B + Z): ONNX's 2-D Conv (NCHW, explicit pads) with the Relu or Clip, "
    "and the residual Add, that the importer fuses into it.",
)
def onnx_conv(ctx: Any, x: Any, w: Any, *rest: Any) -> Any:
    x, w, grp, g = _conv_inputs(ctx, x, w)
    b, z = _extras(ctx, rest)
    _check_z(ctx, z, x, (x.shape[0], w.shape[0], *g.out))
    act, lo, hi = ctx.args["activation"], ctx.args["min"], ctx.args["max"]
    if is_torch(x):
        return _finish_torch(_conv_torch(_torch_module(), x, w, b, g, grp), z, act, lo, hi)
    torch = _torch_for(x, w, g, grp)
    if torch is None:
        return _finish_numpy(conv_forward(x, w, b, g, grp), z, act, lo, hi)
    t, asc = torch.from_numpy, np.ascontiguousarray
    y = _conv_torch(torch, t(asc(x)), t(asc(w)), None if b is None else t(asc(b)), g, grp)
    return _finish_torch(y, None if z is None else t(asc(z)), act, lo, hi).numpy()


def _torch_module() -> Any:
    import torch

    return torch


_max_pool_nchw = max_pool.__wrapped__  # MaxPool's NCHW kernel, without Caffe2's order argument


def _specialize_max_pool(ctx: Any, x: Any) -> Callable[..., Any] | None:
    """The general kernel itself for numpy arrays (its cost is in the windows, not the checks):
    nets of ONNXMaxPool and ops with fast kernels are specialized."""
    return onnx_max_pool if type(x) is np.ndarray else None


@register_op(
    "ONNXMaxPool",
    outputs=1,
    args=[
        Arg("kernels", list, Arg.REQUIRED, "[kh, kw]", item_type=int),
        Arg("strides", list, [1, 1], "[sh, sw]", item_type=int),
        Arg("pads", list, [0, 0, 0, 0], "[top, left, bottom, right]", item_type=int),
    ],
    devices=("cpu", "cuda"),
    specialize=_specialize_max_pool,
    inputs_doc=("X [N, C, H, W]",),
    outputs_doc=("Y [N, C, OH, OW]",),
    doc="Y = the maximum of each window of X (ONNX MaxPool, 2-D, floor mode, explicit pads: padding never wins); "
    "the kernel of asyncnet's MaxPool.",
)
def onnx_max_pool(ctx: Any, x: Any) -> Any:
    host = x.numpy() if _cpu_float_tensor(x) else x
    if type(host) is np.ndarray and host.ndim == 4 and host.dtype.kind == "f":
        host, g = _pool_input(ctx, host)
        if not _tiled(host, g) and g.dilation == (1, 1) and min(g.out) > 0 and host.size:
            y = _separable_max(host, g)
            return y if host is x else _torch_module().from_numpy(y)
    return _max_pool_nchw(ctx, x)


def _cpu_float_tensor(x: Any) -> bool:
    """A CPU float32/float64 torch tensor outside autograd (numpy views it; torch's own NCHW
    max pool costs 5x the separable one on 3x3 windows)."""
    if not is_torch(x) or x.device.type != "cpu" or x.requires_grad:
        return False
    torch = _torch_module()
    return x.dtype in (torch.float32, torch.float64)


def _padded(x: np.ndarray, pads: tuple[int, ...], value: float) -> np.ndarray:
    """A C-contiguous copy of ``x`` [N, C, H, W] with ``pads`` (top, left, bottom, right) of ``value``
    around H and W (only the border is filled: np.pad's general path costs twice this)."""
    t, l, b, r = pads
    n, c, h, w = x.shape
    xp = np.empty((n, c, h + t + b, w + l + r), x.dtype)
    xp[:, :, :t], xp[:, :, t + h :] = value, value
    xp[:, :, t : t + h, :l], xp[:, :, t : t + h, l + w :] = value, value
    xp[:, :, t : t + h, l : l + w] = x
    return xp


def _separable_max(x: np.ndarray, g: Geometry) -> np.ndarray:
    """The window maxima of a float ``x`` as maxima of maxima: on the padded input seen as one flat
    array, the maximum of each run of ``kw`` neighbours, then of ``kh`` such runs a padded row
    apart; the windows' values are read from there at the output pixels. kh + kw - 2 elementwise
    maxima over contiguous memory instead of kh * kw - 1 over strided windows; max is exact, so
    these are the windows' maxima, NaN propagating (runs crossing a row's end are never read)."""
    (kh, kw), (sh, sw), (oh, ow) = g.kernel, g.stride, g.out
    xp = _padded(x, g.pads, -np.inf)
    n, c, hp, wp = xp.shape
    flat = xp.reshape(-1)
    size = flat.size - (kw - 1)
    rows = flat[:size] if kw == 1 else np.maximum(flat[:size], flat[1 : size + 1])
    for j in range(2, kw):
        np.maximum(rows, flat[j : j + size], out=rows)
    size -= (kh - 1) * wp
    win = rows[:size] if kh == 1 else np.maximum(rows[:size], rows[wp : wp + size])
    for i in range(2, kh):
        np.maximum(win, rows[i * wp : i * wp + size], out=win)
    step = win.itemsize
    picked = np.lib.stride_tricks.as_strided(
        win, (n, c, oh, ow), (c * hp * wp * step, hp * wp * step, sh * wp * step, sw * step), writeable=False
    )
    return picked.copy()
