"""2-D convolution (NCHW, or NHWC through in_order) beside its gradient, with Caffe2's arguments, and the window geometry
that the pooling ops share.

The kernel is im2col: the padded input is laid out batch-last ([C, H, W, N], so that every
strided copy moves runs of N contiguous values), ``as_strided`` gives every receptive field as a
view of it, one copy makes it a matrix, and one matmul per group does the arithmetic (numpy's
BLAS, which releases the GIL). The gradient adds the columns back with one strided add per kernel tap and
group (``kh * kw`` numpy calls, never a loop over pixels).

Caffe2's spellings are all accepted: ``kernel`` or ``kernel_h``/``kernel_w`` or ``kernels``
(for Conv they default to the filter's size), ``stride``/``stride_h``/``stride_w``/``strides``,
``pad``/``pad_t``/``pad_l``/``pad_b``/``pad_r``/``pads`` (``pads`` is [t, l, b, r]), and
``dilation``/``dilation_h``/``dilation_w``/``dilations``; the per-side forms win over the
shared one. Output size: ``(H + pad_t + pad_b - dilation*(kernel-1) - 1) // stride + 1``.

On torch tensors Conv runs torch's own kernel (``F.conv2d``; an input padded by ``F.pad`` when
Caffe2's pads are asymmetric) and ConvGradient calls torch's ``convolution_backward`` (no
forward recomputed); the results agree with the numpy kernel within float rounding.

Which library: im2col and one sgemm win on small filters (few input channels: the zoo's CNN
runs 2-3x faster on numpy than on torch), torch's native convolution on wide ones (a reduction
of ``C/group * kh * kw`` >= :data:`TORCH_MIN_REDUCTION`: Conv 16->32 3x3 on 4x4 images runs
1.3x faster forward and backward, measured with ``benchmarks/op_libraries.py`` and ``asyncnet
bench layers``), and on depthwise ones (one input channel per group: MobileNet's 3x3 convolutions
of 32-128 channels run 5-15x faster). So numpy arrays with a wide or depthwise filter run torch's kernel on zero-copy views
(``torch.from_numpy``) when torch is installed (imported at the first such call, its threads
kept within the budget of :mod:`asyncnet.tensor.threads`), and give numpy arrays back; the
choice depends on the shapes and the installation only, so every run, every executor and every
process of a run gets the same bits. A 1x1 convolution (stride 1, no pads, one group) on numpy
is one matmul per example in NCHW (no im2col).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> ws.feed("x", np.ones((1, 1, 4, 4), np.float32)); ws.feed("w", np.ones((2, 1, 3, 3), np.float32))
    >>> ws.feed("b", np.zeros(2, np.float32))
    >>> net = an.Net("conv"); _ = net.Conv(["x", "w", "b"], "y", pad=1)
    >>> ws.run_net_once(net)
    >>> ws.fetch("y")[0, 0]
    array([[4., 6., 6., 4.],
           [6., 9., 9., 6.],
           [6., 9., 9., 6.],
           [4., 6., 6., 4.]], dtype=float32)
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops import caffe2_volumetric as volume
from asyncnet.ops._check import check_alloc, float_array, ndim, same_dtype
from asyncnet.ops._half import to_half
from asyncnet.ops.caffe2_volumetric import volumetric
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import is_torch, loaded_torch, namespace

__all__ = [
    "Geometry",
    "geometry",
    "cached_geometry",
    "in_order",
    "taps",
    "im2col",
    "conv",
    "conv_gradient",
    "WINDOW_ARGS",
    "KERNEL_ARGS",
    "legacy_size_and_pad",
]

ORDER = Arg(
    "order", str, "NCHW", "memory order: NCHW, or NHWC (filters [M, kh, kw, C/group])", choices=("NCHW", "NHWC")
)
KERNEL_ARGS = [
    Arg("kernel", int, 0, "kernel size, both dims (0: not given)"),
    Arg("kernel_h", int, 0),
    Arg("kernel_w", int, 0),
    Arg("kernels", list, [], "[kernel_h, kernel_w]", item_type=int),
]
WINDOW_ARGS = [
    Arg("stride", int, 1),
    Arg("stride_h", int, 0, "0: use stride"),
    Arg("stride_w", int, 0, "0: use stride"),
    Arg("strides", list, [], "[stride_h, stride_w]", item_type=int),
    Arg("pad", int, 0),
    *(Arg(f"pad_{s}", int, -1, "-1: use pad") for s in "tlbr"),
    Arg("pads", list, [], "[pad_t, pad_l, pad_b, pad_r]", item_type=int),
    ORDER,
    Arg(
        "legacy_pad",
        int,
        0,
        "Caffe2's LegacyPadding: 0 NOTSET (the pads given), 1 VALID (no pad), 2 SAME "
        "(out = ceil(in / stride), the odd pad at the tail), 3 CAFFE_LEGACY_POOLING (Caffe's ceil-mode "
        "output size; the head pads given, the tail pads derived)",
        choices=(0, 1, 2, 3),
    ),
]
DILATION_ARGS = [
    Arg("dilation", int, 1),
    Arg("dilation_h", int, 0, "0: use dilation"),
    Arg("dilation_w", int, 0, "0: use dilation"),
    Arg("dilations", list, [], "[dilation_h, dilation_w]", item_type=int),
]


def _permuted(x: Any, axes: tuple[int, ...]) -> Any:
    if is_torch(x):
        return x.permute(*axes).contiguous() if x.dim() == 4 else x
    return np.ascontiguousarray(x.transpose(axes)) if isinstance(x, np.ndarray) and x.ndim == 4 else x


def _each(out: Any, fn: Callable[[Any], Any]) -> Any:
    return tuple(fn(o) for o in out) if isinstance(out, tuple) else fn(out)


def in_order(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """Run a 2-D NCHW ``kernel`` under Caffe2's ``order`` argument and its 1-D form: with
    order=NHWC every 4-D input (X, a filter [M, kh, kw, C/group], dY) is permuted to NCHW and
    every 4-D result back; a 3-D X ([N, C, L], Caffe2's 1-D op) is run as an image of height 1
    (see :func:`_one_d`). One kernel serves every form, at the price of the copies."""

    @functools.wraps(kernel)
    def run(ctx: Any, *arrays: Any) -> Any:
        if getattr(arrays[0], "ndim", 0) == 3:
            return _one_d(run, ctx, arrays)
        if ctx.args["order"] != "NHWC":
            return kernel(ctx, *arrays)
        out = kernel(ctx, *(_permuted(a, (0, 3, 1, 2)) for a in arrays))
        return _each(out, lambda o: _permuted(o, (0, 2, 3, 1)))

    return run


class _WithArgs:
    """``ctx`` as a kernel sees it, with other args (a 1-D op's window arguments made 2-D)."""

    __slots__ = ("_ctx", "args")

    def __init__(self, ctx: Any, args: dict[str, Any]):
        self._ctx, self.args = ctx, args

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


_AS_2D = "_one_d_context"  # key in the op instance's own args dict holding its 2-D view
_PER_SIDE = (
    "kernel_h",
    "kernel_w",
    "stride_h",
    "stride_w",
    "pad_t",
    "pad_l",
    "pad_b",
    "pad_r",
    "dilation_h",
    "dilation_w",
)


def _one_d(run: Callable[..., Any], ctx: Any, arrays: tuple[Any, ...]) -> Any:
    """Caffe2's 1-D Conv and pools (X [N, C, L] or [N, L, C], filter [M, C/group, k]): every 3-D
    array gets a height of 1, the window arguments (kernel(s), stride(s), pads [l, r],
    dilation(s)) become those of a 1 x k window, and the results lose the height again."""
    sub = ctx.args.get(_AS_2D)
    if sub is None:
        sub = ctx.args[_AS_2D] = _WithArgs(ctx, _args_as_2d(ctx.args))
    h = 1 if ctx.args["order"] == "NHWC" else 2
    out = run(
        sub,
        *(
            a.unsqueeze(h)
            if is_torch(a) and a.dim() == 3
            else np.expand_dims(a, h)
            if isinstance(a, np.ndarray) and a.ndim == 3
            else a
            for a in arrays
        ),
    )
    return _each(out, lambda o: o.squeeze(h) if o.ndim == 4 else o)


def _args_as_2d(args: dict[str, Any]) -> dict[str, Any]:
    """The 2-D arguments of a 1-D op: ``kernels=[k]`` -> [1, k], ``pads=[l, r]`` -> [0, l, 0, r]...

    >>> _args_as_2d({"kernel": 3, "pad": 1, "stride": 2})["pads"]
    [0, 1, 0, 1]
    """
    for k in _PER_SIDE:
        if args.get(k, -1) not in (0, -1):
            raise ValueError(
                f"argument {k} is for 2-D inputs; a 1-D input takes kernel(s), stride(s), pad(s), dilation(s)"
            )
    out = {k: v for k, v in args.items() if k != _GEOMETRIES}  # the 2-D view keeps its own geometries
    for name, default in (("kernel", 0), ("stride", 1), ("dilation", 1)):
        many = args.get(name + "s")
        if many and len(many) != 1:
            raise ValueError(f"expected {name}s of length 1 for a 1-D input, got {many}")
        value = int(many[0]) if many else args.get(name, default)
        out[name + "s"] = [1, value] if value else []  # no kernel given: Conv takes the filter's
    pads = args.get("pads")
    if pads and len(pads) != 2:
        raise ValueError(f"expected pads [left, right] for a 1-D input, got {pads}")
    left, right = pads if pads else (args.get("pad", 0),) * 2
    out["pads"] = [0, left, 0, right]
    return out


@dataclass(frozen=True)
class Geometry:
    """Where the windows of a 2-D op lie: kernel, stride, dilation, pads (t, l, b, r) and output size."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]
    out: tuple[int, int]


def _pair(args: dict[str, Any], name: str, many: str, h: str, w: str, default: int) -> tuple[int, int]:
    """(h, w) from ``many`` = [h, w], else the per-side args (0 = not given), else the shared one."""
    if args.get(many):
        if len(args[many]) != 2:
            raise ValueError(f"expected {many} of length 2, got {args[many]}")
        return int(args[many][0]), int(args[many][1])
    base = args.get(name, default)
    return (args.get(h) or base, args.get(w) or base)


def geometry(args: dict[str, Any], hw: tuple[int, int], kernel: tuple[int, int] | None = None) -> Geometry:
    """The windows of an op with Caffe2's ``args`` on an input of spatial size ``hw``; ``kernel``
    is the filter's size for Conv (checked against any kernel argument).

    >>> geometry({"kernel": 3, "stride": 2, "pad": 1}, (7, 7)).out
    (4, 4)
    """
    k: tuple[int, ...] = (
        tuple(hw) if args.get("global_pooling") else _pair(args, "kernel", "kernels", "kernel_h", "kernel_w", 0)
    )
    if kernel is not None:
        if k != (0, 0) and k != tuple(kernel):
            raise ValueError(f"the kernel arguments give {tuple(k)} but the filter's kernel is {tuple(kernel)}")
        k = kernel
    if min(k) < 1:
        raise ValueError(f"expected a kernel size >= 1 (argument kernel, kernel_h/kernel_w or kernels), got {k}")
    glob = bool(args.get("global_pooling"))
    stride = (1, 1) if glob else _pair(args, "stride", "strides", "stride_h", "stride_w", 1)
    dil = _pair(args, "dilation", "dilations", "dilation_h", "dilation_w", 1)
    if args.get("pads"):
        if len(args["pads"]) != 4:
            raise ValueError(f"expected pads [t, l, b, r], got {args['pads']}")
        pads = tuple(int(p) for p in args["pads"])
    else:
        base = args.get("pad", 0)
        pads = tuple(base if args.get(f"pad_{s}", -1) == -1 else args[f"pad_{s}"] for s in "tlbr")
    pads = (0, 0, 0, 0) if glob else pads
    mode = 0 if glob else args.get("legacy_pad", 0)
    if mode:
        return _legacy_geometry(mode, hw, tuple(k), stride, dil, pads)  # type: ignore[arg-type]
    if min(stride) < 1 or min(dil) < 1 or min(pads) < 0:
        raise ValueError(
            f"expected strides and dilations >= 1 and pads >= 0, got stride {stride}, dilation {dil}, pads {pads}"
        )
    span = (dil[0] * (k[0] - 1) + 1, dil[1] * (k[1] - 1) + 1)
    padded = (hw[0] + pads[0] + pads[2], hw[1] + pads[1] + pads[3])
    if span[0] > padded[0] or span[1] > padded[1]:
        raise ValueError(f"the kernel {tuple(k)} (dilation {dil}) spans {span}, more than the padded input {padded}")
    out = ((padded[0] - span[0]) // stride[0] + 1, (padded[1] - span[1]) // stride[1] + 1)
    return Geometry(tuple(k), tuple(stride), tuple(dil), pads, out)  # type: ignore[arg-type]


_GEOMETRIES = "_geometries"  # key in an op instance's own args dict: its geometry per input size


def cached_geometry(args: dict[str, Any], hw: tuple[int, int], kernel: tuple[int, int] | None = None) -> Geometry:
    """:func:`geometry`, remembered in the op instance's ``args`` dict per (input size, kernel):
    an op runs on the same sizes step after step, and working the windows out again cost a
    tenth of a small convolution's Python time. Invalid arguments raise on every call.

    >>> args = {"kernel": 2, "stride": 2}
    >>> cached_geometry(args, (4, 4)) is cached_geometry(args, (4, 4))
    True
    """
    cache = args.get(_GEOMETRIES)
    if cache is None:
        cache = args[_GEOMETRIES] = {}
    key = (hw, kernel)
    g = cache.get(key)
    if g is None:
        g = geometry(args, hw, kernel)
        if len(cache) >= 16:  # sizes that change every run: keep the dict small
            cache.clear()
        cache[key] = g
    return g


NOTSET, VALID, SAME, CAFFE_LEGACY_POOLING = 0, 1, 2, 3  # Caffe2's LegacyPadding (caffe2_legacy.proto)


def legacy_size_and_pad(
    mode: int, size: int, stride: int, kernel: int, dilation: int, head: int
) -> tuple[int, int, int]:
    """(pad_head, pad_tail, out_size) of one spatial dim under Caffe2's ``legacy_pad`` ``mode``
    (VALID, SAME or CAFFE_LEGACY_POOLING), as Caffe2's ConvPoolOpBase computed them; ``head``
    is the head pad given (read by CAFFE_LEGACY_POOLING only).

    >>> legacy_size_and_pad(SAME, 7, 2, 3, 1, 0)        # out = ceil(7 / 2), one pad each side
    (1, 1, 4)
    >>> legacy_size_and_pad(CAFFE_LEGACY_POOLING, 6, 2, 3, 1, 0)   # Caffe's ceil-mode pooling
    (0, 2, 3)
    """
    span = dilation * (kernel - 1) + 1
    if mode == VALID:
        if size < span:
            raise ValueError(f"legacy_pad=VALID: the kernel spans {span}, more than the input's {size}")
        return 0, 0, (size - span) // stride + 1
    if mode == SAME:
        if dilation != 1:
            raise ValueError(f"legacy_pad=SAME takes no dilation (as in Caffe2), got dilation {dilation}")
        need = (-(-size // stride) - 1) * stride + kernel - size
        if need < 0:
            raise ValueError(f"legacy_pad=SAME needs a negative pad ({need}) for kernel {kernel} and stride {stride}")
        return need // 2, need - need // 2, (size + need - span) // stride + 1
    extent = size + 2 * head - kernel
    if extent < 0:
        raise ValueError(
            f"legacy_pad=CAFFE_LEGACY_POOLING: the kernel {kernel} is larger than the input {size} padded by {head} each side"
        )
    out = -(-extent // stride) + 1  # Caffe rounds the output size up, Caffe2 down
    if head > 0 and (out - 1) * stride >= size + head:
        out -= 1  # the last window must start inside the image or its head pad
    standard = extent // stride + 1
    return head, head + stride * (out - standard), out


def _legacy_geometry(
    mode: int,
    hw: tuple[int, int],
    k: tuple[int, int],
    stride: tuple[int, int],
    dil: tuple[int, int],
    pads: tuple[int, ...],
) -> Geometry:
    if mode in (VALID, SAME) and any(pads):
        raise ValueError(
            f"legacy_pad={'VALID' if mode == VALID else 'SAME'} takes no pads (as in Caffe2), got pads (t, l, b, r) = {pads}"
        )
    if min(stride) < 1 or min(dil) < 1 or min(pads) < 0:
        raise ValueError(
            f"expected strides and dilations >= 1 and pads >= 0, got stride {stride}, dilation {dil}, pads {pads}"
        )
    (t, b, oh), (l, r, ow) = (legacy_size_and_pad(mode, hw[i], stride[i], k[i], dil[i], pads[i]) for i in (0, 1))
    return Geometry(k, stride, dil, (t, l, b, r), (oh, ow))


def pad_input(x: np.ndarray, g: Geometry, value: float = 0.0) -> np.ndarray:
    t, l, b, r = g.pads
    if not any(g.pads):
        return x
    if is_torch(x):
        import torch.nn.functional as F

        return F.pad(x, (l, r, t, b), value=value)
    check_alloc(
        math.prod(x.shape[:2]) * (x.shape[2] + t + b) * (x.shape[3] + l + r),
        x.dtype.itemsize,
        f"the input of shape {tuple(x.shape)} padded by (t, l, b, r) = {g.pads}",
    )
    try:
        return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)
    except MemoryError as exc:
        raise ValueError(
            f"the pads (t, l, b, r) = {g.pads} make an input of shape {tuple(x.shape)} too large to allocate"
        ) from exc


def taps(g: Geometry) -> list[tuple[int, int, tuple[slice, slice]]]:
    """Each kernel tap (i, j) with the strided slice of the padded input it reads at every output
    pixel: ``xp[:, :, sy, sx]`` is [N, C, OH, OW]. Ops loop over the taps (kh * kw numpy calls),
    never over pixels."""
    (oh, ow), (sh, sw), (dh, dw) = g.out, g.stride, g.dilation
    return [
        (i, j, (slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)))
        for i in range(g.kernel[0])
        for j in range(g.kernel[1])
    ]


def unpad(xp: np.ndarray, g: Geometry, hw: tuple[int, int]) -> np.ndarray:
    t, l = g.pads[0], g.pads[1]
    if is_torch(xp):
        return xp if not any(g.pads) else xp[:, :, t : t + hw[0], l : l + hw[1]].contiguous()
    return xp if not any(g.pads) else np.ascontiguousarray(xp[:, :, t : t + hw[0], l : l + hw[1]])


# -- Conv: Y[n, m] = sum over the group's channels and taps of W[m] * window + b[m] -------------------
# Caffe2's implementation-choice args (cuDNN algorithms, its search, the shared column buffer): its
# conv tests pass them on the CPU too; like `engine` they are taken and ignored (one implementation)
IMPL_ARGS = [
    Arg("shared_buffer", bool, False, "Caffe2's shared im2col buffer: taken and ignored"),
    Arg("exhaustive_search", bool, False, "Caffe2's cuDNN algorithm search: taken and ignored"),
    *(
        Arg(f"force_algo_{k}", int, -1, f"Caffe2's cuDNN {k} algorithm: taken and ignored")
        for k in ("fwd", "dgrad", "wgrad")
    ),
]
CONV_ARGS = [
    *KERNEL_ARGS,
    *WINDOW_ARGS,
    *DILATION_ARGS,
    Arg("group", int, 1, "channel groups: input and output channels split into this many"),
    *IMPL_ARGS,
]


def _conv_inputs(ctx: Any, x: Any, w: Any) -> tuple[np.ndarray, np.ndarray, int, Geometry]:
    x, w = float_array(ctx, x, 0), float_array(ctx, w, 1)
    namespace(ctx, x, w)
    same_dtype(ctx, [x, w])
    ndim(ctx, x, 0, 4)
    ndim(ctx, w, 1, 4)
    grp = ctx.args["group"]
    c, m = x.shape[1], w.shape[0]
    if grp < 1 or c % grp or m % grp or w.shape[1] != c // grp:
        raise ValueError(
            f"expected a filter [M, C/group, kh, kw] with C={c} and M divisible by group={grp}, got {tuple(w.shape)}"
        )
    return x, w, grp, cached_geometry(ctx.args, tuple(x.shape[2:]), tuple(w.shape[2:]))


def batch_last(x: np.ndarray, g: Geometry) -> np.ndarray:
    """x [N, C, H, W] padded and laid out [C, H + pads, W + pads, N]: with the batch innermost,
    every strided copy and add below moves runs of N contiguous values, not of OW."""
    n, c, h, w = x.shape
    t, l, b, r = g.pads
    xt = np.zeros((c, h + t + b, w + l + r, n), dtype=x.dtype)
    xt[:, t : t + h, l : l + w, :] = x.transpose(1, 2, 3, 0)
    return xt


def batch_last_copy(a: np.ndarray) -> np.ndarray:
    """a [N, ...] as a contiguous [..., N]. One example a page or more apart is copied example
    by example: a single transposing copy would read with a stride of a multiple of 4 KiB, which
    maps every read to the same cache sets (it was 2x slower for dY [32, 16, 8, 8])."""
    n = a.shape[0]
    if a[0].nbytes < 4096 or n > 256:
        return np.ascontiguousarray(np.moveaxis(a, 0, -1))
    out = np.empty((*a.shape[1:], n), a.dtype)
    flat, src = out.reshape(-1, n), a.reshape(n, -1)
    for i in range(n):
        flat[:, i] = src[i]
    return out


def im2col(x: np.ndarray, g: Geometry, grp: int) -> np.ndarray:
    """[group, C/group*kh*kw, OH*OW*N]: column (y, x, n) of a group holds the receptive field of
    output pixel (y, x) of example n. ``as_strided`` gives all fields as one view; one copy."""
    xt = batch_last(x, g)
    c, n = xt.shape[0], xt.shape[3]
    s = xt.strides
    shape = (c, *g.kernel, *g.out, n)
    st = (s[0], s[1] * g.dilation[0], s[2] * g.dilation[1], s[1] * g.stride[0], s[2] * g.stride[1], s[3])
    fields = as_strided(xt, shape, st, writeable=False)
    return fields.reshape(grp, (c // grp) * g.kernel[0] * g.kernel[1], g.out[0] * g.out[1] * n)


#: ``C/group * kh * kw`` from which torch's CPU convolution beats im2col + sgemm (measured)
TORCH_MIN_REDUCTION = 128


def _torch_wins(x: Any, w: Any) -> Any:
    """torch, when numpy arrays ``x``, ``w`` are better convolved by torch's kernel (and it is
    installed): a wide filter, or a depthwise one (one input channel per group, several groups),
    where im2col's one matmul per group of one row loses 5-15x to torch's depthwise kernel."""
    if x.dtype not in _TORCH_DTYPES:
        return None
    depthwise = w.shape[1] == 1 and x.shape[1] > 1
    if not depthwise and w.shape[1] * w.shape[2] * w.shape[3] < TORCH_MIN_REDUCTION:
        return None
    return _torch()


_HAS_TORCH: list[bool] = []  # [installed?] once looked up


def _torch() -> Any:
    """The torch module, imported on first use when installed; None when it is not. While
    another thread imports it, ``import torch`` below waits for that import to end."""
    torch = loaded_torch()
    if torch is not None:
        return torch
    if not _HAS_TORCH:
        _HAS_TORCH.append(importlib.util.find_spec("torch") is not None)
    if not _HAS_TORCH[0]:
        return None
    import torch  # a wide convolution on numpy arrays: torch's kernel wins

    from asyncnet.tensor.threads import torch_loaded

    torch_loaded()
    return torch


_TORCH_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, g: Geometry, grp: int) -> np.ndarray:
    if is_torch(x):
        return _conv_torch(x, w, b, g, grp)
    if x.dtype == np.float16:  # float16 data, float32 accumulation (Caffe2's cuDNN compute type)
        wide = None if b is None else b.astype(np.float32)
        return to_half(conv_forward(x.astype(np.float32), w.astype(np.float32), wide, g, grp))
    torch = _torch_wins(x, w)
    if torch is not None:
        t = torch.from_numpy
        return _conv_torch(
            t(np.ascontiguousarray(x)),
            t(np.ascontiguousarray(w)),
            None if b is None else t(np.ascontiguousarray(b)),
            g,
            grp,
        ).numpy()
    if grp == 1 and g.kernel == (1, 1) and g.stride == (1, 1) and not any(g.pads):
        return _pointwise(x, w, b)
    n, m = x.shape[0], w.shape[0]
    y = np.matmul(w.reshape(grp, m // grp, -1), im2col(x, g, grp))  # group, M/group, OH*OW*N
    yv = y.reshape(m, *g.out, n).transpose(3, 0, 1, 2)
    if b is None:
        return np.ascontiguousarray(yv)
    return np.add(yv, b.reshape(1, m, 1, 1), out=np.empty(yv.shape, y.dtype))  # NCHW and bias in one pass


def _pointwise(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """A 1x1 convolution (stride 1, no pads, one group) as one matmul per example in NCHW:
    W [M, C] @ X[n] [C, H*W], no im2col copy and no transpose back (6x faster at batch 32)."""
    n, c, h, wd = x.shape
    m = w.shape[0]
    y = np.matmul(w.reshape(m, c), x.reshape(n, c, h * wd)).reshape(n, m, h, wd)
    if b is not None:
        y += b.reshape(1, m, 1, 1)
    return y


def _symmetric(g: Geometry) -> tuple[int, int] | None:
    t, l, b, r = g.pads
    return (t, l) if t == b and l == r else None


def _conv_torch(x: Any, w: Any, b: Any, g: Geometry, grp: int) -> Any:
    import torch.nn.functional as F

    pads = _symmetric(g)
    if pads is not None:
        return F.conv2d(x, w, b, stride=g.stride, padding=pads, dilation=g.dilation, groups=grp)
    return F.conv2d(pad_input(x, g), w, b, stride=g.stride, dilation=g.dilation, groups=grp)


def _conv_backward_torch(x: Any, w: Any, dy: Any, g: Geometry, grp: int, want_dx: bool) -> tuple[Any, Any]:
    import torch

    pads = _symmetric(g)
    xin = x if pads is not None else pad_input(x, g)
    dx, dw, _ = torch.ops.aten.convolution_backward(
        dy.contiguous(),
        xin,
        w,
        None,
        list(g.stride),
        list(pads or (0, 0)),
        list(g.dilation),
        False,
        [0, 0],
        grp,
        [want_dx, True, False],
    )
    if want_dx and pads is None:
        dx = unpad(dx, g, tuple(x.shape[2:]))
    return dw, (dx if want_dx else None)


@register_op(
    "Conv",
    inputs=(2, 3),
    outputs=1,
    args=CONV_ARGS,
    inputs_doc=("X [N, C, H, W]", "filter [M, C/group, kh, kw]", "bias [M] (optional)"),
    outputs_doc=("Y [N, M, OH, OW]",),
    doc="Caffe2's 2-D convolution (cross-correlation) in NCHW or NHWC with stride, pads, dilation and groups; "
    "the bias is optional.",
)
@in_order
@volumetric(volume.conv_kernel)
def conv(ctx: Any, x: Any, w: Any, b: Any = None) -> np.ndarray:
    x, w, grp, g = _conv_inputs(ctx, x, w)
    if b is not None:
        b = float_array(ctx, b, 2)
        namespace(ctx, x, w, b)
        if b.shape != (w.shape[0],) or b.dtype != x.dtype:
            raise ValueError(
                f"expected a bias of shape ({w.shape[0]},) and dtype {x.dtype}, got {tuple(b.shape)} {b.dtype}"
            )
    return conv_forward(x, w, b, g, grp)


def conv_backward(
    x: np.ndarray, w: np.ndarray, dy: np.ndarray, g: Geometry, grp: int, want_dx: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """(dW, dX or None) of ``conv_forward`` for the output gradient ``dy`` [N, M, OH, OW]."""
    if is_torch(x):
        return _conv_backward_torch(x, w, dy, g, grp, want_dx)
    if x.dtype == np.float16:  # float16 data, float32 accumulation (Caffe2's cuDNN compute type)
        dw, dx = conv_backward(x.astype(np.float32), w.astype(np.float32), dy.astype(np.float32), g, grp, want_dx)
        return to_half(dw), (None if dx is None else to_half(dx))
    torch = _torch_wins(x, w)
    if torch is not None:
        t = torch.from_numpy
        dw, dx = _conv_backward_torch(
            t(np.ascontiguousarray(x)), t(np.ascontiguousarray(w)), t(np.ascontiguousarray(dy)), g, grp, want_dx
        )
        return dw.numpy(), (None if dx is None else dx.numpy())
    n, c, h, wd = x.shape
    m, cg = w.shape[0], c // grp
    dyt = batch_last_copy(dy).reshape(grp, m // grp, -1)  # group, M/g, OH*OW*N
    dw = np.matmul(dyt, im2col(x, g, grp).transpose(0, 2, 1)).reshape(w.shape)
    if not want_dx:
        return dw, None
    dcols = np.matmul(w.reshape(grp, m // grp, -1).transpose(0, 2, 1), dyt)  # group, C/g*k, OH*OW*N
    t, l, b, r = g.pads
    dxt = np.zeros((c, h + t + b, wd + l + r, n), dtype=x.dtype)
    for k in range(grp):  # col2im: add each tap's columns back onto the pixels it read
        dk = dcols[k].reshape(cg, *g.kernel, *g.out, n)
        target = dxt[k * cg : (k + 1) * cg]
        for i, j, (sy, sx) in taps(g):
            target[:, sy, sx] += dk[:, i, j]
    return dw, np.ascontiguousarray(dxt[:, t : t + h, l : l + wd].transpose(3, 0, 1, 2))


@register_op(
    "ConvGradient",
    inputs=3,
    outputs=(1, 3),
    args=[*CONV_ARGS, Arg("no_bias", bool, False, "the forward Conv had no bias")],
    inputs_doc=("X", "filter", "dY"),
    outputs_doc=("dfilter", "dbias (unless no_bias; optional)", "dX (optional)"),
    doc="Gradient of Conv: dfilter, then dbias unless no_bias=1, then dX when that output is given.",
)
@in_order
@volumetric(volume.conv_gradient_kernel)
def conv_gradient(ctx: Any, x: Any, w: Any, dy: Any) -> Any:
    x, w, grp, g = _conv_inputs(ctx, x, w)
    dy = float_array(ctx, dy, 2)
    xp = namespace(ctx, x, w, dy)
    want = (x.shape[0], w.shape[0], *g.out)
    if dy.shape != want:
        raise ValueError(f"expected dY of shape {want}, got {tuple(dy.shape)}")
    no_bias = ctx.args["no_bias"]
    n_out = len(ctx.op.outputs)
    if no_bias and n_out == 3:
        raise ValueError("expected at most 2 outputs (dfilter, dX) with no_bias=1, got 3")
    dw, dx = conv_backward(x, w, dy, g, grp, want_dx=n_out == (2 if no_bias else 3))
    outs = [dw] if no_bias else [dw, _bias_gradient(x, w, dy) if xp.name == "numpy" else dy.sum(dim=(0, 2, 3))]
    if dx is not None:
        outs.append(dx)
    return outs[0] if n_out == 1 else tuple(outs[:n_out])


def _bias_gradient(x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dbias = dY summed over N, OH, OW: by torch where its kernels convolve (a third of numpy's
    strided reduction's time on [64, 32, 4, 4]), else by numpy; float16 is summed in float32
    (Caffe2's GPU math type) and rounded once."""
    if dy.dtype == np.float16:
        return to_half(dy.sum(axis=(0, 2, 3), dtype=np.float32))
    torch = _torch_wins(x, w)
    if torch is None:
        return dy.sum(axis=(0, 2, 3))
    return torch.from_numpy(np.ascontiguousarray(dy)).sum(dim=(0, 2, 3)).numpy()


@register_gradient("Conv")
def _conv_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    x, w = op.inputs[:2]
    has_bias = len(op.inputs) == 3
    outs = ["#dw", "#db", "#dx"] if has_bias else ["#dw", "#dx"]
    gop = OperatorDef(op.type + "Gradient", [x, w, output_grad(op, gout)], outs, {**op.args, "no_bias": not has_bias})
    return [gop], ["#dx", "#dw", "#db"][: len(op.inputs)]


# Caffe2's names for the same ops (Conv1D, Conv2D, Conv3D; their gradients); volumes take the 3-D kernels
for _n in ("Conv1D", "Conv2D", "Conv3D"):
    register_op(
        _n,
        inputs=(2, 3),
        outputs=1,
        args=CONV_ARGS,
        inputs_doc=("X", "filter", "bias (optional)"),
        outputs_doc=("Y",),
        doc=f"Caffe2's {_n}: Conv under another name.",
    )(conv)
    register_op(
        _n + "Gradient",
        inputs=3,
        outputs=(1, 3),
        args=[*CONV_ARGS, Arg("no_bias", bool, False, "the forward op had no bias")],
        inputs_doc=("X", "filter", "dY"),
        outputs_doc=("dfilter", "dbias (unless no_bias)", "dX (optional)"),
        doc=f"Gradient of {_n} (ConvGradient's kernel).",
    )(conv_gradient)
    register_gradient(_n)(_conv_grad)
