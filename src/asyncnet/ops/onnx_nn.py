"""Operators with ONNX's semantics where no Caffe2 op has them, for imported ONNX models: numpy
and torch kernels (a torch input gives a torch result; CPU or CUDA tensors alike).

Each op follows the ONNX operator of the same name without the prefix (``ONNXGemm`` is ONNX's
Gemm, ``ONNXSoftmax`` its Softmax...); the importer routes a node here only when its attributes
are ones the kernel implements, so the op is exact for every input it receives::

    >>> import asyncnet as an, numpy as np
    >>> ws = an.Workspace(); ws.feed("x", np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    >>> net = an.Net("n"); _ = net.ONNXTranspose(["x"], "y", perm=[1, 0])
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[1., 3.],
           [2., 4.]], dtype=float32)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import array, as_array
from asyncnet.ops.conv import _torch as torch_if_installed
from asyncnet.tensor.namespace import is_torch, namespace

CPU_CUDA = ("cpu", "cuda")


def _torch() -> Any:
    import torch

    return torch


def _ints(values: Any) -> list[int]:
    """A shape or index tensor (numpy or torch) as Python ints."""
    if type(values) is np.ndarray and values.dtype.kind in "iu":
        return values.reshape(-1).tolist()
    if is_torch(values):
        values = values.detach().cpu().numpy()
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _op(name: str, inputs: Any = 1, outputs: Any = 1, args: Sequence[Arg] = (), doc: str = "") -> Any:
    return register_op(name, inputs=inputs, outputs=outputs, args=list(args), devices=CPU_CUDA, doc=doc)


# -- linear algebra --------------------------------------------------------------------------


@_op(
    "ONNXGemm",
    inputs=(2, 3),
    args=[
        Arg("alpha", float, 1.0, "scale of A B"),
        Arg("beta", float, 1.0, "scale of C"),
        Arg("transA", bool, False, "transpose A"),
        Arg("transB", bool, False, "transpose B"),
    ],
    doc="Y = alpha op(A) op(B) + beta C (ONNX Gemm; C broadcast to [M, N]).",
)
def onnx_gemm(ctx: Any, a: Any, b: Any, c: Any = None) -> Any:
    a, b = array(ctx, a, 0), array(ctx, b, 1)
    args = ctx.args
    a = a.T if args["transA"] else a
    b = b.T if args["transB"] else b
    y = a @ b
    if args["alpha"] != 1.0:
        y = y * _scalar(args["alpha"], y)
    if c is not None:
        y = y + (c if args["beta"] == 1.0 else c * _scalar(args["beta"], c))
    return as_array(y)


@_op(
    "ONNXMatMulAdd",
    inputs=3,
    args=[Arg("activation", str, "", "Relu: max(Y, 0) in place (the importer fuses a Relu that alone reads Y)")],
    doc="Y = matmul(A, B) + C: ONNX MatMul then Add of a bias C [N] (B [K, N]), "
    "as one op (the importer fuses the pair when B and C are initializers), then its activation.",
)
def onnx_matmul_add(ctx: Any, a: Any, b: Any, c: Any) -> Any:
    a = array(ctx, a, 0)
    if type(a) is np.ndarray and a.ndim > 2 and a.shape[-2] < _FEW_ROWS and b.ndim == 2:
        y = (a.reshape(-1, a.shape[-1]) @ b).reshape(*a.shape[:-1], b.shape[-1])  # one gemm, not one gemv per row
    else:
        y = a @ b
    relu = ctx.args["activation"] == "Relu"
    if is_torch(y):
        y = y.add_(c)
        if relu:
            return y.relu_() if y.is_floating_point() else y.clamp_(min=0)
        return y
    y = as_array(y)
    y += c
    if relu:
        np.maximum(y, y.dtype.type(0), out=y)
    return y


@_op(
    "ONNXMatMul",
    inputs=2,
    doc="Y = matmul(A, B) with numpy's rules (ONNX MatMul: a 1-D operand promoted to a matrix, batch dims "
    "broadcast), numpy's or torch's matmul.",
)
def onnx_matmul(ctx: Any, a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        namespace(ctx, array(ctx, a, 0), array(ctx, b, 1))  # two libraries: the error naming both
    return as_array(array(ctx, a, 0) @ array(ctx, b, 1))


#: rows per matrix below which numpy's batched matmul (one BLAS call per matrix) loses to one
#: matrix product of all rows: [16, 1, 64] @ [64, 192] runs 2x faster as [16, 64] @ [64, 192]
_FEW_ROWS = 8


_BINARY = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": operator.truediv}


@_op(
    "ONNXBinary",
    inputs=2,
    args=[Arg("fn", str, Arg.REQUIRED, "the ONNX op", choices=tuple(_BINARY))],
    doc="C = A fn B elementwise with numpy's broadcasting, for fn in Add, Sub, Mul, Div (ONNX's ops of those "
    "names on floats of one dtype, which the importer checks; numpy's or torch's own broadcast errors).",
)
def onnx_binary(ctx: Any, a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        namespace(ctx, array(ctx, a, 0), array(ctx, b, 1))  # two libraries: the error naming both
    return as_array(_BINARY[ctx.args["fn"]](a, b))


def _scalar(v: float, like: Any) -> Any:
    return v if is_torch(like) else like.dtype.type(v)


# -- shape ops ---------------------------------------------------------------------------------


def _one_of(arg: str, what: str) -> Any:
    """A validator: ``arg`` given, or input 1, not both and not neither."""

    def validate(op: Any) -> None:
        given = op.args.get(arg) is not None
        if given == (len(op.inputs) > 1):
            raise ValueError(
                f"expected {what} as input 1 or as the {arg!r} argument (one of them), got {'both' if given else 'neither'}"
            )

    return validate


def _op_with(name: str, validate: Any, args: Sequence[Arg], doc: str) -> Any:
    return register_op(name, inputs=(1, 2), args=list(args), devices=CPU_CUDA, doc=doc, validate=validate)


@_op_with(
    "ONNXReshape",
    _one_of("shape", "the target shape"),
    args=[
        Arg("allowzero", bool, False, "a 0 in shape is a 0 dim (not 'copy the input's')"),
        Arg("shape", list, None, "the target shape when it is a constant (instead of input 1)", item_type=int),
    ],
    doc="Y = X reshaped to the shape in input 1 or the shape argument (0: copy X's dim unless allowzero; "
    "-1: inferred), ONNX Reshape.",
)
def onnx_reshape(ctx: Any, x: Any, shape: Any = None) -> Any:
    x = array(ctx, x, 0)
    dims = ctx.args["shape"] if shape is None else _ints(shape)
    if 0 in dims and not ctx.args["allowzero"]:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(tuple(dims))


@_op(
    "ONNXFlatten",
    args=[Arg("axis", int, 1, "dims before it become rows, the rest columns")],
    doc="Y = X as 2-D [prod(dims[:axis]), prod(dims[axis:])] (ONNX Flatten).",
)
def onnx_flatten(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    axis = ctx.args["axis"] + x.ndim if ctx.args["axis"] < 0 else ctx.args["axis"]
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@_op(
    "ONNXTranspose",
    args=[Arg("perm", list, [], "the permutation (empty: reverse the dims)", item_type=int)],
    doc="Y = X with its dims permuted (ONNX Transpose).",
)
def onnx_transpose(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    perm = ctx.args["perm"] or list(range(x.ndim))[::-1]
    return x.permute(*perm) if is_torch(x) else np.transpose(x, perm)


@_op(
    "ONNXConcat",
    inputs=(1, None),
    args=[Arg("axis", int, 0, "the axis to join along (negative from the end)")],
    doc="Y = the inputs joined along axis (ONNX Concat).",
)
def onnx_concat(ctx: Any, *xs: Any) -> Any:
    xs = tuple(array(ctx, x, i) for i, x in enumerate(xs))
    if is_torch(xs[0]):
        return _torch().cat(xs, dim=ctx.args["axis"])
    return np.concatenate(xs, axis=ctx.args["axis"])


@_op("ONNXIdentity", doc="Y = X (ONNX Identity, and Dropout at inference): the same array, not a copy.")
def onnx_identity(ctx: Any, x: Any) -> Any:
    return x


@_op_with(
    "ONNXGather",
    _one_of("index", "the indices"),
    args=[
        Arg("axis", int, 0, "the axis indexed"),
        Arg("index", int, None, "one constant index (instead of input 1, a 0-d tensor)"),
    ],
    doc="Y = X indexed by the (possibly negative) indices in input 1 (or the one index argument) along axis "
    "(ONNX Gather).",
)
def onnx_gather(ctx: Any, x: Any, idx: Any = None) -> Any:
    x = array(ctx, x, 0)
    axis = ctx.args["axis"] % x.ndim
    n = x.shape[axis]
    if idx is None or array(ctx, idx, 1).ndim == 0:  # one index: a view of X without that axis
        k = ctx.args["index"] if idx is None else int(idx)
        if not -n <= k < n:
            raise IndexError(f"index {k} out of range [-{n}, {n}) along axis {axis}")
        k = k + n if k < 0 else k
        if is_torch(x):
            return x.select(axis, k)
        return as_array(x[(slice(None),) * axis + (k,)])
    if is_torch(x):
        torch = _torch()
        i = idx.long()
        i = torch.where(i < 0, i + n, i)
        if bool(((i < 0) | (i >= n)).any()):
            raise IndexError(f"indices out of range [-{n}, {n}) along axis {axis}")
        return x.index_select(axis, i.reshape(-1)).reshape(x.shape[:axis] + tuple(idx.shape) + x.shape[axis + 1 :])
    i = np.where(idx < 0, idx + n, idx)
    if i.size and (i.min() < 0 or i.max() >= n):
        raise IndexError(f"indices out of range [-{n}, {n}) along axis {axis}")
    return as_array(np.take(x, i, axis=axis))


@_op("ONNXExpand", inputs=2, doc="Y = X broadcast with the shape in input 1 (ONNX Expand: numpy's two-way broadcast).")
def onnx_expand(ctx: Any, x: Any, shape: Any) -> Any:
    x = array(ctx, x, 0)
    out = np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape)))
    if is_torch(x):
        return x.expand(out).clone()
    return np.broadcast_to(x, out).copy()


@_op(
    "ONNXConstantOfShape",
    args=[Arg("value", float, 0.0, "the fill value"), Arg("to", int, 1, "the ONNX element type of Y (default float)")],
    doc="Y = a tensor of the shape in input 0 filled with value (ONNX ConstantOfShape); a torch shape gives a torch Y.",
)
def onnx_constant_of_shape(ctx: Any, shape: Any) -> Any:
    y = np.full(tuple(_ints(shape)), ctx.args["value"], _ONNX_TO_NP[ctx.args["to"]])
    if is_torch(shape):
        return _torch().from_numpy(y).to(shape.device)
    return y


@_op("ONNXWhere", inputs=3, doc="Y = X where the condition holds, else Z (ONNX Where, broadcasting).")
def onnx_where(ctx: Any, cond: Any, x: Any, y: Any) -> Any:
    if is_torch(x):
        return _torch().where(cond.bool(), x, y)
    return as_array(np.where(cond, x, y))


# -- activations and normalization --------------------------------------------------------


@_op(
    "ONNXSoftmax",
    args=[
        Arg("axis", int, -1, "the axis normalized"),
        Arg("legacy", bool, False, "opset < 13: X is flattened to 2-D at axis first"),
        Arg("log", bool, False, "LogSoftmax"),
    ],
    doc="Y = softmax (or log-softmax) of X along axis (ONNX Softmax / LogSoftmax, opset < 13 via legacy=1).",
)
def onnx_softmax(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    axis, log = ctx.args["axis"], ctx.args["log"]
    shape = x.shape
    if ctx.args["legacy"]:
        a = axis % x.ndim if x.ndim else 0
        x = x.reshape(math.prod(shape[:a]), math.prod(shape[a:]))
        axis = 1
    views = _torch_views(x)
    if views is not None:
        torch, (t,) = views
        return (torch.log_softmax(t, dim=axis) if log else torch.softmax(t, dim=axis)).numpy().reshape(shape)
    if is_torch(x) and x.dtype == _torch().float16 and x.device.type == "cpu":
        # numpy's float16 arithmetic, as ONNX's reference computes it (torch's CPU softmax rounds once, from float32)
        return _torch().from_numpy(_softmax_np(x.numpy(), axis, log)).reshape(shape)
    if is_torch(x):
        torch = _torch()
        y = torch.log_softmax(x, dim=axis) if log else torch.softmax(x, dim=axis)
    else:
        y = _softmax_np(x, axis, log)
    return y.reshape(shape)


_TORCH_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _torch_views(*xs: Any) -> tuple[Any, list[Any]] | None:
    """(torch, zero-copy tensors of ``xs``) when ``xs`` are numpy float32/float64 arrays of one
    dtype that torch can view (writeable, non-negative strides) and torch is installed: softmax and
    layer norm then run torch's fused CPU kernels (4-8x and 1.5-3x numpy's chains of ufuncs on a
    transformer's 16x64 rows) and give numpy arrays back, the choice depending only on the
    inputs and the installation. Else None (numpy's kernel)."""
    dtype = xs[0].dtype if type(xs[0]) is np.ndarray else None
    if dtype not in _TORCH_FLOATS:
        return None
    for x in xs:
        if type(x) is not np.ndarray or x.dtype != dtype or not x.flags.writeable or min(x.strides, default=0) < 0:
            return None
    torch = torch_if_installed()
    if torch is None:
        return None
    return torch, [torch.from_numpy(x) for x in xs]


def _softmax_np(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True) if x.size else x
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return as_array((x - m - np.log(s)) if log else e / s)


@_op(
    "ONNXBatchNorm",
    inputs=5,
    args=[Arg("epsilon", float, 1e-5, "added to the variance")],
    doc="Y = (X - mean) / sqrt(var + epsilon) * scale + B along dim 1 (ONNX BatchNormalization, inference).",
)
def onnx_batch_norm(ctx: Any, x: Any, scale: Any, b: Any, mean: Any, var: Any) -> Any:
    x = array(ctx, x, 0)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if is_torch(x):
        k = scale / (var + ctx.args["epsilon"]).sqrt()
    else:
        k = scale / np.sqrt(var + x.dtype.type(ctx.args["epsilon"]))
    return as_array(x * k.reshape(shape) + (b - mean * k).reshape(shape))


@_op(
    "ONNXLayerNorm",
    inputs=(2, 3),
    args=[
        Arg("axis", int, -1, "normalize over the dims from this one on"),
        Arg("epsilon", float, 1e-5, "added to the variance"),
    ],
    doc="Y = (X - mean) / sqrt(var + epsilon) * scale + B over dims axis.. (ONNX LayerNormalization, output Y).",
)
def onnx_layer_norm(ctx: Any, x: Any, scale: Any, b: Any = None) -> Any:
    x = array(ctx, x, 0)
    axis = ctx.args["axis"] % x.ndim
    eps = ctx.args["epsilon"]
    inner = tuple(x.shape[axis:])
    affine = tuple(scale.shape) == inner and (b is None or tuple(b.shape) == inner)  # else: broadcast after
    affine = affine and math.prod(inner) > 0
    if affine and not is_torch(x):
        views = _torch_views(x, scale, *(() if b is None else (b,)))
        if views is not None:
            torch, (t, *wb) = views
            return torch.nn.functional.layer_norm(t, inner, *wb, eps=eps).numpy()
    if is_torch(x):
        torch = _torch()
        if affine and scale.dtype == x.dtype and (b is None or b.dtype == x.dtype):
            return torch.nn.functional.layer_norm(x, inner, scale, b, eps)
        y = torch.nn.functional.layer_norm(x, inner, None, None, eps)
        y = y * scale
        return y + b if b is not None else y
    dims = tuple(range(axis, x.ndim))
    n = math.prod(x.shape[axis:])
    if n == 0:  # no elements: Y is as empty as X
        return x.copy()
    mean = np.add.reduce(x, axis=dims, keepdims=True) / n  # x.mean's arithmetic without its Python layers
    d = x - mean
    var = np.add.reduce(d * d, axis=dims, keepdims=True) / n
    y = d / np.sqrt(var + x.dtype.type(eps)) * scale
    return as_array(y + b if b is not None else y)


def _erf_np(x: np.ndarray) -> np.ndarray:
    """erf in numpy: exact (math.erf per element) for float64; for smaller floats Abramowitz and
    Stegun 7.1.26 in float64 (absolute error < 1.5e-7, below float32's resolution near 1)."""
    if x.dtype == np.float64 or x.dtype.kind != "f":
        return as_array(np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype if x.dtype.kind == "f" else np.float64))
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return as_array((np.sign(x) * (1.0 - poly * np.exp(-z * z))).astype(x.dtype))


@_op("ONNXErf", doc="Y = erf(X) (ONNX Erf).")
def onnx_erf(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    return _torch().special.erf(x) if is_torch(x) else _erf_np(x)


@_op(
    "ONNXGelu",
    args=[Arg("approximate", str, "none", "'none' (erf) or 'tanh'", choices=("none", "tanh"))],
    doc="Y = X * Phi(X), Phi the normal CDF (ONNX Gelu; approximate='tanh' its tanh form).",
)
def onnx_gelu(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    approx = ctx.args["approximate"]
    if is_torch(x):
        return _torch().nn.functional.gelu(x, approximate=approx)
    t = x.dtype.type
    if approx == "tanh":
        return as_array(t(0.5) * x * (t(1) + np.tanh(t(math.sqrt(2 / math.pi)) * (x + t(0.044715) * x**3))))
    return as_array(t(0.5) * x * (t(1) + _erf_np(x / t(math.sqrt(2)))))


@_op(
    "ONNXGlobalPool",
    args=[Arg("mode", str, "avg", "avg or max", choices=("avg", "max"))],
    doc="Y = the mean (or max) of X over its spatial dims 2.., kept as 1s (ONNX GlobalAveragePool / GlobalMaxPool).",
)
def onnx_global_pool(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    dims = tuple(range(2, x.ndim))
    if ctx.args["mode"] == "avg":
        return x.mean(dim=dims, keepdim=True) if is_torch(x) else as_array(x.mean(axis=dims, keepdims=True))
    return x.amax(dim=dims, keepdim=True) if is_torch(x) else as_array(x.max(axis=dims, keepdims=True))


@_op(
    "ONNXClip",
    args=[Arg("min", float, None, "lower bound (none if not given)"), Arg("max", float, None, "upper bound")],
    doc="Y = X clamped to [min, max], in X's dtype (ONNX Clip with constant bounds).",
)
def onnx_clip(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    lo, hi = ctx.args["min"], ctx.args["max"]
    if lo is None and hi is None:
        return x
    if is_torch(x):
        return x.clamp(lo, hi)
    t = x.dtype.type
    return as_array(np.clip(x, None if lo is None else t(lo), None if hi is None else t(hi)))


# -- shape and small tensor ops (transformers' attention reshapes) --------------------------


@_op(
    "ONNXShape",
    args=[Arg("start", int, 0, "first dim"), Arg("end", int, 2**62, "dims before this one")],
    doc="Y = X's shape as int64 (ONNX Shape, with start and end), in X's library.",
)
def onnx_shape(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    dims = list(x.shape)[slice(ctx.args["start"], ctx.args["end"] if ctx.args["end"] < 2**62 else None)]
    if is_torch(x):
        return _torch().tensor(dims, dtype=_torch().int64)
    return np.array(dims, dtype=np.int64)


def _axes(ctx: Any, ndim: int, given: Any) -> list[int]:
    axes = _ints(given) if given is not None else list(ctx.args["axes"])
    return sorted(a + ndim if a < 0 else a for a in axes)


@_op(
    "ONNXUnsqueeze",
    inputs=(1, 2),
    args=[Arg("axes", list, [], "axes of the output to insert (or input 1)", item_type=int)],
    doc="Y = X with size-1 dims inserted at axes of the output (ONNX Unsqueeze).",
)
def onnx_unsqueeze(ctx: Any, x: Any, axes: Any = None) -> Any:
    x = array(ctx, x, 0)
    out_rank = x.ndim + len(_ints(axes) if axes is not None else ctx.args["axes"])
    shape = list(x.shape)
    for a in _axes(ctx, out_rank, axes):
        shape.insert(a, 1)
    return x.reshape(tuple(shape))


@_op(
    "ONNXSqueeze",
    inputs=(1, 2),
    args=[Arg("axes", list, [], "axes to remove (or input 1; none: every size-1 dim)", item_type=int)],
    doc="Y = X without the size-1 dims at axes (ONNX Squeeze).",
)
def onnx_squeeze(ctx: Any, x: Any, axes: Any = None) -> Any:
    x = array(ctx, x, 0)
    given = axes is not None or ctx.args["axes"]
    drop = set(_axes(ctx, x.ndim, axes)) if given else {i for i, d in enumerate(x.shape) if d == 1}
    for a in drop:
        if x.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {tuple(x.shape)})")
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in drop))


@_op("ONNXSlice", inputs=(3, 5), doc="Y = X[starts:ends:steps] on axes (ONNX Slice, opset 10 on: all as inputs).")
def onnx_slice(ctx: Any, x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    x = array(ctx, x, 0)
    st, en = _ints(starts), _ints(ends)
    ax = _ints(axes) if axes is not None else list(range(len(st)))
    sp = _ints(steps) if steps is not None else [1] * len(st)
    index = [slice(None)] * x.ndim
    flips = []
    for s, e, a, k in zip(st, en, ax, sp):
        a = a + x.ndim if a < 0 else a
        n = x.shape[a]
        s, e = max(min(s, n), -n - 1), max(min(e, n), -n - 1)  # numpy clamps as ONNX does
        if k < 0 and is_torch(x):  # torch has no negative steps: slice the flipped axis
            s2 = n - 1 - (s + n if s < 0 else min(s, n - 1))
            e2 = n - 1 - (e + n if e < 0 else e) if e >= -n else n
            index[a] = slice(max(s2, 0), max(e2, 0), -k)
            flips.append(a)
        else:
            index[a] = slice(s, e, k)
    if flips:
        x = x.flip(flips)
    return x[tuple(index)]


_UNARY = {
    "Sqrt": ("sqrt", "sqrt"),
    "Exp": ("exp", "exp"),
    "Log": ("log", "log"),
    "Neg": ("negative", "neg"),
    "Abs": ("abs", "abs"),
    "Reciprocal": ("reciprocal", "reciprocal"),
}


@_op(
    "ONNXUnary",
    args=[Arg("fn", str, Arg.REQUIRED, "the ONNX op", choices=tuple(_UNARY))],
    doc="Y = fn(X) elementwise for fn in Sqrt, Exp, Log, Neg, Abs, Reciprocal (ONNX's ops of those names, floats).",
)
def onnx_unary(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    np_name, torch_name = _UNARY[ctx.args["fn"]]
    if is_torch(x):
        return getattr(_torch(), torch_name)(x)
    with np.errstate(all="ignore"):
        return as_array(getattr(np, np_name)(x))


_ONNX_TO_NP = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}


@_op(
    "ONNXCast",
    args=[Arg("to", int, Arg.REQUIRED, "the ONNX element type", choices=tuple(_ONNX_TO_NP))],
    doc="Y = X converted to the ONNX element type `to` (ONNX Cast between numeric and bool types).",
)
def onnx_cast(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    dtype = np.dtype(_ONNX_TO_NP[ctx.args["to"]])
    if is_torch(x):
        return x.to(_torch().from_numpy(np.zeros(0, dtype)).dtype)
    return x.astype(dtype)


@_op(
    "ONNXReduce",
    inputs=(1, 2),
    args=[
        Arg("fn", str, "mean", "mean, sum, max or min", choices=("mean", "sum", "max", "min")),
        Arg("axes", list, [], "axes (or input 1); none: all", item_type=int),
        Arg("keepdims", bool, True, "keep the reduced dims as 1s"),
    ],
    doc="Y = the mean / sum / max / min of X over axes (ONNX ReduceMean, ReduceSum, ReduceMax, ReduceMin; non-empty X).",
)
def onnx_reduce(ctx: Any, x: Any, axes: Any = None) -> Any:
    x = array(ctx, x, 0)
    ax = tuple(_axes(ctx, x.ndim, axes)) if (axes is not None or ctx.args["axes"]) else tuple(range(x.ndim))
    fn, keep = ctx.args["fn"], ctx.args["keepdims"]
    if not ax:
        return x
    if is_torch(x):
        t = {"mean": x.mean, "sum": x.sum, "max": x.amax, "min": x.amin}[fn]
        return t(dim=ax, keepdim=keep)
    if fn == "mean" and x.dtype in _TORCH_FLOATS:  # float16: numpy sums in float32
        return _mean_np(x, ax, keep)
    return as_array(getattr(x, fn)(axis=ax, keepdims=keep))


def _mean_np(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    """``x.mean(axis=axes, keepdims=keep)``'s arithmetic (a sum in x's dtype, then one division)
    without its Python layers."""
    y = np.add.reduce(x, axis=axes, keepdims=keep)
    n = math.prod(x.shape[a] for a in axes)
    if isinstance(y, np.ndarray):
        np.true_divide(y, n, out=y, casting="unsafe")
        return y
    return np.asarray(y.dtype.type(y / n))


@_op("ONNXPow", inputs=2, doc="Y = X ** E (ONNX Pow, float X and E of one dtype, broadcasting).")
def onnx_pow(ctx: Any, x: Any, e: Any) -> Any:
    if is_torch(x):
        return _torch().pow(x, e)
    with np.errstate(all="ignore"):
        return as_array(np.power(x, e))


_COMPARE = {
    "Equal": ("equal", "eq"),
    "Less": ("less", "lt"),
    "Greater": ("greater", "gt"),
    "LessOrEqual": ("less_equal", "le"),
    "GreaterOrEqual": ("greater_equal", "ge"),
}


@_op(
    "ONNXCompare",
    inputs=2,
    args=[Arg("fn", str, Arg.REQUIRED, "the ONNX op", choices=tuple(_COMPARE))],
    doc="Y = X op Z elementwise, a bool tensor (ONNX Equal, Less, Greater, LessOrEqual, GreaterOrEqual; numbers).",
)
def onnx_compare(ctx: Any, x: Any, z: Any) -> Any:
    np_name, torch_name = _COMPARE[ctx.args["fn"]]
    if is_torch(x):
        return getattr(_torch(), torch_name)(x, z)
    return as_array(getattr(np, np_name)(x, z))


# -- chains of layout ops, fused at import ------------------------------------------------------

#: the ops a chain may hold: one array in, a view or copy of it out, every other input an argument
LAYOUT_OPS = ("ONNXReshape", "ONNXTranspose", "ONNXUnsqueeze", "ONNXSqueeze", "ONNXGather", "ONNXFlatten")


def _layout_steps(steps: list[str]) -> list[tuple[Any, Any]]:
    """Each step (a JSON object: the op type under "op", its arguments) as (kernel, its context),
    the arguments typed and defaulted by the op's schema, as if the op stood alone."""
    import json

    from asyncnet.core.defs import DeviceOption, OperatorDef
    from asyncnet.core.registry import OpContext, validate_op

    out = []
    for i, text in enumerate(steps):
        try:
            step = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"steps[{i}]: expected a JSON object, got {text[:80]!r} ({type(e).__name__})") from None
        if not isinstance(step, dict) or step.get("op") not in LAYOUT_OPS:
            raise ValueError(f"steps[{i}]: expected an object whose 'op' is one of {list(LAYOUT_OPS)}, got {text!r}")
        args = {k: v for k, v in step.items() if k != "op"}
        op = OperatorDef(step["op"], ["x"], ["y"], args)
        try:
            schema, typed = validate_op(op, i)
        except Exception as e:  # noqa: BLE001 - a NetDefinitionError of the step, told as the chain's
            raise ValueError(f"steps[{i}]: {e}") from None
        out.append((schema.fn, OpContext(op, i, typed, DeviceOption(), {})))
    return out


_PARSED: dict[int, tuple[list[str], list[tuple[Any, Any]]]] = {}  # id(steps) -> (steps, kernels)


def _parsed(steps: list[str]) -> list[tuple[Any, Any]]:
    hit = _PARSED.get(id(steps))
    if hit is not None and hit[0] is steps:
        return hit[1]
    kernels = _layout_steps(steps)
    if len(_PARSED) > 4096:
        _PARSED.clear()
    _PARSED[id(steps)] = (steps, kernels)
    return kernels


@register_op(
    "ONNXLayout",
    args=[
        Arg(
            "steps",
            list,
            Arg.REQUIRED,
            'the ops in order, each a JSON object: {"op": "ONNXTranspose", "perm": [1, 0, 2]}',
            item_type=str,
        )
    ],
    validate=lambda op: _layout_steps(op.args.get("steps", [])) and None,
    devices=CPU_CUDA,
    doc="Y = X through a chain of one-input layout ops (ONNXReshape, ONNXTranspose, ONNXUnsqueeze, ONNXSqueeze, "
    "ONNXGather, ONNXFlatten with their constant arguments), as one op: what the importer makes of attention's "
    "reshape and transpose chains.",
)
def onnx_layout(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    for fn, step_ctx in _parsed(ctx.args["steps"]):
        x = fn(step_ctx, x)
    return x
