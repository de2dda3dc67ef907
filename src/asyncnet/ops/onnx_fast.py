"""Fast kernels of the ONNX ops for straight nets (the ``specialize`` of their schemas).

A straight net whose every op has a ``specialize`` runs, for inputs of the types, dtypes and
shapes it has seen, one compiled function calling each op's fast kernel
(:mod:`asyncnet.exec.specialize`). An imported model's predict net is such a net once its ONNX
ops have one: this module gives them theirs. Each fast kernel is its general kernel's own calls
with what depends only on the inputs' kinds worked out once (the axes, the target shape, the
branch taken, the torch function) and the checks left out, so it gives the same bits; where the
general kernel looks at something besides type, dtype and shape (whether an array is
writeable, for torch's zero-copy views), the fast kernel looks too and hands over to the
general one. Only numpy inputs are specialized.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("a", np.ones((2, 3), np.float32)); ws.feed("b", np.ones((3, 2), np.float32))
    >>> net = an.Net("n", type="straight"); _ = net.ONNXMatMul(["a", "b"], "c"); _ = net.ONNXBinary(["c", "c"], "d", fn="Mul")
    >>> for _ in range(3): ws.run_net_once(net)
    >>> ws.fetch("d").tolist()
    [[9.0, 9.0], [9.0, 9.0]]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.core.registry import get_schema
from asyncnet.ops import onnx_nn, onnx_rnn
from asyncnet.ops.conv import _torch as torch_if_installed

__all__: list[str] = []

_nd = np.ndarray
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
Fast = Callable[..., Any]


def _specializes(op_type: str) -> Callable[[Fast], Fast]:
    """Make the decorated function ``op_type``'s ``specialize`` (which it must not have yet)."""

    def deco(fn: Fast) -> Fast:
        schema = get_schema(op_type)
        if schema.specialize is not None:
            raise RuntimeError(f"{op_type} already has a specialize")
        schema.specialize = fn
        return fn

    return deco


def _numpy(*xs: Any) -> bool:
    return all(type(x) is _nd for x in xs)


def _float_arrays(*xs: Any) -> bool:
    return _numpy(*xs) and all(x.dtype in _FLOATS for x in xs)


_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.true_divide}


@_specializes("ONNXBinary")
def _binary(ctx: Any, a: Any, b: Any) -> Fast | None:
    if not _numpy(a, b) or a.ndim + b.ndim == 0:  # 0-d with 0-d: numpy gives a scalar
        return None
    uf = _UFUNCS[ctx.args["fn"]]
    return lambda ctx, a, b: uf(a, b)


@_specializes("ONNXMatMul")
def _matmul(ctx: Any, a: Any, b: Any) -> Fast | None:
    if not _numpy(a, b) or (a.ndim == 1 and b.ndim == 1):
        return None
    mm = np.matmul
    return lambda ctx, a, b: mm(a, b)


@_specializes("ONNXMatMulAdd")
def _matmul_add(ctx: Any, a: Any, b: Any, c: Any) -> Fast | None:
    if not _numpy(a, b, c) or a.ndim < 2:
        return None
    if ctx.args["activation"] == "Relu":
        return _matmul_add_relu(ctx, a, b, c)
    if a.ndim > 2 and a.shape[-2] < onnx_nn._FEW_ROWS and b.ndim == 2:
        rows, shape = (-1, a.shape[-1]), (*a.shape[:-1], b.shape[-1])

        def matmul_add_rows(ctx: Any, a: Any, b: Any, c: Any) -> Any:
            y = (a.reshape(rows) @ b).reshape(shape)
            y += c
            return y

        return matmul_add_rows

    def matmul_add(ctx: Any, a: Any, b: Any, c: Any) -> Any:
        y = a @ b
        y += c
        return y

    return matmul_add


def _matmul_add_relu(ctx: Any, a: Any, b: Any, c: Any) -> Fast | None:
    dtype = np.result_type(a, b, c)
    if dtype.kind not in "fiu":
        return None
    zero, maximum = dtype.type(0), np.maximum
    few = a.ndim > 2 and a.shape[-2] < onnx_nn._FEW_ROWS and b.ndim == 2
    rows, shape = (-1, a.shape[-1]), (*a.shape[:-1], b.shape[-1])

    def matmul_add_relu(ctx: Any, a: Any, b: Any, c: Any) -> Any:
        y = (a.reshape(rows) @ b).reshape(shape) if few else a @ b
        y += c
        maximum(y, zero, out=y)
        return y

    return matmul_add_relu


@_specializes("ONNXSoftmax")
def _softmax(ctx: Any, x: Any) -> Fast | None:
    if not _float_arrays(x) or x.ndim == 0:
        return None
    torch = torch_if_installed()
    if torch is None:
        return None
    general, axis, shape = onnx_nn.onnx_softmax, ctx.args["axis"], x.shape
    two = None
    if ctx.args["legacy"]:
        a = axis % x.ndim
        two, axis = (math.prod(shape[:a]), math.prod(shape[a:])), 1
    fn, view = (torch.log_softmax if ctx.args["log"] else torch.softmax), torch.from_numpy

    def softmax(ctx: Any, x: Any) -> Any:
        if not x.flags.writeable:
            return general(ctx, x)
        return fn(view(x if two is None else x.reshape(two)), axis).numpy().reshape(shape)

    return softmax


@_specializes("ONNXLayerNorm")
def _layer_norm(ctx: Any, x: Any, scale: Any, b: Any = None) -> Fast | None:
    wb = (scale,) if b is None else (scale, b)
    if not _float_arrays(x, *wb) or x.ndim == 0 or any(v.dtype != x.dtype for v in wb):
        return None
    inner = tuple(x.shape[ctx.args["axis"] % x.ndim :])
    if any(tuple(v.shape) != inner for v in wb) or math.prod(inner) == 0:
        return None
    torch = torch_if_installed()
    if torch is None:
        return None
    general, eps, view, norm = onnx_nn.onnx_layer_norm, ctx.args["epsilon"], torch.from_numpy, torch.layer_norm
    enabled = torch.backends.cudnn.enabled

    def layer_norm(ctx: Any, x: Any, scale: Any, b: Any = None) -> Any:
        if not (x.flags.writeable and scale.flags.writeable and (b is None or b.flags.writeable)):
            return general(ctx, x, scale, b)
        return norm(view(x), inner, view(scale), None if b is None else view(b), eps, enabled).numpy()

    return layer_norm


@_specializes("ONNXReduce")
def _reduce(ctx: Any, x: Any, axes: Any = None) -> Fast | None:
    if axes is not None or not _numpy(x) or x.ndim == 0:
        return None
    ax = tuple(onnx_nn._axes(ctx, x.ndim, None)) if ctx.args["axes"] else tuple(range(x.ndim))
    fn, keep = ctx.args["fn"], ctx.args["keepdims"]
    if not ax or (not keep and len(ax) == x.ndim):  # nothing reduced, or a scalar result
        return None
    if fn == "mean" and x.dtype in _FLOATS:
        n, add, div = math.prod(x.shape[a] for a in ax), np.add.reduce, np.true_divide

        def mean(ctx: Any, x: Any) -> Any:
            y = add(x, axis=ax, keepdims=keep)
            div(y, n, out=y, casting="unsafe")
            return y

        return mean
    return lambda ctx, x: getattr(x, fn)(axis=ax, keepdims=keep)


@_specializes("ONNXGlobalPool")
def _global_pool(ctx: Any, x: Any) -> Fast | None:
    if not _numpy(x) or x.ndim < 3:
        return None
    dims = tuple(range(2, x.ndim))
    if ctx.args["mode"] == "avg":
        return lambda ctx, x: x.mean(axis=dims, keepdims=True)
    return lambda ctx, x: x.max(axis=dims, keepdims=True)


@_specializes("ONNXClip")
def _clip(ctx: Any, x: Any) -> Fast | None:
    if not _numpy(x) or x.ndim == 0:
        return None
    lo, hi = ctx.args["min"], ctx.args["max"]
    if lo is None and hi is None:
        return lambda ctx, x: x
    t = x.dtype.type
    lo, hi, clip = None if lo is None else t(lo), None if hi is None else t(hi), np.clip
    return lambda ctx, x: clip(x, lo, hi)


@_specializes("ONNXConcat")
def _concat(ctx: Any, *xs: Any) -> Fast | None:
    if not _numpy(*xs):
        return None
    axis, cat = ctx.args["axis"], np.concatenate
    return lambda ctx, *xs: cat(xs, axis=axis)


@_specializes("ONNXIdentity")
def _identity(ctx: Any, x: Any) -> Fast | None:
    return (lambda ctx, x: x) if _numpy(x) else None


# -- layout ops: a view or a copy of the one input, the same for every input of one shape ------


def _reshaped(general: Fast) -> Fast:
    """The specialize of a layout op that is a reshape (its output: X.reshape(its shape))."""

    def specialize(ctx: Any, x: Any, *rest: Any) -> Fast | None:
        if rest or not _numpy(x):
            return None
        shape = general(ctx, x).shape
        return lambda ctx, x: x.reshape(shape)

    return specialize


for _t, _fn in (
    ("ONNXReshape", onnx_nn.onnx_reshape),
    ("ONNXFlatten", onnx_nn.onnx_flatten),
    ("ONNXSqueeze", onnx_nn.onnx_squeeze),
    ("ONNXUnsqueeze", onnx_nn.onnx_unsqueeze),
):
    _specializes(_t)(_reshaped(_fn))


def _perm(ctx: Any, x: Any) -> list[int]:
    return list(ctx.args["perm"]) or list(range(x.ndim))[::-1]


@_specializes("ONNXTranspose")
def _transpose(ctx: Any, x: Any) -> Fast | None:
    if not _numpy(x):
        return None
    perm = _perm(ctx, x)
    if sorted(perm) != list(range(x.ndim)):
        return None
    return lambda ctx, x: x.transpose(perm)


@_specializes("ONNXGather")
def _gather(ctx: Any, x: Any, idx: Any = None) -> Fast | None:
    if idx is not None or not _numpy(x) or x.ndim < 2:
        return None
    axis, n, k = ctx.args["axis"] % x.ndim, x.shape[ctx.args["axis"] % x.ndim], ctx.args["index"]
    if not -n <= k < n:
        return None
    at = (slice(None),) * axis + (k + n if k < 0 else k,)
    return lambda ctx, x: x[at]


@_specializes("ONNXLayout")
def _layout(ctx: Any, x: Any) -> Fast | None:
    """The chain's steps, each specialized for the shape it receives (one fast kernel each)."""
    if not _numpy(x):
        return None
    steps: list[tuple[Fast, Any]] = []
    for fn, step_ctx in onnx_nn._parsed(ctx.args["steps"]):
        fast = get_schema(step_ctx.op.type).specialize(step_ctx, x)  # type: ignore[misc]
        if fast is None:
            return None
        steps.append((fast, step_ctx))
        x = fn(step_ctx, x)
    if len(steps) == 1:
        ((f0, c0),) = steps
        return lambda ctx, x: f0(c0, x)

    def layout(ctx: Any, x: Any) -> Any:
        for fast, step_ctx in steps:
            x = fast(step_ctx, x)
        return x

    return layout


# -- recurrent ops: the general kernel (its cost is in the loop, not the checks) ----------------


@_specializes("ONNXLSTM")
@_specializes("ONNXGRU")
def _recurrent(ctx: Any, *inputs: Any) -> Fast | None:
    if not _numpy(*inputs):
        return None
    general = get_schema(ctx.op.type).fn
    fused = _fused_recurrent(ctx, general, *inputs)
    return general if fused is None else fused


def _fused_recurrent(ctx: Any, general: Fast, x: Any, w: Any, r: Any, b: Any = None, *state: Any) -> Fast | None:
    """torch's fused recurrence for the exporters' common form (weights in torch's gate order, one
    forward direction, sequence first, no initial state) with the weights' torch views kept while
    the same arrays come back: the general kernel's torch call on the same views."""
    args, lstm = ctx.args, ctx.op.type == "ONNXLSTM"
    n_gates = 4 if lstm else 3
    if state or args["gate_order"] != "torch" or args["direction"] != "forward" or args["layout"] != 0:
        return None
    if not lstm and not args.get("linear_before_reset"):
        return None
    arrays = [a for a in (x, w, r, b) if a is not None]
    if x.ndim != 3 or x.dtype not in _FLOATS or any(a.dtype != x.dtype for a in arrays) or 0 in x.shape:
        return None
    hidden = args["hidden_size"]
    if w.shape[:2] != (1, n_gates * hidden) or r.shape != (1, n_gates * hidden, hidden) or w.shape[2] != x.shape[2]:
        return None
    torch = torch_if_installed()
    if torch is None:
        return None
    produce = list(args["produce"])[: 3 if lstm else 2]
    view = torch.from_numpy
    zeros = torch.zeros((1, x.shape[1], hidden), dtype=torch.float32 if x.dtype == np.float32 else torch.float64)
    call, inference = (torch.lstm if lstm else torch.gru), torch.inference_mode
    cached: list[Any] = [None, None, None, None]  # w, r, b, their torch views

    def weights(w: Any, r: Any, b: Any) -> Any:
        if w is cached[0] and r is cached[1] and b is cached[2]:
            return cached[3]
        if not all(a.flags.c_contiguous and a.flags.writeable for a in (w, r, *(() if b is None else (b,)))):
            return None
        flat = [view(w[0]), view(r[0])]
        if b is not None:
            flat += [view(b[0][: n_gates * hidden]), view(b[0][n_gates * hidden :])]
        cached[:] = [w, r, b, flat]
        return flat

    def recurrent(ctx: Any, x: Any, w: Any, r: Any, b: Any = None, *state: Any) -> Any:
        flat = None if state else weights(w, r, b)
        xt = x.transpose(1, 0, 2)
        if flat is None or not x.flags.writeable or not (xt.flags.c_contiguous or x.flags.c_contiguous):
            return general(ctx, x, w, r, b, *state)
        first = xt.flags.c_contiguous
        with inference():
            if lstm:
                y, h, c = call(
                    view(xt if first else x), (zeros, zeros), flat, b is not None, 1, 0.0, False, False, first
                )
            else:
                y, h = call(view(xt if first else x), zeros, flat, b is not None, 1, 0.0, False, False, first)
                c = h
        picked = [v for v, p in zip((y, h, c), produce) if p]
        if produce[0]:
            picked[0] = (y.transpose(0, 1) if first else y).unsqueeze(1)
        picked = [v.numpy() for v in picked]
        return picked[0] if len(picked) == 1 else picked

    return recurrent


_ = onnx_rnn  # its ops registered before they are specialized
