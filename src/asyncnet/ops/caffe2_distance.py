"""Caffe2's distance, ranking-loss and channel-shuffle operators, with their gradients:
``CosineSimilarity``, ``L1Distance`` (row-wise, inputs N x D or D), ``MarginRankingCriterion``
(``max(0, -Y (X1 - X2) + margin)``), ``CosineEmbeddingCriterion`` (``1 - S`` where Y = 1, else
``max(0, S - margin)``) and ``ChannelShuffle`` (channels as ``group`` x C/group, transposed).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[1.0, 0.0], [3.0, 4.0]], np.float32))
    >>> ws.feed("y", np.array([[0.0, 2.0], [3.0, 4.0]], np.float32))
    >>> net = an.Net("d"); _ = net.CosineSimilarity(["x", "y"], "c"); _ = net.L1Distance(["x", "y"], "l")
    >>> ws.run_net_once(net); ws.fetch("c"), ws.fetch("l")
    (array([0., 1.], dtype=float32), array([3., 0.], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, float_array, same_dtype

__all__: list[str] = []  # the ops are reached through the registry

_EPS = 1e-12  # Caffe2's kEps in distance_op.cc


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _pair(ctx: Any, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = float_array(ctx, _np(x), 0), float_array(ctx, _np(y), 1)
    same_dtype(ctx, [x, y])
    if x.shape != y.shape or x.ndim not in (1, 2):
        raise ValueError(f"expected X and Y of one 1-D or 2-D shape, got {x.shape} and {y.shape}")
    return x, y


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1) if x.ndim == 2 else x.reshape(1, -1)


def _out_shape(x: np.ndarray) -> tuple[int, ...]:
    return (x.shape[0],) if x.ndim == 2 else (1,)


def _two_grads(grad_type: str, extra: int = 2) -> Any:
    """A maker: ``grad_type`` on the forward inputs and dY, giving the first two inputs' gradients."""

    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        n = len(op.inputs)
        if gout[0] is None:
            return [], [None] * n
        outs = ["#d0", "#d1"][:extra]
        grad = OperatorDef(grad_type, [*op.inputs, gout[0]], outs, dict(op.args))
        return [grad], outs + [None] * (n - extra)

    return maker


# -- CosineSimilarity -------------------------------------------------------------------------------


@register_op("CosineSimilarity", inputs=2, doc="Row-wise cosine similarity: X.Y / max(|X| |Y|, 1e-12).")
def cosine_similarity(ctx: Any, x: Any, y: Any) -> np.ndarray:
    x, y = _pair(ctx, x, y)
    xr, yr = _rows(x), _rows(y)
    norm = np.maximum(np.linalg.norm(xr, axis=1) * np.linalg.norm(yr, axis=1), _EPS)
    return ((xr * yr).sum(axis=1) / norm).astype(x.dtype).reshape(_out_shape(x))


@register_op(
    "CosineSimilarityGradient",
    inputs=3,
    outputs=2,
    inputs_doc=("X", "Y", "dCos"),
    outputs_doc=("dX", "dY"),
    doc="dX = dCos (Y / (|X||Y|) - cos X / |X|^2), and dY likewise.",
)
def cosine_similarity_gradient(ctx: Any, x: Any, y: Any, dcos: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = _pair(ctx, x, y)
    xr, yr = _rows(x).astype(np.float64), _rows(y).astype(np.float64)
    g = float_array(ctx, _np(dcos), 2).reshape(-1, 1).astype(np.float64)
    nx, ny = np.linalg.norm(xr, axis=1, keepdims=True), np.linalg.norm(yr, axis=1, keepdims=True)
    norm = np.maximum(nx * ny, _EPS)
    cos = (xr * yr).sum(axis=1, keepdims=True) / norm
    dx = g * (yr / norm - cos * xr / np.maximum(nx * nx, _EPS))
    dy = g * (xr / norm - cos * yr / np.maximum(ny * ny, _EPS))
    return dx.astype(x.dtype).reshape(x.shape), dy.astype(y.dtype).reshape(y.shape)


register_gradient("CosineSimilarity")(_two_grads("CosineSimilarityGradient"))


# -- L1Distance -------------------------------------------------------------------------------------


@register_op("L1Distance", inputs=2, doc="Row-wise L1 distance: sum |X - Y|.")
def l1_distance(ctx: Any, x: Any, y: Any) -> np.ndarray:
    x, y = _pair(ctx, x, y)
    return np.abs(_rows(x) - _rows(y)).sum(axis=1).astype(x.dtype).reshape(_out_shape(x))


@register_op(
    "L1DistanceGradient",
    inputs=3,
    outputs=2,
    inputs_doc=("X", "Y", "dDistance"),
    outputs_doc=("dX", "dY"),
    doc="dX = sign(X - Y) dDistance (0 within 1e-12 of a tie), dY = -dX.",
)
def l1_distance_gradient(ctx: Any, x: Any, y: Any, dd: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = _pair(ctx, x, y)
    diff = _rows(x) - _rows(y)
    g = float_array(ctx, _np(dd), 2).reshape(-1, 1)
    dx = np.where(diff > _EPS, g, np.where(diff < -_EPS, -g, 0)).astype(x.dtype).reshape(x.shape)
    return dx, -dx


register_gradient("L1Distance")(_two_grads("L1DistanceGradient"))


# -- ranking criteria -----------------------------------------------------------------------------

_MARGIN = [Arg("margin", float, 1.0, "the margin")]


def _labels(ctx: Any, y: Any, i: int, n: int) -> np.ndarray:
    y = array(ctx, _np(y), i)
    if y.size != n:
        raise ValueError(f"expected {n} labels in input {i}, got shape {y.shape}")
    return y.reshape(-1)


@register_op(
    "MarginRankingCriterion",
    inputs=3,
    args=_MARGIN,
    inputs_doc=("X1", "X2", "Y (1 or -1)"),
    doc="loss = max(0, -Y (X1 - X2) + margin), element-wise.",
)
def margin_ranking_criterion(ctx: Any, x1: Any, x2: Any, y: Any) -> np.ndarray:
    x1, x2 = _pair(ctx, x1, x2)
    lab = _labels(ctx, y, 2, x1.size).reshape(x1.shape).astype(x1.dtype)
    return np.maximum(-lab * (x1 - x2) + x1.dtype.type(ctx.args["margin"]), 0).astype(x1.dtype)


@register_op(
    "MarginRankingCriterionGradient",
    inputs=4,
    outputs=2,
    args=_MARGIN,
    inputs_doc=("X1", "X2", "Y", "dLoss"),
    outputs_doc=("dX1", "dX2"),
    doc="Where the loss is positive: dX1 = -Y dLoss, dX2 = Y dLoss; else 0.",
)
def margin_ranking_criterion_gradient(ctx: Any, x1: Any, x2: Any, y: Any, dl: Any) -> tuple[np.ndarray, np.ndarray]:
    x1, x2 = _pair(ctx, x1, x2)
    lab = _labels(ctx, y, 2, x1.size).reshape(x1.shape).astype(x1.dtype)
    g = float_array(ctx, _np(dl), 3).reshape(x1.shape)
    active = (-lab * (x1 - x2) + ctx.args["margin"]) > 0
    dx1 = np.where(active, -lab * g, 0).astype(x1.dtype)
    return dx1, -dx1


register_gradient("MarginRankingCriterion")(_two_grads("MarginRankingCriterionGradient"))


@register_op(
    "CosineEmbeddingCriterion",
    inputs=2,
    args=[Arg("margin", float, 0.0, "the margin")],
    inputs_doc=("S (similarities)", "Y (1 or -1)"),
    doc="output = 1 - S where Y = 1, else max(0, S - margin).",
)
def cosine_embedding_criterion(ctx: Any, s: Any, y: Any) -> np.ndarray:
    s = float_array(ctx, _np(s), 0)
    lab = _labels(ctx, y, 1, s.size).reshape(s.shape)
    return np.where(lab == 1, 1 - s, np.maximum(s - ctx.args["margin"], 0)).astype(s.dtype)


@register_op(
    "CosineEmbeddingCriterionGradient",
    inputs=3,
    args=[Arg("margin", float, 0.0, "the margin")],
    inputs_doc=("S", "Y", "dOutput"),
    outputs_doc=("dS",),
    doc="dS = -dOutput where Y = 1, else dOutput where S > margin, else 0.",
)
def cosine_embedding_criterion_gradient(ctx: Any, s: Any, y: Any, dout: Any) -> np.ndarray:
    s = float_array(ctx, _np(s), 0)
    lab = _labels(ctx, y, 1, s.size).reshape(s.shape)
    g = float_array(ctx, _np(dout), 2).reshape(s.shape)
    return np.where(lab == 1, -g, np.where(s > ctx.args["margin"], g, 0)).astype(s.dtype)


register_gradient("CosineEmbeddingCriterion")(_two_grads("CosineEmbeddingCriterionGradient", extra=1))


# -- ChannelShuffle -------------------------------------------------------------------------------

_SHUFFLE = [Arg("group", int, 1, "the number of groups"), Arg("order", str, "NCHW", "NCHW or NHWC")]


def _shuffle(ctx: Any, x: np.ndarray, groups_first: bool) -> np.ndarray:
    order = ctx.args["order"]
    if order not in ("NCHW", "NHWC") or x.ndim < 2:
        raise ValueError(f"expected order NCHW or NHWC and X of at least 2 dimensions, got {order!r}, {x.shape}")
    axis = 1 if order == "NCHW" else x.ndim - 1
    g, c = ctx.args["group"], x.shape[axis]
    if g < 1 or c % g:
        raise ValueError(f"expected {c} channels to split into group={g} equal groups")
    split = (g, c // g) if groups_first else (c // g, g)
    y = x.reshape(x.shape[:axis] + split + x.shape[axis + 1 :])
    return np.ascontiguousarray(np.swapaxes(y, axis, axis + 1)).reshape(x.shape)


@register_op("ChannelShuffle", args=_SHUFFLE, doc="Channels seen as group x (C / group), transposed.")
def channel_shuffle(ctx: Any, x: Any) -> np.ndarray:
    return _shuffle(ctx, array(ctx, _np(x), 0), groups_first=True)


@register_op(
    "ChannelShuffleGradient",
    args=_SHUFFLE,
    inputs_doc=("dY",),
    outputs_doc=("dX",),
    doc="The inverse shuffle of dY.",
)
def channel_shuffle_gradient(ctx: Any, dy: Any) -> np.ndarray:
    return _shuffle(ctx, float_array(ctx, _np(dy), 0), groups_first=False)


@register_gradient("ChannelShuffle")
def _channel_shuffle_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("ChannelShuffleGradient", [gout[0]], ["#dx"], dict(op.args))], ["#dx"]


# -- PairWiseLoss -----------------------------------------------------------------------------------


def _pair_segments(ctx: Any, x: Any, label: Any, lengths: Any, at: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    x, label = float_array(ctx, _np(x), 0), array(ctx, _np(label), 1)
    if x.ndim == 0 or x.size != x.shape[0] or label.size != x.shape[0]:
        raise ValueError(f"expected N scores (N, 1, ...) and N labels, got {x.shape} and {label.shape}")
    if lengths is None:
        lens = [x.shape[0]]
    else:
        lens = array(ctx, _np(lengths), at).reshape(-1).astype(np.int64).tolist()
        if sum(lens) != x.shape[0]:
            raise ValueError(f"expected lengths summing to the {x.shape[0]} predictions, got {lens}")
    return x.reshape(-1).astype(np.float64), label.reshape(-1).astype(np.float64), lens


def _pairs(label: np.ndarray, start: int, n: int) -> list[tuple[int, int, float]]:
    """(i, j, sign) for i > j of one segment with different labels; sign = 1 if label_i > label_j."""
    return [
        (start + i, start + j, 1.0 if label[start + i] > label[start + j] else -1.0)
        for i in range(n)
        for j in range(i)
        if label[start + i] != label[start + j]
    ]


@register_op(
    "PairWiseLoss",
    inputs=(2, 3),
    inputs_doc=("X (N or N x 1 scores)", "label (N)", "lengths (optional: segments of X)"),
    outputs_doc=("Y (one loss per segment)",),
    doc="Per segment, the mean over its pairs with different labels of log(1 + exp(sign (x_j - x_i))), "
    "sign = 1 if label_i > label_j (i later than j); 0 without such pairs.",
)
def pair_wise_loss(ctx: Any, x: Any, label: Any, lengths: Any = None) -> np.ndarray:
    xs, lab, lens = _pair_segments(ctx, x, label, lengths, 2)
    out, start = np.zeros(len(lens), np.float64), 0
    for k, n in enumerate(lens):
        pairs = _pairs(lab, start, n)
        if pairs:
            out[k] = np.mean([np.logaddexp(0, s * (xs[j] - xs[i])) for i, j, s in pairs])
        start += n
    return out.astype(_np(x).dtype)


@register_op(
    "PairWiseLossGradient",
    inputs=(3, 4),
    inputs_doc=("X", "label", "dY", "lengths (optional)"),
    outputs_doc=("dX",),
    doc="The gradient of PairWiseLoss with respect to X.",
)
def pair_wise_loss_gradient(ctx: Any, x: Any, label: Any, dy: Any, lengths: Any = None) -> np.ndarray:
    shape, dtype = _np(x).shape, _np(x).dtype
    xs, lab, lens = _pair_segments(ctx, x, label, lengths, 3)
    g = float_array(ctx, _np(dy), 2).reshape(-1)
    if g.size != len(lens):
        raise ValueError(f"expected dY of {len(lens)} values, got shape {g.shape}")
    dx, start = np.zeros(xs.size), 0
    for k, n in enumerate(lens):
        pairs = _pairs(lab, start, n)
        for i, j, s in pairs:
            d = s / (1 + np.exp(-s * (xs[j] - xs[i]))) * g[k] / len(pairs)
            dx[j] += d
            dx[i] -= d
        start += n
    return dx.astype(dtype).reshape(shape)


@register_gradient("PairWiseLoss")
def _pair_wise_loss_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    n = len(op.inputs)
    if gout[0] is None:
        return [], [None] * n
    ins = [op.inputs[0], op.inputs[1], gout[0], *op.inputs[2:]]
    return [OperatorDef("PairWiseLossGradient", ins, ["#dx"])], ["#dx"] + [None] * (n - 1)
