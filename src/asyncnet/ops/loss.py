"""Losses and metrics, each beside its gradient: SoftmaxWithLoss, LabelCrossEntropy, AveragedLoss,
SquaredL2 and Accuracy (a metric, no gradient).

Labels are int32 or int64 class ids of shape [N] (or [N, 1]); predictions are float [N, D].
Scalar results (``loss``, ``accuracy``) are 0-d arrays. Every kernel runs on numpy arrays or torch
tensors (:mod:`asyncnet.tensor.namespace`); results keep the inputs' library and device.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> ws.feed("logits", np.zeros((2, 4), np.float32)); ws.feed("label", np.array([1, 3], np.int32))
    >>> net = an.Net("loss")
    >>> _ = net.SoftmaxWithLoss(["logits", "label"], ["softmax", "loss"])
    >>> ws.run_net_once(net)
    >>> round(float(ws.fetch("loss")), 4)  # log(4)
    1.3863
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.errors import NetDefinitionError
from asyncnet.ops import grad as _grad  # also registers the gradient ops the makers below emit
from asyncnet.ops._check import FLOAT_DTYPES, array, flatten_2d, float_array, same_dtype
from asyncnet.ops.math import CPU_CUDA, canonical_axis
from asyncnet.tensor.namespace import cpu_tensors, namespace, torch_namespace

_INT_IDS = (np.int32, np.int64)
LOG_THRESHOLD = 1e-20  # probabilities are clamped here before the log, as Caffe2 does


def _labels(ctx: Any, label: Any, i: int, n: int, d: int, axis: int = 1) -> np.ndarray:
    """``label`` as a 1-D int array of n class ids in [0, d): shaped [N] or [N, 1] (Caffe2's rule for
    logits viewed 2-D at ``axis``: ``axis`` dims of n elements, or dims before ``axis`` of n elements
    and 1 after)."""
    label = array(ctx, label, i)
    if not (
        label.dtype.type in _INT_IDS
        if isinstance(label, np.ndarray)
        else str(label.dtype) in ("torch.int32", "torch.int64")
    ):
        raise TypeError(f"expected int32 or int64 class ids in input {i} {ctx.op.inputs[i]!r}, got dtype {label.dtype}")
    shape = tuple(label.shape)
    if shape not in ((n,), (n, 1)) and not (math.prod(shape[:axis]) == n and math.prod(shape[axis:]) == 1):
        want = f"({n},) or ({n}, 1)" if axis == 1 else f"{n} ids (dims before axis {axis}; 1 after)"
        raise ValueError(f"expected labels of shape {want} in input {i} {ctx.op.inputs[i]!r}, got {label.shape}")
    label = label.reshape(n)
    if n and bool(((label < 0) | (label >= d)).any()):  # one reduction (one device sync on a GPU)
        raise ValueError(
            f"expected class ids in [0, {d}) in input {i} {ctx.op.inputs[i]!r}, got range [{label.min()}, {label.max()}]"
        )
    return label


def _matrix(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = float_array(ctx, x, i)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D [N, D] array in input {i} {ctx.op.inputs[i]!r}, got shape {x.shape}")
    return x


def _label_rows(ctx: Any, x: Any, i: int) -> np.ndarray:
    """Caffe2's LabelCrossEntropy view of X: [N, D] with D the product of the dims after the first
    (a 1-D X is one row)."""
    x = float_array(ctx, x, i)
    if x.ndim == 0:
        raise ValueError(f"expected an array of at least 1 dim in input {i} {ctx.op.inputs[i]!r}, got a scalar")
    if x.ndim == 1:
        return x.reshape(1, x.shape[0])
    return x if x.ndim == 2 else x.reshape(x.shape[0], math.prod(x.shape[1:]))


def _scalar_grad(ctx: Any, dy: Any, i: int, like: Any) -> Any:
    """The one element of a loss gradient, in ``like``'s dtype (a numpy scalar or a 0-d tensor)."""
    dy = float_array(ctx, dy, i)
    xp = namespace(ctx, like, dy)
    if xp.size(dy) != 1:
        raise ValueError(
            f"expected a scalar loss gradient in input {i} {ctx.op.inputs[i]!r}, got shape {tuple(dy.shape)}"
        )
    if xp.name == "numpy":
        return like.dtype.type(dy.reshape(()))
    return dy.reshape(()).to(like.dtype)


def _no_grad_through(op: OperatorDef, gout: list[str | None], idx: int) -> None:
    if gout[idx] is not None:
        raise NetDefinitionError(
            f"{op.type}: no gradient flows back through output {idx} {op.outputs[idx]!r}; "
            "only the loss output is differentiable"
        )


# -- SoftmaxWithLoss: P = softmax(X); loss = -mean_i log P[i, label_i]; dX = (P - onehot) dloss / N
_ONLY_LOSS = Arg(
    "only_loss",
    bool,
    False,
    "the softmax output is read by nothing but the gradient, which may then "
    "reuse its array for dX (Caffe2's memory-saving only_loss)",
)
_SWL_ARGS = [
    _ONLY_LOSS,
    Arg(
        "label_prob",
        bool,
        False,
        "labels are probability distributions [N, D] (rows >= 0 summing to 1) instead of "
        "class ids; the loss is then -sum_j T[i, j] log(max(P[i, j], 1e-20)), Caffe2's clamp",
    ),
    Arg("axis", int, 1, "X is viewed as [prod(dims[:axis]), prod(dims[axis:])]; P keeps X's shape"),
    Arg("scale", float, 1.0, "multiplies the loss (and so its gradient); must be >= 0"),
    Arg("order", str, "NCHW", "Caffe2's; only NCHW exists", choices=("NCHW",)),
]


def _validate_swl(op: OperatorDef) -> None:
    scale = op.args.get("scale", 1.0)
    if isinstance(scale, (int, float)) and not scale >= 0:
        raise ValueError(f"{op.type}: expected scale >= 0, got {scale}")


def _softmax_with_loss_plain(ctx: Any, x: np.ndarray, label: np.ndarray) -> tuple[Any, Any]:
    """SoftmaxWithLoss where :func:`_plain_types` holds (and the args are the defaults)."""
    index = _label_index(x, label)
    if index is not None:
        try:
            return _softmax_with_loss_np(x, index)
        except IndexError:
            pass  # an id out of range: the general path says which
    return _softmax_with_loss(ctx, x, label, None)


def _specialize_swl(ctx: Any, x: Any, label: Any, *weight: Any) -> Any:
    return _softmax_with_loss_plain if not weight and _plain_args(ctx) and _plain_types(x, label) else None


@register_op(
    "SoftmaxWithLoss",
    inputs=(2, 3),
    outputs=2,
    devices=CPU_CUDA,
    validate=_validate_swl,
    specialize=_specialize_swl,
    inputs_doc=(
        "logits X [N, D] (or any shape, viewed 2-D at `axis`)",
        "label [N] int (label_prob: [N, D] float)",
        "weight [N] (optional): each example's weight",
    ),
    outputs_doc=("softmax P, X's shape", "loss (0-d)"),
    args=_SWL_ARGS,
    doc="Softmax of the logits and the cross-entropy against the labels (log-sum-exp, no overflow), Caffe2's: "
    "loss = scale * sum_i w_i l_i / sum_i w_i (w = 1 without a weight input; 0 if the weights sum to 0).",
)
def softmax_with_loss(ctx: Any, x: Any, label: Any, *weight: Any) -> tuple[np.ndarray, np.ndarray]:
    if not weight and _plain_args(ctx) and _plain_types(x, label):
        return _softmax_with_loss_plain(ctx, x, label)
    if not weight and _plain_args(ctx) and _plain_torch(x, label):
        log_p = x.log_softmax(1)
        try:  # nll_loss refuses an id out of range (int32 ids never equal the ignore_index)
            loss = torch_namespace().lib.nn.functional.nll_loss(log_p, label.long(), ignore_index=_NEVER)
        except (IndexError, RuntimeError):
            pass  # the general path says which
        else:
            return log_p.exp(), loss
    return _softmax_with_loss(ctx, x, label, weight[0] if weight else None)


def _plain_args(ctx: Any) -> bool:
    """The op's args are the defaults the short paths assume (kept in its args dict after the first call)."""
    a = ctx.args
    plain = a.get("_plain")
    if plain is None:
        plain = a["_plain"] = not a["label_prob"] and a["axis"] == 1 and a["scale"] == 1.0
    return plain


def _softmax_with_loss(ctx: Any, x: Any, label: Any, weight: Any) -> tuple[Any, Any]:
    """The general path: any axis, label_prob, a weight input, scale."""
    a = ctx.args
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x, label) if weight is None else namespace(ctx, x, label, weight)
    axis = canonical_axis(ctx, x, "axis")
    x2 = flatten_2d(x, axis)
    n, d = x2.shape
    w = None if weight is None else _weights(ctx, weight, n, x2)
    if n == 0:  # Caffe2: no example, a weight sum of 0, so the loss is 0
        _labels(ctx, label, 1, n, d, axis) if not a["label_prob"] else _label_probs(ctx, label, x2, axis)
        return xp.copy(x), xp.scalar_like(0.0, x)
    if a["label_prob"]:
        t = _label_probs(ctx, label, x2, axis)
        p = _softmax_rows(xp, x2)
        log_likelihood = (xp.log(xp.maximum(p, xp.scalar_like(LOG_THRESHOLD, p))) * t).sum(axis=1)
    else:
        label = _labels(ctx, label, 1, n, d, axis)
        if xp.name == "torch":  # one fused kernel where torch has it (the same math)
            log_p = xp.lib.log_softmax(x2, 1)
        else:
            z = x2 - xp.amax(x2, axis=1, keepdims=True)
            log_p = z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        log_likelihood, p = xp.take_rows(log_p, label), xp.exp(log_p)
    if w is None:
        loss = -log_likelihood.mean()  # negated after the mean: -(mean of log p)
    else:
        total = w.sum()
        loss = -(log_likelihood * w).sum() / total if float(total) != 0 else total * 0
    if a["scale"] != 1.0:
        loss = loss * a["scale"]
    return p.reshape(x.shape), xp.scalar_like(loss, x)


def _softmax_rows(xp: Any, x2: Any) -> Any:
    """P = exp(x - rowmax) / rowsum: Caffe2's softmax when the labels are probabilities."""
    e = xp.exp(x2 - xp.amax(x2, axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _weights(ctx: Any, w: Any, n: int, like: Any) -> Any:
    """The optional weight input: n floats (any shape of n elements), in the logits' dtype."""
    w = float_array(ctx, w, 2)
    if tuple(w.shape) != (n,) and not (w.ndim and math.prod(w.shape) == n):
        raise ValueError(f"expected {n} weights in input 2 {ctx.op.inputs[2]!r}, got shape {tuple(w.shape)}")
    same_dtype(ctx, [like, w])
    return w.reshape(n)


def _label_probs(ctx: Any, t: Any, x2: Any, axis: int) -> Any:
    """label_prob's labels: [N, D] (viewed at X's axis) of non-negative rows summing to 1 within 1e-5, as Caffe2 checks."""
    t = float_array(ctx, t, 1)
    n, d = x2.shape
    if t.ndim < 2 or math.prod(t.shape[:axis]) != n or math.prod(t.shape[axis:]) != d:
        raise ValueError(
            f"expected label probabilities of {n} x {d} in input 1 {ctx.op.inputs[1]!r}, got shape {tuple(t.shape)}"
        )
    same_dtype(ctx, [x2, t])
    t = t.reshape(n, d)
    if bool((t < 0).any()):
        raise ValueError(f"expected non-negative label probabilities in input 1 {ctx.op.inputs[1]!r}")
    total = t.sum(axis=1)
    if bool((abs(total - 1) >= 1e-5).any()):
        raise ValueError(
            f"expected label probabilities summing to 1 (+/- 1e-5) per row in input 1 {ctx.op.inputs[1]!r}, "
            f"got row sums in [{float(total.min())}, {float(total.max())}]"
        )
    return t


_nd = np.ndarray
_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))
_INT32, _INT64 = np.dtype(np.int32), np.dtype(np.int64)


def _plain_types(x: Any, label: Any) -> bool:
    """numpy logits [N, D] (N > 0, float32/64) and int32/int64 labels [N]: the loss ops' short path."""
    return (
        type(x) is _nd
        and type(label) is _nd
        and x.ndim == 2
        and x.dtype in _FLOATS
        and label.shape == x.shape[:1]
        and x.shape[0] > 0
        and (label.dtype is _INT32 or label.dtype is _INT64)
    )


def _label_index(x: np.ndarray, label: np.ndarray) -> np.ndarray | None:
    """The labels as a column index for the short path of the loss ops (the general path's math
    without its per-step overhead), or None. An id outside [0, D) makes that indexing raise
    IndexError (the kernel then takes the general path, whose message names it): int32 ids are
    viewed as uint32, so a negative one is above every D; int64 ids (a view could wrap) are
    range-checked in one reduction."""
    if label.dtype is _INT32:
        return label.view(np.uint32)
    if label.dtype is _INT64 and np.maximum.reduce(label.view(np.uint64)) < x.shape[1]:
        return label
    return None


_NEVER = -(2**62)


def _plain_torch(x: Any, label: Any) -> bool:
    """torch CPU logits [N, D] (N > 0, float32/64) and int32 labels [N]: the torch short path."""
    return (
        cpu_tensors(x, label)
        and x.dim() == 2
        and label.dim() == 1
        and str(label.dtype) == "torch.int32"
        and str(x.dtype) in ("torch.float32", "torch.float64")
        and x.shape[0] == label.shape[0]
        and x.shape[0] > 0
    )


_MINUS_ONES: dict[Any, Any] = {}


def _minus_ones(n: int, like: Any) -> Any:
    """A [n, 1] column of -1 in ``like``'s dtype (CPU), kept for the next batch; kernels only read it."""
    key = (n, like.dtype)
    col = _MINUS_ONES.get(key)
    if col is None:
        col = torch_namespace().lib.full((n, 1), -1, dtype=like.dtype)
        if len(_MINUS_ONES) < 64:
            _MINUS_ONES[key] = col
    return col


_ARANGE: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    """``np.arange(n)``, read-only and kept for the next batch of the same size (a few distinct sizes at most)."""
    rows = _ARANGE.get(n)
    if rows is None:
        rows = np.arange(n)
        rows.flags.writeable = False
        if len(_ARANGE) < 64:
            _ARANGE[n] = rows
    return rows


def _softmax_with_loss_np(x: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The general numpy math in place where it can be (same bits): log_p = z - log(sum(exp(z)))
    with z = x - rowmax, P = exp(log_p), loss = -mean(log_p[i, label_i])."""
    n = x.shape[0]
    z = x - np.maximum.reduce(x, axis=1, keepdims=True)
    e = np.exp(z)
    z -= np.log(np.add.reduce(e, axis=1, keepdims=True))  # z is now log_p
    picked = z[_arange(n), label]
    loss = -(np.add.reduce(picked) / n)  # ndarray.mean's own steps for a float32/64 array
    return np.exp(z, out=e), np.asarray(loss, dtype=x.dtype)


def _plain_gradient(ctx: Any, p: Any, label: Any, dloss: Any) -> bool:
    return (
        _plain_args(ctx)
        and _plain_types(p, label)
        and type(dloss) is _nd
        and dloss.size == 1
        and dloss.dtype.type in FLOAT_DTYPES
    )


def _swl_gradient_plain(ctx: Any, *inputs: Any) -> np.ndarray:
    """SoftmaxWithLossGradient (3 or 4 inputs) where :func:`_plain_gradient` holds."""
    label, p, dloss = inputs[1], inputs[-2 if len(inputs) > 3 else 0], inputs[-1]
    index = _label_index(p, label)
    if index is not None:
        n = p.shape[0]
        dx = p if ctx.args["only_loss"] else p.copy()
        try:
            dx[_arange(n), index] -= 1  # an id out of range raises in the read, before any write
        except IndexError:
            pass  # the general path says which
        else:
            dx *= p.dtype.type(dloss.item(0)) / n  # item: a Python float holds any float dtype's value exactly
            return dx
    return _softmax_with_loss_gradient(ctx, p, label, dloss, None)


def _specialize_swl_gradient(ctx: Any, *inputs: Any) -> Any:
    if len(inputs) == 5:
        return None
    label, p, dloss = inputs[1], inputs[-2 if len(inputs) > 3 else 0], inputs[-1]
    return _swl_gradient_plain if _plain_gradient(ctx, p, label, dloss) else None


@register_op(
    "SoftmaxWithLossGradient",
    inputs=(3, 5),
    outputs=1,
    devices=CPU_CUDA,
    validate=_validate_swl,
    args=_SWL_ARGS,
    specialize=_specialize_swl_gradient,
    inputs_doc=(
        "X (Caffe2's form; or P in the 3-input form)",
        "label",
        "weight (5 inputs) / P (4) / dloss (3)",
        "P (5 inputs) / dloss (4)",
        "dloss (5 inputs)",
    ),
    outputs_doc=("dX, X's shape",),
    doc="Gradient of SoftmaxWithLoss, Caffe2's inputs (X, label, [weight,] P, dloss), or asyncnet's older "
    "(P, label, dloss): dX = (P - onehot(label)) * w_i * scale * dloss / sum(w) (label_prob: P - label). "
    "With only_loss it is computed in P's array (Caffe2's dX->ShareData(P)), so P is overwritten.",
)
def softmax_with_loss_gradient(ctx: Any, *inputs: Any) -> np.ndarray:
    label, p, dloss = inputs[1], inputs[-2 if len(inputs) > 3 else 0], inputs[-1]
    if len(inputs) == 5:
        return _softmax_with_loss_gradient(ctx, p, label, dloss, inputs[2])
    if _plain_gradient(ctx, p, label, dloss):
        return _swl_gradient_plain(ctx, *inputs)
    if (
        not ctx.args["only_loss"]
        and _plain_args(ctx)
        and _plain_torch(p, label)
        and cpu_tensors(dloss)
        and dloss.numel() == 1
        and dloss.is_floating_point()
    ):
        n = p.shape[0]
        dx = p.clone()
        try:  # scatter_add_ refuses an id out of range (in the clone: P is untouched)
            dx.scatter_add_(1, label.long().view(n, 1), _minus_ones(n, p))
        except RuntimeError:
            pass  # the general path says which
        else:
            return dx.mul_(float(dloss) / n)
    return _softmax_with_loss_gradient(ctx, p, label, dloss, None)


def _softmax_with_loss_gradient(ctx: Any, p: Any, label: Any, dloss: Any, weight: Any) -> Any:
    a = ctx.args
    p = float_array(ctx, p, 0)
    xp = namespace(ctx, p, label, dloss) if weight is None else namespace(ctx, p, label, dloss, weight)
    axis = canonical_axis(ctx, p, "axis")
    p2 = flatten_2d(p, axis)
    n, d = p2.shape
    if n == 0:  # an empty batch (its loss is 0): an empty gradient
        return p if a["only_loss"] else xp.copy(p)
    # every input checked before the first write: with only_loss dx is P's own array
    targets = _label_probs(ctx, label, p2, axis) if a["label_prob"] else _labels(ctx, label, 1, n, d, axis)
    i_dloss = len(ctx.op.inputs) - 1
    w = None if weight is None else _weights(ctx, weight, n, p2)
    total = None if w is None else w.sum()
    g = _scalar_grad(ctx, dloss, i_dloss, p2) if w is None or float(total) > 0 else None  # Caffe2 scales only then
    dx = p2 if a["only_loss"] else xp.copy(p2)
    if a["label_prob"]:
        dx -= targets
    else:
        xp.add_rows(dx, targets, -1)
    if w is None:
        dx *= g / n if a["scale"] == 1.0 else g * a["scale"] / n  # g * scale / n (scale 1: g / n)
        return dx.reshape(p.shape)
    dx *= w.reshape(n, 1)
    if g is not None:
        dx *= g * (a["scale"] / total)
    return dx.reshape(p.shape)


@register_gradient("SoftmaxWithLoss")
def _softmax_with_loss_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    _no_grad_through(op, gout, 0)
    x, label, *weight = op.inputs
    args = {k: v for k, v in op.args.items() if k in ("only_loss", "label_prob", "axis", "scale", "order")}
    inputs = [x, label, *weight, op.outputs[0], gout[1]]  # Caffe2's (X, label, [weight,] P, dloss)
    return [OperatorDef("SoftmaxWithLossGradient", inputs, ["#dx"], args)], ["#dx", None] + [None] * len(weight)


# -- LabelCrossEntropy: Y[i] = -log X[i, label_i];  dX[i, label_i] = -dY[i] / X[i, label_i] ----
@register_op(
    "LabelCrossEntropy",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    inputs_doc=("probabilities X [N, D] (or [N, ...]; 1-D: one row)", "label [N] int"),
    outputs_doc=("Y [N]",),
    doc="Per-example cross-entropy of probabilities against integer labels: Y[i] = -log(max(X[i, label[i]], 1e-20)); "
    "X's dims after the first are one row of D (a 1-D X is one example), as Caffe2's.",
)
def label_cross_entropy(ctx: Any, x: Any, label: Any) -> np.ndarray:
    x = _label_rows(ctx, x, 0)
    xp = namespace(ctx, x, label)
    label = _labels(ctx, label, 1, *x.shape)
    return -xp.log(xp.maximum(xp.take_rows(x, label), LOG_THRESHOLD))


@register_op(
    "LabelCrossEntropyGradient",
    inputs=3,
    outputs=1,
    devices=CPU_CUDA,
    inputs_doc=("X", "label", "dY [N]"),
    outputs_doc=("dX",),
    doc="Gradient of LabelCrossEntropy: dX[i, label[i]] = -dY[i] / max(X[i, label[i]], 1e-20), 0 elsewhere.",
)
def label_cross_entropy_gradient(ctx: Any, x: Any, label: Any, dy: Any) -> np.ndarray:
    shape = tuple(array(ctx, x, 0).shape)
    x = _label_rows(ctx, x, 0)
    xp = namespace(ctx, x, label, dy)
    n = x.shape[0]
    label = _labels(ctx, label, 1, *x.shape)
    dy = float_array(ctx, dy, 2)
    if dy.shape != (n,):
        raise ValueError(f"expected dY of shape ({n},), got {dy.shape}")
    dx = xp.zeros_like(x)
    rows = xp.arange(n, like=x)
    dx[rows, label] = -dy / xp.maximum(x[rows, label], LOG_THRESHOLD)
    return dx.reshape(shape)


@register_gradient("LabelCrossEntropy")
def _label_cross_entropy_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    x, label = op.inputs
    return [OperatorDef("LabelCrossEntropyGradient", [x, label, _grad.output_grad(op, gout)], ["#dx"])], ["#dx", None]


# -- AveragedLoss: Y = mean(X);  dX = dY / size(X) everywhere --------------------------------
@register_op(
    "AveragedLoss",
    inputs=1,
    outputs=1,
    devices=CPU_CUDA,
    inputs_doc=("X",),
    outputs_doc=("Y (0-d)",),
    doc="The mean of every element of X, as a 0-d array.",
)
def averaged_loss(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x)
    if xp.size(x) == 0:
        raise ValueError(f"expected a non-empty input 0 {ctx.op.inputs[0]!r}")
    return xp.scalar_like(x.mean(), x)


@register_op(
    "AveragedLossGradient",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    inputs_doc=("X", "dY (0-d)"),
    outputs_doc=("dX",),
    doc="Gradient of AveragedLoss: dX = dY / size(X) in every element.",
)
def averaged_loss_gradient(ctx: Any, x: Any, dy: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x, dy)
    return xp.full(x.shape, _scalar_grad(ctx, dy, 1, x) / xp.size(x), like=x)


@register_gradient("AveragedLoss")
def _averaged_loss_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    return [OperatorDef("AveragedLossGradient", [op.inputs[0], _grad.output_grad(op, gout)], ["#dx"])], ["#dx"]


# -- SquaredL2: D[i] = 0.5 * ||X[i] - Y[i]||^2;  dX = (X - Y) dD[i], dY = -dX -----------------
def _rows(ctx: Any, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = float_array(ctx, x, 0), float_array(ctx, y, 1)
    namespace(ctx, x, y)
    same_dtype(ctx, [x, y])
    if x.shape != y.shape:
        raise ValueError(f"expected X and Y of one shape, got {x.shape} and {y.shape}")
    # a 0-d pair is one row of one value, as in Caffe2's kernel (N = X.dim() > 0 ? X.dim32(0) : 1);
    # an empty batch gives no rows (Caffe2: D of size 0)
    rows = x.shape[0] if x.ndim else 1
    d = math.prod(x.shape[1:]) if x.ndim else 1
    return x.reshape(rows, d), y.reshape(rows, d)


@register_op(
    "SquaredL2",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    inputs_doc=("X [N, ...]", "Y [N, ...]"),
    outputs_doc=("D [N]",),
    doc="Half the squared L2 distance per example: D[i] = 0.5 * sum((X[i] - Y[i])^2).",
)
def squared_l2(ctx: Any, x: Any, y: Any) -> np.ndarray:
    x2, y2 = _rows(ctx, x, y)
    diff = x2 - y2
    return 0.5 * (diff * diff).sum(axis=1)


@register_op(
    "SquaredL2Gradient",
    inputs=3,
    outputs=(1, 2),
    devices=CPU_CUDA,
    inputs_doc=("X", "Y", "dD [N]"),
    outputs_doc=("dX", "dY (optional)"),
    doc="Gradient of SquaredL2: dX = (X - Y) * dD[i] per row, and dY = -dX when a second output is given.",
)
def squared_l2_gradient(ctx: Any, x: Any, y: Any, dd: Any) -> Any:
    x2, y2 = _rows(ctx, x, y)
    dd = float_array(ctx, dd, 2)
    namespace(ctx, x, y, dd)
    if dd.shape != (x2.shape[0],):
        raise ValueError(f"expected dD of shape ({x2.shape[0]},), got {dd.shape}")
    dx = ((x2 - y2) * dd[:, None]).reshape(x.shape)
    return dx if len(ctx.op.outputs) == 1 else (dx, -dx)


@register_gradient("SquaredL2")
def _squared_l2_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    x, y = op.inputs
    return [OperatorDef(op.type + "Gradient", [x, y, _grad.output_grad(op, gout)], ["#dx", "#dy"])], ["#dx", "#dy"]


# Caffe2's name for the same op (its distance_op.cc); "SquaredL2" stays asyncnet's name for it
register_op(
    "SquaredL2Distance",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    inputs_doc=("X [N, ...]", "Y [N, ...]"),
    outputs_doc=("D [N]",),
    doc="Caffe2's SquaredL2Distance: the same op as SquaredL2, D[i] = 0.5 * sum((X[i] - Y[i])^2).",
)(squared_l2)
register_op(
    "SquaredL2DistanceGradient",
    inputs=3,
    outputs=(1, 2),
    devices=CPU_CUDA,
    inputs_doc=("X", "Y", "dD [N]"),
    outputs_doc=("dX", "dY (optional)"),
    doc="Gradient of SquaredL2Distance (SquaredL2Gradient's kernel).",
)(squared_l2_gradient)
register_gradient("SquaredL2Distance")(_squared_l2_grad)


# -- Accuracy: fraction of rows whose label is among the top_k scores (a metric, no gradient) -
def _accuracy_plain(ctx: Any, pred: np.ndarray, label: np.ndarray) -> Any:
    """Accuracy (top_k 1) where :func:`_plain_types` holds."""
    index = _label_index(pred, label)
    if index is not None:
        # the first maximum is the prediction (ties go to the lower index, NaN ranks above every
        # number, as numpy's argmax does); a NaN at the label is wrong even when it is the first NaN
        n = pred.shape[0]
        try:
            at_label = pred[_arange(n), index]
        except IndexError:
            pass  # an id out of range: the general path says which
        else:
            correct = np.count_nonzero((np.argmax(pred, axis=1) == label) & (at_label == at_label))
            return np.asarray(correct / n, dtype=np.float32)
    return _accuracy(ctx, pred, label)


def _specialize_accuracy(ctx: Any, pred: Any, label: Any) -> Any:
    return _accuracy_plain if ctx.args["top_k"] == 1 and _plain_types(pred, label) else None


@register_op(
    "Accuracy",
    inputs=2,
    outputs=1,
    devices=CPU_CUDA,
    specialize=_specialize_accuracy,
    args=[Arg("top_k", int, 1, "count a row correct when its label is among the k best")],
    inputs_doc=("prediction [N, D]", "label [N] int"),
    outputs_doc=("accuracy (0-d float32)",),
    doc="Fraction of rows whose label scores among the top_k predictions (ties go to the lower index; "
    "a NaN ranks above every number, and a NaN at the label counts the row as wrong).",
)
def accuracy(ctx: Any, pred: Any, label: Any) -> np.ndarray:
    if ctx.args["top_k"] == 1 and _plain_types(pred, label):
        return _accuracy_plain(ctx, pred, label)
    return _accuracy(ctx, pred, label)


def _accuracy(ctx: Any, pred: Any, label: Any) -> np.ndarray:
    """The general path: any top_k, torch tensors, the checks and their messages."""
    pred = _matrix(ctx, pred, 0)
    xp = namespace(ctx, pred, label)
    n, d = pred.shape
    label = _labels(ctx, label, 1, n, d)
    k = ctx.args["top_k"]
    if k < 1:
        raise ValueError(f"expected top_k >= 1, got {k}")
    if n == 0:
        return xp.scalar(0.0, "float32", like=pred)
    target = xp.take_rows(pred, label)[:, None]
    # a diverged model must not score: NaN compares False with everything, so without the
    # isnan terms a row of NaNs would count as correct (nothing ranks above its label)
    before = (pred > target) | xp.isnan(pred) | ((pred == target) & (xp.arange(d, like=pred)[None, :] < label[:, None]))
    correct = (before.sum(axis=1) < k) & ~xp.isnan(target[:, 0])
    return xp.scalar(int(correct.sum()) / n, "float32", like=pred)


__all__ = ["softmax_with_loss", "label_cross_entropy", "averaged_loss", "squared_l2", "accuracy"]


# -- SigmoidCrossEntropyWithLogits (Caffe2's): Y = -mean over the last dim of f(X, T) --------------
#    f = T log s(X) + (1 - T) log(1 - s(X)), computed from X without overflow;  dX = -dY / D * (T - s(X)).
#    log_D_trick: f = (2T - 1) log s(X);  unjoined_lr_loss: f = T X - (1 - T) softplus(X).
def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x) without overflow."""
    xp = namespace(None, x)
    return xp.maximum(x, 0) + xp.lib.log1p(xp.exp(-xp.abs(x)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    xp = namespace(None, x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _sigmoid_xent_terms(ctx: Any, x: Any, t: Any, first: int) -> tuple[np.ndarray, np.ndarray]:
    x, t = float_array(ctx, x, first), float_array(ctx, t, first + 1)
    namespace(ctx, *([None] * first), x, t)
    if x.shape != t.shape or x.dtype != t.dtype:
        raise ValueError(
            f"expected logits and targets of one shape and dtype, got {tuple(x.shape)} {x.dtype} and "
            f"{tuple(t.shape)} {t.dtype}"
        )
    if ctx.args["log_D_trick"] and ctx.args["unjoined_lr_loss"]:
        raise ValueError("log_D_trick and unjoined_lr_loss cannot both be set")
    return x, t


_SIGMOID_XENT_ARGS = [
    Arg("log_D_trick", bool, False, "use (2T - 1) log s(X), the GAN generator's log D trick"),
    Arg("unjoined_lr_loss", bool, False, "use T X - (1 - T) softplus(X), the unjoined logistic loss"),
]


@register_op(
    "SigmoidCrossEntropyWithLogits",
    inputs=2,
    outputs=1,
    args=_SIGMOID_XENT_ARGS,
    inputs_doc=("logits [..., D]", "targets [..., D] (probabilities, same shape)"),
    outputs_doc=("xentropy [...]",),
    doc="Caffe2's SigmoidCrossEntropyWithLogits: the binary cross-entropy of sigmoid(logits) against targets, "
    "averaged over the last dim (a 0-d input is one value), computed without overflow.",
)
def sigmoid_cross_entropy_with_logits(ctx: Any, x: Any, t: Any) -> np.ndarray:
    x, t = _sigmoid_xent_terms(ctx, x, t, 0)
    if ctx.args["log_D_trick"]:
        f = (2 * t - 1) * (x - _softplus(x))
    elif ctx.args["unjoined_lr_loss"]:
        f = t * x - (1 - t) * _softplus(x)
    else:
        f = t * x - _softplus(x)
    y = -(f.mean(axis=-1) if x.ndim else f)
    return y if namespace(ctx, x).name == "torch" else np.asarray(y, dtype=x.dtype)


@register_op(
    "SigmoidCrossEntropyWithLogitsGradient",
    inputs=3,
    outputs=1,
    args=_SIGMOID_XENT_ARGS,
    inputs_doc=("dY [...]", "logits", "targets"),
    outputs_doc=("dlogits",),
    doc="Gradient of SigmoidCrossEntropyWithLogits: dX = -dY / D * (T - sigmoid(X)) (or the log_D_trick / "
    "unjoined_lr_loss derivative).",
)
def sigmoid_cross_entropy_with_logits_gradient(ctx: Any, dy: Any, x: Any, t: Any) -> np.ndarray:
    x, t = _sigmoid_xent_terms(ctx, x, t, 1)
    dy = float_array(ctx, dy, 0)
    xp = namespace(ctx, dy, x, t)
    if dy.shape != x.shape[:-1]:
        raise ValueError(f"expected dY of shape {tuple(x.shape[:-1])}, got {tuple(dy.shape)}")
    s = _sigmoid(x)
    if ctx.args["log_D_trick"]:
        d = (2 * t - 1) * (1 - s)
    elif ctx.args["unjoined_lr_loss"]:
        d = t - (1 - t) * s
    else:
        d = t - s
    inner = x.shape[-1] if x.ndim else 1
    if xp.name == "torch":
        return -(dy[..., None] if x.ndim else dy) / float(inner) * d
    return np.asarray(-(dy[..., None] if x.ndim else dy) / x.dtype.type(inner) * d, dtype=x.dtype)


@register_gradient("SigmoidCrossEntropyWithLogits")
def _sigmoid_xent_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    x, t = op.inputs
    gop = OperatorDef(
        "SigmoidCrossEntropyWithLogitsGradient", [_grad.output_grad(op, gout), x, t], ["#dx"], dict(op.args)
    )
    return [gop], ["#dx", None]


__all__ += ["sigmoid_cross_entropy_with_logits"]
