"""A whole transformer encoder layer as one op, for imported ONNX models.

``ONNXEncoderLayer`` computes what ``torch.nn.TransformerEncoderLayer`` does in inference with its
defaults (post-norm, ReLU feed-forward, no mask, no dropout), on the weights in torch's layout
(a Linear's weight is ``[out, in]``)::

    qkv = x @ Wqkv^T + bqkv                       split into q, k, v; each into num_heads heads
    a   = softmax(q k^T / sqrt(E / num_heads)) v    per head, the heads joined again
    h   = LayerNorm(x + a @ Wo^T + bo)
    y   = LayerNorm(h + relu(h @ W1^T + b1) @ W2^T + b2)

The importer writes it in place of the ~20 ops ``torch.onnx.export`` spells such a layer with
(:func:`asyncnet.interop.onnx._optimize.fuse_encoder_layers`). On float32/float64 inputs with
torch installed the kernel is torch's fused inference kernel (what torch's own module runs in
``inference_mode``), on zero-copy views of numpy arrays; otherwise a numpy (or torch) chain of
matmuls, softmax and layer norms.

    >>> import asyncnet as an, numpy as np
    >>> g = np.random.default_rng(0)
    >>> e, f = 4, 8
    >>> shapes = [(2, 3, e), (3 * e, e), (3 * e,), (e, e), (e,), (e,), (e,), (f, e), (f,), (e, f), (e,), (e,), (e,)]
    >>> ws = an.Workspace()
    >>> names = [f"i{k}" for k in range(13)]
    >>> for n, s in zip(names, shapes):
    ...     ws.feed(n, g.standard_normal(s).astype(np.float32))
    >>> net = an.Net("n"); _ = net.ONNXEncoderLayer(names, "y", num_heads=2)
    >>> ws.run_net_once(net); ws.fetch("y").shape
    (2, 3, 4)
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import float_array
from asyncnet.ops.conv import _torch as torch_if_installed
from asyncnet.tensor.namespace import is_torch

__all__ = ["encoder_layer_numpy"]

#: the op's inputs after X, in the order torch's fused kernel takes them
WEIGHTS = (
    "qkv_weight",
    "qkv_bias",
    "out_weight",
    "out_bias",
    "norm1_weight",
    "norm1_bias",
    "ffn1_weight",
    "ffn1_bias",
    "ffn2_weight",
    "ffn2_bias",
    "norm2_weight",
    "norm2_bias",
)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _validate(op: Any) -> None:
    if op.args.get("num_heads", 0) < 1:
        raise ValueError(f"expected num_heads >= 1, got {op.args.get('num_heads')}")


def _check_shapes(ctx: Any, x: Any, ws: tuple[Any, ...]) -> None:
    """ValueError naming the first input whose shape does not fit X's embedding size E."""
    heads = ctx.args["num_heads"]
    if x.ndim != 3 or x.shape[2] % heads:
        raise ValueError(
            f"expected X {ctx.op.inputs[0]!r} [batch, seq, E] (or [seq, batch, E]) with E divisible by "
            f"num_heads={heads}, got shape {tuple(x.shape)}"
        )
    e, f = x.shape[2], ws[6].shape[0] if ws[6].ndim == 2 else -1
    want = [(3 * e, e), (3 * e,), (e, e), (e,), (e,), (e,), (f, e), (f,), (e, f), (e,), (e,), (e,)]
    for k, (w, s) in enumerate(zip(ws, want), start=1):
        if tuple(w.shape) != s:
            raise ValueError(f"expected {WEIGHTS[k - 1]} {ctx.op.inputs[k]!r} of shape {s}, got {tuple(w.shape)}")


def _fused(torch: Any, x: Any, ws: tuple[Any, ...], heads: int, eps: float, batch_first: bool) -> Any:
    """torch's fused encoder-layer kernel on torch tensors (batch first in and out)."""
    src = x if batch_first else x.transpose(0, 1)
    qkv_w, qkv_b, out_w, out_b, n1w, n1b, f1w, f1b, f2w, f2b, n2w, n2b = ws
    y = torch._transformer_encoder_layer_fwd(
        src, src.shape[2], heads, qkv_w, qkv_b, out_w, out_b, False, False, eps,
        n1w, n1b, n2w, n2b, f1w, f1b, f2w, f2b, None, None,
    )  # fmt: skip
    return y if batch_first else y.transpose(0, 1)


def _can_fuse(torch: Any, x: Any, ws: tuple[Any, ...]) -> bool:
    return (
        torch is not None
        and hasattr(torch, "_transformer_encoder_layer_fwd")
        and all(w.dtype == x.dtype for w in ws)
        and 0 not in x.shape
    )


def _layer_norm_np(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + x.dtype.type(eps)) * w + b


def encoder_layer_numpy(x: np.ndarray, ws: tuple[np.ndarray, ...], heads: int, eps: float) -> np.ndarray:
    """The layer on numpy arrays, X ``[batch, seq, E]``: the reference chain of matmuls.

    >>> e = 4; ws = [np.zeros(s, np.float32) for s in [(12, 4), (12,), (4, 4), (4,), (4,), (4,), (8, 4), (8,), (4, 8), (4,), (4,), (4,)]]
    >>> encoder_layer_numpy(np.ones((1, 2, e), np.float32), tuple(ws), 2, 1e-5).shape
    (1, 2, 4)
    """
    qkv_w, qkv_b, out_w, out_b, n1w, n1b, f1w, f1b, f2w, f2b, n2w, n2b = ws
    b, s, e = x.shape
    d = e // heads
    qkv = x @ qkv_w.T + qkv_b
    q, k, v = (qkv[..., i * e : (i + 1) * e].reshape(b, s, heads, d).transpose(0, 2, 1, 3) for i in range(3))
    scores = (q @ k.transpose(0, 1, 3, 2)) * x.dtype.type(1 / math.sqrt(d))
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p = scores / scores.sum(axis=-1, keepdims=True)
    a = (p @ v).transpose(0, 2, 1, 3).reshape(b, s, e)
    h = _layer_norm_np(x + (a @ out_w.T + out_b), n1w, n1b, eps)
    ff = np.maximum(h @ f1w.T + f1b, 0) @ f2w.T + f2b
    return _layer_norm_np(h + ff, n2w, n2b, eps)


def _encoder_layer_torch(torch: Any, x: Any, ws: tuple[Any, ...], heads: int, eps: float) -> Any:
    """The same chain on torch tensors (a torch without the fused kernel, or mixed dtypes)."""
    qkv_w, qkv_b, out_w, out_b, n1w, n1b, f1w, f1b, f2w, f2b, n2w, n2b = ws
    b, s, e = x.shape
    q, k, v = (t.reshape(b, s, heads, e // heads).transpose(1, 2) for t in (x @ qkv_w.T + qkv_b).split(e, dim=-1))
    a = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(e // heads), dim=-1) @ v
    a = a.transpose(1, 2).reshape(b, s, e)
    ln = torch.nn.functional.layer_norm
    h = ln(x + (a @ out_w.T + out_b), (e,), n1w, n1b, eps)
    return ln(h + (torch.relu(h @ f1w.T + f1b) @ f2w.T + f2b), (e,), n2w, n2b, eps)


def _torch_result(x: Any, ws: tuple[Any, ...], heads: int, eps: float, batch_first: bool) -> Any:
    torch = torch_if_installed()
    with torch.no_grad():
        if _can_fuse(torch, x, ws):
            return _fused(torch, x, ws, heads, eps, batch_first)
        src = x if batch_first else x.transpose(0, 1)
        y = _encoder_layer_torch(torch, src, ws, heads, eps)
        return y if batch_first else y.transpose(0, 1)


def _same_float(arrays: tuple[Any, ...]) -> bool:
    """numpy float32/float64 arrays of one dtype (torch's kernel then runs on their views)."""
    dtype = arrays[0].dtype
    return dtype in _FLOATS and all(type(a) is np.ndarray and a.dtype == dtype for a in arrays)


def _viewable(a: np.ndarray) -> np.ndarray:
    """``a`` when torch can view it as it is (writeable, C-contiguous), else a C-contiguous copy:
    the kernel is chosen by dtype, never by layout, so every layout gives the same bits."""
    return a if a.flags.writeable and a.flags.c_contiguous else np.array(a, order="C")


def _specialize(ctx: Any, x: Any, *ws: Any) -> Any:
    """For numpy float inputs: torch's fused kernel with the weights' torch views kept while the
    same arrays come back (the general kernel's torch call on the same values)."""
    if type(x) is not np.ndarray or len(ws) != 12:
        return None
    torch = torch_if_installed()
    try:
        _check_shapes(ctx, x, ws)
    except ValueError:
        return None
    if torch is None or not _same_float((x, *ws)) or not _can_fuse(torch, x, ws):
        return None
    heads, eps, first = ctx.args["num_heads"], ctx.args["epsilon"], ctx.args["batch_first"]
    view, inference, same = torch.from_numpy, torch.inference_mode, operator.is_
    cached: list[Any] = [(), ()]  # the weight arrays, their torch views

    def encoder_layer(ctx: Any, x: Any, *ws: Any) -> Any:
        if len(ws) == len(cached[0]) and all(map(same, ws, cached[0])):
            views = cached[1]
        else:
            views = tuple(view(_viewable(a)) for a in ws)
            if all(v.data_ptr() == a.ctypes.data for v, a in zip(views, ws)):  # no copies: the arrays' own memory
                cached[:] = [ws, views]
        with inference():
            return _fused(torch, view(_viewable(x)), views, heads, eps, first).numpy()

    return encoder_layer


@register_op(
    "ONNXEncoderLayer",
    inputs=13,
    args=[
        Arg("num_heads", int, Arg.REQUIRED, "attention heads (E divisible by it)"),
        Arg("epsilon", float, 1e-5, "the two layer norms' epsilon"),
        Arg("batch_first", bool, True, "X and Y [batch, seq, E]; False: [seq, batch, E]"),
    ],
    devices=("cpu", "cuda"),
    validate=_validate,
    specialize=_specialize,
    doc="Y = a post-norm transformer encoder layer with ReLU feed-forward (torch's TransformerEncoderLayer in "
    "inference) of X [batch, seq, E]; inputs X, then Wqkv [3E, E], bqkv, Wo [E, E], bo, norm1 scale and bias, "
    "W1 [F, E], b1, W2 [E, F], b2, norm2 scale and bias. The importer fuses the ONNX ops of such a layer into it.",
)
def onnx_encoder_layer(ctx: Any, x: Any, *ws: Any) -> Any:
    x = float_array(ctx, x, 0)
    _check_shapes(ctx, x, ws)
    heads, eps, first = ctx.args["num_heads"], ctx.args["epsilon"], ctx.args["batch_first"]
    if is_torch(x):
        return _torch_result(x, ws, heads, eps, first)
    torch = torch_if_installed()
    if torch is not None and _same_float((x, *ws)) and _can_fuse(torch, x, ws):
        with torch.inference_mode():
            views = [torch.from_numpy(_viewable(a)) for a in (x, *ws)]
            return _fused(torch, views[0], tuple(views[1:]), heads, eps, first).numpy()
    src = x if first else x.transpose(1, 0, 2)
    y = encoder_layer_numpy(src, tuple(ws), heads, eps)
    return np.ascontiguousarray(y if first else y.transpose(1, 0, 2))
