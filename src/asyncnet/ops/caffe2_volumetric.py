"""Caffe2's convolution and pooling on volumes: X [N, C, D, H, W] (or NDHWC with order=NHWC).

The 2-D kernels of :mod:`asyncnet.ops.conv` and :mod:`asyncnet.ops.pool` hand a 5-D input to
the kernels here (see :func:`volumetric`), so ``Conv``, ``MaxPool`` and ``AveragePool`` take
volumes as Caffe2's do, and ``Conv3D``, ``MaxPool3D``, ``AveragePool3D`` are the same ops under
their 3-D names. Window arguments: ``kernels``/``kernel`` (Conv: the filter's size when not
given), ``strides``/``stride``, ``dilations``/``dilation``, ``pads`` (the D, H, W head pads,
then the tail pads) or ``pad``, and ``global_pooling``.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(8, dtype=np.float32).reshape(1, 1, 2, 2, 2))
    >>> net = an.Net("pool3d"); _ = net.MaxPool3D("x", "y", kernels=[2, 2, 2])
    >>> ws.run_net_once(net); ws.fetch("y").reshape(-1)
    array([7.], dtype=float32)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from asyncnet.ops._check import float_array, same_dtype

__all__ = [
    "Window",
    "window",
    "padded",
    "patches",
    "tap_slices",
    "unpadded",
    "volumetric",
    "conv_nd",
    "conv_nd_gradient",
    "pool_nd",
    "pool_nd_gradient",
]

SPATIAL = 3  # the spatial dimensions of a volume


@dataclass(frozen=True)
class Window:
    """Kernel, stride, dilation, head and tail pads, and output size along each spatial axis."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    head: tuple[int, ...]
    tail: tuple[int, ...]
    out: tuple[int, ...]

    def extent(self, i: int) -> int:
        """The span of the dilated kernel along axis ``i``."""
        return self.dilation[i] * (self.kernel[i] - 1) + 1


def _per_axis(args: dict[str, Any], many: str, one: str, default: int, n: int) -> tuple[int, ...]:
    values = args.get(many) or []
    if values:
        if len(values) != n:
            raise ValueError(f"expected {many} of length {n} for a {n}-D window, got {list(values)}")
        return tuple(int(v) for v in values)
    return (int(args.get(one) or default),) * n


def _check_2d_only(args: dict[str, Any]) -> None:
    for name in ("kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h", "dilation_w"):
        if args.get(name, 0) not in (0, -1):
            raise ValueError(f"argument {name} is for 2-D inputs; a volume takes {name.split('_')[0]}s")
    for side in "tlbr":
        if args.get(f"pad_{side}", -1) != -1:
            raise ValueError(f"argument pad_{side} is for 2-D inputs; a volume takes pads")
    if args.get("legacy_pad", 0):
        raise ValueError("legacy_pad is supported for 2-D inputs only; give the pads of a volume")


def window(args: dict[str, Any], size: tuple[int, ...], kernel: tuple[int, ...] | None = None) -> Window:
    """The window of an op with Caffe2's ``args`` on spatial ``size``; ``kernel`` is Conv's filter
    size. Example: ``window({"kernels": [2, 2, 2]}, (4, 4, 4)).out == (3, 3, 3)``."""
    _check_2d_only(args)
    n = len(size)
    if args.get("global_pooling"):
        return Window(tuple(size), (1,) * n, (1,) * n, (0,) * n, (0,) * n, (1,) * n)
    given = _per_axis(args, "kernels", "kernel", 0, n)
    if kernel is None:
        if 0 in given:
            raise ValueError(f"expected kernels (or kernel) > 0 for a {n}-D pool, got {list(given)}")
        kernel = given
    elif any(given) and given != kernel:
        raise ValueError(f"expected kernels {list(kernel)} (the filter's size), got {list(given)}")
    stride = _per_axis(args, "strides", "stride", 1, n)
    dilation = _per_axis(args, "dilations", "dilation", 1, n)
    pads = args.get("pads") or [int(args.get("pad") or 0)] * (2 * n)
    if len(pads) != 2 * n:
        raise ValueError(f"expected pads of length {2 * n} (heads, then tails) for a {n}-D window, got {list(pads)}")
    if min(stride) < 1 or min(dilation) < 1 or min(pads) < 0:
        raise ValueError(f"expected strides, dilations >= 1 and pads >= 0, got {stride}, {dilation}, {list(pads)}")
    head, tail = tuple(int(p) for p in pads[:n]), tuple(int(p) for p in pads[n:])
    out = []
    for i in range(n):
        span = size[i] + head[i] + tail[i] - (dilation[i] * (kernel[i] - 1) + 1)
        if span < 0:
            raise ValueError(
                f"expected the padded input ({size[i]} + {head[i]} + {tail[i]}) along spatial axis {i} to hold "
                f"the dilated kernel of {dilation[i] * (kernel[i] - 1) + 1}"
            )
        out.append(span // stride[i] + 1)
    return Window(tuple(kernel), stride, dilation, head, tail, tuple(out))


def padded(x: np.ndarray, w: Window, value: float = 0.0) -> np.ndarray:
    widths = ((0, 0), (0, 0), *zip(w.head, w.tail))
    return np.pad(x, widths, constant_values=value) if any(w.head + w.tail) else x


def patches(xp: np.ndarray, w: Window) -> np.ndarray:
    """[N, C, *out, *kernel]: each output position's window of the padded input (a view)."""
    n = len(w.kernel)
    axes = tuple(range(2, 2 + n))
    extents = tuple(w.extent(i) for i in range(n))
    view = sliding_window_view(xp, extents, axis=axes)
    picks = (slice(None), slice(None))
    picks += tuple(slice(None, (w.out[i] - 1) * w.stride[i] + 1, w.stride[i]) for i in range(n))
    picks += tuple(slice(None, None, w.dilation[i]) for i in range(n))
    return view[picks]


def tap_slices(w: Window) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel tap: its index and the slices of the padded input it reads for all outputs."""
    n = len(w.kernel)
    out = []
    for tap in itertools.product(*(range(k) for k in w.kernel)):
        starts = [tap[i] * w.dilation[i] for i in range(n)]
        spans = tuple(slice(starts[i], starts[i] + (w.out[i] - 1) * w.stride[i] + 1, w.stride[i]) for i in range(n))
        out.append((tap, spans))
    return out


def unpadded(xp: np.ndarray, w: Window) -> np.ndarray:
    cut = tuple(slice(h, xp.shape[2 + i] - t) for i, (h, t) in enumerate(zip(w.head, w.tail)))
    return np.ascontiguousarray(xp[(slice(None), slice(None), *cut)])


# -- convolution -----------------------------------------------------------------------------------


def conv_nd(x: np.ndarray, f: np.ndarray, b: np.ndarray | None, w: Window, group: int) -> np.ndarray:
    """Y [N, M, *out] = sum over C/group and the kernel of X's windows times filter ``f`` [M, C/group, *k]."""
    n, c = x.shape[:2]
    m, k = f.shape[0], len(w.kernel)
    cols = patches(padded(x, w), w)  # N, C, *out, *kernel
    cols = cols.reshape(n, group, c // group, *w.out, *w.kernel)
    fg = f.reshape(group, m // group, c // group, *w.kernel)
    y = _grouped_product(cols, fg, k)
    y = y.reshape(n, m, *w.out)
    if b is not None:
        y = y + b.reshape(m, *(1,) * k)
    return np.ascontiguousarray(y.astype(x.dtype, copy=False))


def _grouped_product(cols: np.ndarray, fg: np.ndarray, k: int) -> np.ndarray:
    """[N, group, M/group, *out]: per group, the windows [N, C/g, *out, *kernel] against [M/g, C/g, *kernel]."""
    parts = []
    for g in range(cols.shape[1]):
        c_g = cols[:, g]  # N, C/g, *out, *kernel
        axes_x = [1, *range(2 + k, 2 + 2 * k)]
        axes_f = [1, *range(2, 2 + k)]
        prod = np.tensordot(c_g, fg[g], axes=(axes_x, axes_f))  # N, *out, M/g
        parts.append(np.moveaxis(prod, -1, 1))
    return np.stack(parts, axis=1)


def conv_nd_gradient(
    x: np.ndarray, f: np.ndarray, dy: np.ndarray, w: Window, group: int, want_dx: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(dfilter, dbias, dX or None) of :func:`conv_nd` for the output gradient ``dy`` [N, M, *out]."""
    n, c = x.shape[:2]
    m, k = f.shape[0], len(w.kernel)
    cg, mg = c // group, m // group
    xp = padded(x, w)
    cols = patches(xp, w).reshape(n, group, cg, *w.out, *w.kernel)
    dyg = dy.reshape(n, group, mg, *w.out)
    out_axes = list(range(2, 2 + k))
    df = np.empty(f.shape, x.dtype)
    for g in range(group):  # dF[m, c, kernel] = sum over N and out of dY[n, m, out] X-window[n, c, out, kernel]
        df[g * mg : (g + 1) * mg] = np.tensordot(dyg[:, g], cols[:, g], axes=([0, *out_axes], [0, *out_axes]))
    db = dy.sum(axis=(0, *range(2, 2 + k))).astype(x.dtype)
    if not want_dx:
        return df, db, None
    dxp = np.zeros(xp.shape, x.dtype)
    fg = f.reshape(group, mg, cg, *w.kernel)
    for tap, spans in tap_slices(w):
        for g in range(group):  # each tap adds dY times its filter weights onto the inputs it read
            contrib = np.tensordot(dyg[:, g], fg[(g, slice(None), slice(None), *tap)], axes=([1], [0]))
            dxp[(slice(None), slice(g * cg, (g + 1) * cg), *spans)] += np.moveaxis(contrib, -1, 1)
    return df, db, unpadded(dxp, w)


# -- pooling ---------------------------------------------------------------------------------------


def _counts(shape: tuple[int, ...], w: Window, include_pad: bool, dtype: Any) -> np.ndarray:
    if include_pad:
        return np.full(w.out, float(np.prod(w.kernel)), dtype)
    ones = padded(np.ones((1, 1, *shape), dtype), w)
    return patches(ones, w).sum(axis=tuple(range(2 + len(w.kernel), 2 + 2 * len(w.kernel))))[0, 0]


def pool_nd(x: np.ndarray, w: Window, mode: str, include_pad: bool = False) -> np.ndarray:
    """Max (padding never wins) or average (padding counted only with ``include_pad``) of each window."""
    k = len(w.kernel)
    kernel_axes = tuple(range(2 + k, 2 + 2 * k))
    if mode == "max":
        return np.ascontiguousarray(patches(padded(x, w, -np.inf), w).max(axis=kernel_axes))
    sums = patches(padded(x, w), w).sum(axis=kernel_axes)
    return np.ascontiguousarray((sums / _counts(x.shape[2:], w, include_pad, x.dtype)).astype(x.dtype))


def pool_nd_gradient(
    x: np.ndarray, y: np.ndarray | None, dy: np.ndarray, w: Window, mode: str, include_pad: bool = False
) -> np.ndarray:
    """dX of :func:`pool_nd`: max gives each input equal to its window's maximum that window's dY;
    average spreads dY / count over each window."""
    xp = padded(x, w, -np.inf if mode == "max" else 0.0)
    dxp = np.zeros(xp.shape, x.dtype)
    share = dy if mode == "max" else dy / _counts(x.shape[2:], w, include_pad, x.dtype)
    for _, spans in tap_slices(w):
        at = (slice(None), slice(None), *spans)
        dxp[at] += np.where(xp[at] == y, share, 0) if mode == "max" else share
    return unpadded(dxp, w)


# -- dispatch from the 2-D ops ---------------------------------------------------------------------


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def _to_first(a: Any) -> Any:
    return np.ascontiguousarray(np.moveaxis(a, -1, 1)) if getattr(a, "ndim", 0) == 2 + SPATIAL else a


def _to_last(a: Any) -> Any:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if getattr(a, "ndim", 0) == 2 + SPATIAL else a


def volumetric(nd_kernel: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a 5-D first input goes to ``nd_kernel(ctx, *arrays)`` (NCDHW; order=NHWC
    inputs and results are permuted around it), any other to the decorated 2-D kernel."""

    def wrap(kernel: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(kernel)
        def run(ctx: Any, *arrays: Any) -> Any:
            if getattr(arrays[0], "ndim", 0) != 2 + SPATIAL:
                return kernel(ctx, *arrays)
            if hasattr(arrays[0], "detach"):
                raise TypeError("volumes are supported as numpy arrays; got a torch tensor")
            if ctx.args.get("order", "NCHW") != "NHWC":
                return nd_kernel(ctx, *arrays)
            out = nd_kernel(ctx, *(_to_first(_np(a)) for a in arrays))
            return tuple(_to_last(o) for o in out) if isinstance(out, tuple) else _to_last(out)

        return run

    return wrap


def _float_inputs(ctx: Any, arrays: tuple[Any, ...]) -> list[np.ndarray]:
    out = [float_array(ctx, a, i) for i, a in enumerate(arrays)]
    same_dtype(ctx, out)
    return out


def conv_kernel(ctx: Any, x: Any, f: Any, b: Any = None) -> np.ndarray:
    """The Conv kernel of a volume: X [N, C, D, H, W], filter [M, C/group, kd, kh, kw], bias [M]."""
    x, f, *rest = _float_inputs(ctx, (x, f) if b is None else (x, f, b))
    group = _checked_group(ctx, x, f)
    if rest and rest[0].shape != (f.shape[0],):
        raise ValueError(f"expected a bias of shape ({f.shape[0]},), got {rest[0].shape}")
    w = window(ctx.args, tuple(x.shape[2:]), tuple(f.shape[2:]))
    return conv_nd(x, f, rest[0] if rest else None, w, group)


def _checked_group(ctx: Any, x: np.ndarray, f: np.ndarray) -> int:
    group = ctx.args.get("group", 1)
    c, m = x.shape[1], f.shape[0]
    if f.ndim != x.ndim or group < 1 or c % group or m % group or f.shape[1] != c // group:
        raise ValueError(
            f"expected a filter [M, C/group, kd, kh, kw] with C={c} and M divisible by group={group}, "
            f"got {tuple(f.shape)}"
        )
    return group


def conv_gradient_kernel(ctx: Any, x: Any, f: Any, dy: Any) -> Any:
    """ConvGradient of a volume: dfilter, then dbias unless no_bias, then dX when asked for."""
    x, f, dy = _float_inputs(ctx, (x, f, dy))
    group = _checked_group(ctx, x, f)
    w = window(ctx.args, tuple(x.shape[2:]), tuple(f.shape[2:]))
    want = (x.shape[0], f.shape[0], *w.out)
    if dy.shape != want:
        raise ValueError(f"expected dY of shape {want}, got {dy.shape}")
    no_bias = ctx.args.get("no_bias", False)
    n_out = len(ctx.op.outputs)
    if no_bias and n_out == 3:
        raise ValueError("expected at most 2 outputs (dfilter, dX) with no_bias=1, got 3")
    df, db, dx = conv_nd_gradient(x, f, dy, w, group, want_dx=n_out == (2 if no_bias else 3))
    outs = [df] if no_bias else [df, db]
    if dx is not None:
        outs.append(dx)
    return outs[0] if n_out == 1 else tuple(outs[:n_out])


def pool_kernel(mode: str) -> Callable[..., np.ndarray]:
    """The MaxPool ("max") or AveragePool ("average") kernel of a volume."""

    def run(ctx: Any, x: Any) -> np.ndarray:
        (x,) = _float_inputs(ctx, (x,))
        w = window(ctx.args, tuple(x.shape[2:]))
        return pool_nd(x, w, mode, ctx.args.get("count_include_pad", False))

    return run


def pool_gradient_kernel(mode: str) -> Callable[..., np.ndarray]:
    """MaxPoolGradient (X, Y, dY) or AveragePoolGradient (X, [Y,] dY) of a volume."""

    def run(ctx: Any, x: Any, *rest: Any) -> np.ndarray:
        arrays = _float_inputs(ctx, (x, *rest))
        x, dy = arrays[0], arrays[-1]
        y = arrays[1] if mode == "max" else None
        w = window(ctx.args, tuple(x.shape[2:]))
        want = (*x.shape[:2], *w.out)
        if dy.shape != want or (y is not None and y.shape != want):
            raise ValueError(f"expected Y and dY of shape {want}, got {[a.shape for a in arrays[1:]]}")
        return pool_nd_gradient(x, y, dy, w, mode, ctx.args.get("count_include_pad", False))

    return run
