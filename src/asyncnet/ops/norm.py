"""Normalization and dropout, each beside its gradient, with Caffe2's schemas: SpatialBN,
LayerNorm, Dropout.

SpatialBN in training updates its running mean and variance IN PLACE (outputs 1 and 2 are
inputs 3 and 4, written into the existing arrays, as the optimizers do) with Caffe2's rule
``running = momentum * running + (1 - momentum) * batch`` (the batch variance unbiased for the
running average, biased for the normalization: torch's ``momentum`` is 1 - this one).

Dropout keeps its random generator with the op instance, as Caffe2's CPUContext does: created on
the first run from ``seed``, else from the op's (or net's) ``DeviceOption.random_seed``, else from
fresh entropy, it draws a new mask every run; so a seeded Dropout repeats the same sequence of
masks in every new net, not the same mask on every run.

Every op runs on numpy arrays or torch tensors (results keep the inputs' library and device; the
running statistics are updated in the torch tensors' own storage). SpatialBNGradient on numpy
arrays (float32, float64, NCHW, at least :data:`TORCH_MIN_BN` elements, no batch sums) runs
torch's ``native_batch_norm_backward`` on zero-copy views when torch is installed: its one fused
pass is 2-3x faster than numpy's sums and passes (64x16x8x8: 50 against 105 us). The forward
stays on numpy: torch's ``native_batch_norm`` is no faster (74 against 88 us alone, within the
noise in a training step). The choice depends on the shapes and the installation only, so
every executor and process makes the same. On torch CPU tensors in NCHW, SpatialBN in training
and its gradient call torch's ``native_batch_norm`` kernels themselves (see :func:`_native`). Dropout draws its masks from
the same numpy generator on both libraries, so one seed gives one mask sequence on either.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.ones((2, 4), np.float32))
    >>> net = an.Net("drop"); _ = net.Dropout("x", ["y", "mask"], ratio=0.5, seed=0)
    >>> ws.run_net_once(net)
    >>> sorted(set(ws.fetch("y").ravel().tolist()))  # kept values are scaled by 1 / (1 - ratio)
    [0.0, 2.0]
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.errors import NetDefinitionError
from asyncnet.ops._check import array, axis_of, float_array, same_dtype
from asyncnet.ops._half import to_half
from asyncnet.ops.conv import _torch as torch_if_installed
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import namespace

__all__ = [
    "spatial_bn",
    "spatial_bn_gradient",
    "layer_norm",
    "layer_norm_gradient",
    "dropout",
    "dropout_grad",
    "dropout_generator",
    "TORCH_MIN_BN",
]

#: elements of X from which SpatialBNGradient on numpy arrays runs torch's fused kernel (measured)
TORCH_MIN_BN = 4096
_TORCH_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_EPS = Arg("epsilon", float, 1e-5, "added to the variance before the square root")
_IS_TEST = Arg("is_test", bool, False, "inference mode")
_ORDER = Arg("order", str, "NCHW", "memory order: channels on axis 1 (NCHW) or last (NHWC)", choices=("NCHW", "NHWC"))


def _vec(ctx: Any, x: Any, i: int, c: int, dtype: np.dtype) -> np.ndarray:
    x = float_array(ctx, x, i)
    if x.shape != (c,) or x.dtype != dtype:
        raise ValueError(
            f"expected input {i} {ctx.op.inputs[i]!r} of shape ({c},) and dtype {dtype}, got {tuple(x.shape)} {x.dtype}"
        )
    return x


def _number(xp: Any, x: Any) -> Any:
    """The scalar type kernels use for constants: numpy's dtype (bit-identical results), torch's float."""
    return x.dtype.type if xp.name == "numpy" else float


# -- SpatialBN: Y = (X - mean) * rstd * scale + bias, per channel (axis 1) ---------------------------
_NUM_BATCHES = Arg("num_batches", int, 1, "with inputs 5 and 6 (training): how many batches their sums cover")


def _five_or_seven(op: OperatorDef) -> None:
    if len(op.inputs) == 6:
        raise ValueError("expected 5 inputs, or 7 with Caffe2's batch sums (inputs 5 and 6), got 6")
    if len(op.inputs) == 7 and op.args.get("num_batches", 1) < 1:
        raise ValueError(f"expected num_batches >= 1, got {op.args['num_batches']}")


@register_op(
    "SpatialBN",
    inputs=(5, 7),
    outputs=(1, 5),
    allow_inplace={0: 0, 5: 3, 6: 4},
    enforce_inplace={3: 1, 4: 2},
    args=[_IS_TEST, _EPS, Arg("momentum", float, 0.9, "weight of the old running statistics"), _ORDER, _NUM_BATCHES],
    validate=_five_or_seven,
    inputs_doc=(
        "X [N, C, ...]",
        "scale [C]",
        "bias [C]",
        "mean [C] (running)",
        "var [C] (running)",
        "batch_mean_sum [C] (optional)",
        "batch_var_sum [C] (optional; sum of squares)",
    ),
    outputs_doc=("Y", "running_mean (in place)", "running_var (in place)", "saved_mean", "saved_inv_var"),
    doc="Caffe2's spatial batch normalization per channel (axis 1, or the last with order=NHWC). Training (5 outputs): batch statistics, the running "
    "ones updated in place, the batch mean and 1/sqrt(var + epsilon) saved for the gradient. "
    "is_test=1 (1 output): the running statistics. Caffe2's multi-batch form: inputs 5 and 6 hold the sums of "
    "X and X^2 over num_batches batches, which give the statistics instead of X. Mixed precision: float16 X with "
    "float32 scale, bias and statistics computes in float32 and gives a float16 Y (Caffe2's cuDNN kernel).",
)
def spatial_bn(ctx: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *sums: Any) -> Any:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x, scale, bias, mean, var)
    wide = _mixed(ctx, xp, x, scale)
    if wide is None:
        return _spatial_bn(ctx, xp, x, scale, bias, mean, var, *sums)
    out = _spatial_bn(ctx, xp, xp.astype(x, wide), scale, bias, mean, var, *sums)
    if isinstance(out, tuple):  # training: Y back to float16, the statistics stay float32
        return (_narrow(xp, out[0], x), *out[1:])
    return _narrow(xp, out, x)


def _mixed(ctx: Any, xp: Any, x: Any, scale: Any) -> Any:
    """float32 ``scale`` with float16 ``X``: Caffe2's mixed precision (its cuDNN kernels keep scale, bias
    and the statistics in float32 and compute in float32); then ``scale`` (the dtype to compute in), else None."""
    scale = float_array(ctx, scale, 1)
    if type(x) is np.ndarray and type(scale) is np.ndarray:  # dtype comparisons, not names: 20x cheaper
        return scale if x.dtype == _F16 and scale.dtype == _F32 else None
    if str(x.dtype).endswith("float16") and str(scale.dtype).endswith("float32"):
        return scale
    return None


_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)


def _narrow(xp: Any, y: Any, like: Any) -> Any:
    """A float32 result back to ``like``'s float16."""
    return to_half(y) if xp.name == "numpy" else xp.astype(y, like)


def _spatial_bn(ctx: Any, xp: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *sums: Any) -> Any:
    """SpatialBN on X of its parameters' dtype."""
    c, x3 = _channels(x, ctx.args["order"])  # x3 [N, C, P]: sums over N and the spatial dims are einsums over n, p
    scale, bias, rm, rv = (_vec(ctx, v, i, c, x.dtype) for i, v in ((1, scale), (2, bias), (3, mean), (4, var)))
    f, eps = _number(xp, x), ctx.args["epsilon"]
    if ctx.args["is_test"]:
        if len(ctx.op.outputs) != 1:
            raise ValueError(f"expected 1 output with is_test=1, got {len(ctx.op.outputs)}")
        alpha = scale / xp.sqrt(rv + f(eps))
        y3 = x3 * alpha[:, None]
        y3 += (bias - rm * alpha)[:, None]
        return _unchannels(y3, x.shape, ctx.args["order"])
    if len(ctx.op.outputs) != 5:
        raise ValueError(f"expected 5 outputs in training (is_test=0), got {len(ctx.op.outputs)}")
    m = xp.size(x) // c if c else 0
    if m == 0:  # Caffe2: an empty batch leaves the running statistics alone and saves zeros
        return xp.copy(x), rm, rv, xp.zeros_like(rm), xp.zeros_like(rv)
    if sums:  # the statistics of num_batches batches, from their sums (Caffe2's ComputeBatchMoments)
        m *= ctx.args["num_batches"]
        s1, s2 = (_vec(ctx, v, i, c, x.dtype) for i, v in ((5, sums[0]), (6, sums[1])))
        mu = s1 / f(m)
        v = s2 / f(m) - mu * mu
        y3 = x3 - mu[:, None]
    if m < 2:
        raise ValueError(f"expected more than one value per channel in training, got X of shape {tuple(x.shape)}")
    if not sums and _native(xp, x, ctx.args["order"]):
        import torch

        y, mu, rstd = torch.ops.aten.native_batch_norm(x, scale, bias, rm, rv, True, 1 - ctx.args["momentum"], eps)
        return y, rm, rv, mu, rstd
    if not sums:
        mu = xp.lib.einsum("ncp->c", x3) / f(m)
        y3 = x3 - mu[:, None]
        v = xp.lib.einsum("ncp,ncp->c", y3, y3) / f(m)  # biased: the normalization's variance
    rstd = 1 / xp.sqrt(v + f(eps))
    mom = f(ctx.args["momentum"])
    _update(ctx, xp, rm, 3, mom * rm + (1 - mom) * mu)
    _update(ctx, xp, rv, 4, mom * rv + (1 - mom) * v * f(m / (m - 1)))
    y3 *= (rstd * scale)[:, None]
    y3 += bias[:, None]
    return _unchannels(y3, x.shape, ctx.args["order"]), rm, rv, mu, rstd


def _channels(x: Any, order: str) -> tuple[int, Any]:
    """The channel count and X viewed as [N, C, P] (a strided view for NHWC, no copy)."""
    if x.ndim < 2:
        raise ValueError(f"expected X of at least 2 dims ({order}), got {tuple(x.shape)}")
    if order == "NHWC":
        c = x.shape[-1]
        return c, x.reshape(x.shape[0], math.prod(x.shape[1:-1]), c).swapaxes(1, 2)
    return x.shape[1], x.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))  # explicit P: -1 fails on empty X


def _unchannels(y3: Any, shape: tuple[int, ...], order: str) -> Any:
    """The inverse of :func:`_channels`: [N, C, P] back to X's shape and order."""
    return (y3.swapaxes(1, 2) if order == "NHWC" else y3).reshape(shape)


def _update(ctx: Any, xp: Any, running: np.ndarray, i: int, value: np.ndarray) -> None:
    if not xp.writable(running):
        raise ValueError(f"input {i} {ctx.op.inputs[i]!r} is a read-only array; SpatialBN updates it in place")
    xp.copyto(running, value)


@register_op(
    "SpatialBNGradient",
    inputs=(5, 7),
    outputs=3,
    args=[_EPS, _ORDER, _NUM_BATCHES],
    validate=_five_or_seven,
    allow_inplace={5: 1, 6: 2},
    inputs_doc=("X", "scale", "dY", "saved_mean", "saved_inv_var", "dscale_sum (optional)", "dbias_sum (optional)"),
    outputs_doc=("dX", "dscale", "dbias"),
    doc="Gradient of SpatialBN in training: dbias = sum dY, dscale = sum dY * xhat, "
    "dX = scale * rstd / M * (M dY - dbias - xhat dscale), sums over all but axis 1. Caffe2's multi-batch "
    "form: dscale and dbias are inputs 5 and 6 divided by num_batches. float16 X and dY with float32 scale and "
    "statistics: computed in float32, dX float16, dscale and dbias float32.",
)
def spatial_bn_gradient(
    ctx: Any, x: Any, scale: Any, dy: Any, mu: Any, rstd: Any, *sums: Any
) -> tuple[np.ndarray, ...]:
    x, dy = float_array(ctx, x, 0), float_array(ctx, dy, 2)
    xp = namespace(ctx, x, scale, dy, mu, rstd)
    same_dtype(ctx, [x, dy])
    wide = _mixed(ctx, xp, x, scale)
    if wide is None:
        return _spatial_bn_gradient(ctx, xp, x, scale, dy, mu, rstd, *sums)
    dx, dscale, dbias = _spatial_bn_gradient(ctx, xp, xp.astype(x, wide), scale, xp.astype(dy, wide), mu, rstd, *sums)
    return _narrow(xp, dx, x), dscale, dbias


def _spatial_bn_gradient(ctx: Any, xp: Any, x: Any, scale: Any, dy: Any, mu: Any, rstd: Any, *sums: Any) -> Any:
    """SpatialBNGradient on X and dY of the parameters' dtype."""
    if dy.shape != x.shape:
        raise ValueError(f"expected dY of X's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    order = ctx.args["order"]
    (c, x3), (_, dy3) = _channels(x, order), _channels(dy, order)
    scale, mu, rstd = (_vec(ctx, v, i, c, x.dtype) for i, v in ((1, scale), (3, mu), (4, rstd)))
    m = xp.size(x) // c if c else 0
    if m == 0:
        return xp.copy(dy), xp.zeros_like(scale), xp.zeros_like(scale)
    if not sums and _native(xp, x, order):
        import torch

        return tuple(
            torch.ops.aten.native_batch_norm_backward(
                dy, x, scale, None, None, mu, rstd, True, ctx.args["epsilon"], [True, True, True]
            )
        )
    if not sums and order == "NCHW" and xp.name == "numpy":
        fused = _torch_gradient(x, scale, dy, mu, rstd, ctx.args["epsilon"])
        if fused is not None:
            return fused
    if sums:  # spatial_bn_multi_batch_grad_ref: the sums of every batch, averaged
        nb = _number(xp, x)(ctx.args["num_batches"])
        dscale, dbias = (_vec(ctx, v, i, c, x.dtype) / nb for i, v in ((5, sums[0]), (6, sums[1])))
    else:
        dbias = xp.lib.einsum("ncp->c", dy3)
        dscale = (xp.lib.einsum("ncp,ncp->c", dy3, x3) - mu * dbias) * rstd  # sum dY * xhat, xhat never stored
    # dX = scale rstd / M (M dY - dbias - xhat dscale) = a dY + b X + k per channel
    a = scale * rstd
    b = -a * rstd * dscale / _number(xp, x)(m)
    k = -a * dbias / _number(xp, x)(m) - b * mu
    dx = dy3 * a[:, None]
    dx += x3 * b[:, None]
    dx += k[:, None]
    return _unchannels(dx, x.shape, order), dscale, dbias


def _native(xp: Any, x: Any, order: str) -> bool:
    """True for torch CPU tensors in NCHW: SpatialBN and its gradient in training run torch's own
    ``native_batch_norm`` kernels (one call each, 3-4x faster than the einsums and passes on
    torch tensors), the running statistics updated in the tensors given."""
    return xp.name == "torch" and order == "NCHW" and x.device.type == "cpu"


def _torch_view(torch: Any, a: np.ndarray) -> Any:
    """A torch tensor over ``a``'s memory (over a C-ordered copy when ``a`` is strided or read-only)."""
    return torch.from_numpy(a if a.flags.c_contiguous and a.flags.writeable else np.array(a, order="C"))


def _torch_gradient(x: Any, scale: Any, dy: Any, mu: Any, rstd: Any, eps: float) -> tuple[np.ndarray, ...] | None:
    """(dX, dscale, dbias) by torch's ``native_batch_norm_backward`` on views of numpy arrays in
    NCHW, when they are large enough for it to win and torch is installed; else None."""
    if x.dtype not in _TORCH_DTYPES or x.size < TORCH_MIN_BN:
        return None
    torch = torch_if_installed()
    if torch is None:
        return None
    t = functools.partial(_torch_view, torch)
    dx, dscale, dbias = torch.ops.aten.native_batch_norm_backward(
        t(dy), t(x), t(scale), None, None, t(mu), t(rstd), True, eps, [True, True, True]
    )
    return dx.numpy(), dscale.numpy(), dbias.numpy()


@register_gradient("SpatialBN")
def _spatial_bn_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    if op.args.get("is_test") or len(op.outputs) != 5:
        raise NetDefinitionError("SpatialBN with is_test=1 has no gradient; differentiate the training-mode op")
    if len(op.inputs) == 7:
        raise NetDefinitionError(
            "SpatialBN with batch sums (7 inputs) has no gradient maker; differentiate the 5-input op"
        )
    if any(g is not None for g in gout[1:]):
        raise NetDefinitionError("SpatialBN: only output 0 (Y) is differentiable")
    x, scale = op.inputs[:2]
    gop = OperatorDef(
        "SpatialBNGradient",
        [x, scale, output_grad(op, gout), op.outputs[3], op.outputs[4]],
        ["#dx", "#dscale", "#dbias"],
        {k: v for k, v in op.args.items() if k in ("epsilon", "order")},
    )
    return [gop], ["#dx", "#dscale", "#dbias", None, None]


# -- LayerNorm: Y = (X - mean) / std per row of X viewed as [prod(dims[:axis]), prod(dims[axis:])] --
def _rows(ctx: Any, x: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    a = axis_of(ctx, x, ctx.args["axis"])
    if a >= x.ndim:
        raise ValueError(
            f"argument axis={ctx.args['axis']} leaves nothing to normalize in an input of shape {tuple(x.shape)}"
        )
    lead = x.shape[:a]
    return x.reshape(math.prod(lead), math.prod(x.shape[a:])), (*lead, 1)  # explicit cols: [0, D] keeps its D


def _affine(ctx: Any, params: tuple[Any, ...], x: np.ndarray, first: int) -> tuple[np.ndarray, ...]:
    """gamma and beta as flat [prod(dims[axis:])] rows (Caffe2 checks only their size)."""
    a = axis_of(ctx, x, ctx.args["axis"])
    size = int(np.prod(x.shape[a:], dtype=np.int64))
    out = []
    for i, p in enumerate(params, first):
        p = float_array(ctx, p, i)
        if namespace(ctx, p).size(p) != size or p.dtype != x.dtype:
            raise ValueError(
                f"expected input {i} {ctx.op.inputs[i]!r} of {size} elements (dims {tuple(x.shape[a:])}) and "
                f"dtype {x.dtype}, got {tuple(p.shape)} {p.dtype}"
            )
        out.append(p.reshape(-1))
    return tuple(out)


def _check_affine(ctx: Any, n_params: int) -> None:
    want = 2 if ctx.args["elementwise_affine"] else 0
    if n_params != want:
        raise ValueError(
            f"expected {want} parameter inputs (gamma, beta) with elementwise_affine={int(want > 0)}, got {n_params}"
        )


_LN_ARGS = [
    Arg("axis", int, 1, "normalize over the dims from this axis on"),
    _EPS,
    Arg("elementwise_affine", bool, False, "inputs 1 and 2 are gamma and beta, of prod(dims[axis:]) elements"),
]


@register_op(
    "LayerNorm",
    inputs=(1, 3),
    outputs=3,
    args=_LN_ARGS,
    inputs_doc=("X", "gamma (elementwise_affine)", "beta (elementwise_affine)"),
    outputs_doc=("Y", "mean [*dims[:axis], 1]", "std [*dims[:axis], 1]"),
    doc="Caffe2's LayerNorm: each row (dims from `axis` on) normalized by its mean and std = sqrt(var + epsilon); "
    "with elementwise_affine=1, then Y = Y * gamma + beta.",
)
def layer_norm(ctx: Any, x: Any, *params: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = float_array(ctx, x, 0)
    params = tuple(array(ctx, p, i) for i, p in enumerate(params, 1))
    xp = namespace(ctx, x, *params)
    _check_affine(ctx, len(params))
    x2, mshape = _rows(ctx, x)
    mu = x2.mean(axis=1, keepdims=True)
    var = x2.var(axis=1, keepdims=True) if xp.name == "numpy" else x2.var(dim=1, keepdim=True, correction=0)
    std = xp.sqrt(var + _number(xp, x)(ctx.args["epsilon"]))
    y = (x2 - mu) / std
    if params:
        if tuple(params[0].shape) != tuple(params[1].shape):
            raise ValueError(
                f"expected gamma and beta of one shape, got {np.shape(params[0])} and {np.shape(params[1])}"
            )
        gamma, beta = _affine(ctx, params, x, 1)
        y = y * gamma + beta
    return y.reshape(x.shape), mu.reshape(mshape), std.reshape(mshape)


def _validate_ln_grad(op: OperatorDef) -> None:
    affine = bool(op.args.get("elementwise_affine", False))
    counts = (5, 6) if affine else (4, 5)
    if len(op.inputs) not in counts:
        raise ValueError(
            f"expected {counts[1]} inputs (dY, Y, mean, std, X{', gamma' if affine else ''}; Caffe2's order) "
            f"or {counts[0]} (dY, X, mean, std{', gamma' if affine else ''}) with elementwise_affine={int(affine)}, "
            f"got {len(op.inputs)}"
        )


@register_op(
    "LayerNormGradient",
    inputs=(4, 6),
    outputs=(1, 3),
    args=_LN_ARGS,
    validate=_validate_ln_grad,
    inputs_doc=(
        "dY",
        "Y (Caffe2's order; in the short form: X)",
        "mean",
        "std",
        "X (Caffe2's order; short form: gamma)",
        "gamma (Caffe2's order, elementwise_affine)",
    ),
    outputs_doc=("dX", "dgamma", "dbeta"),
    doc="Gradient of LayerNorm with Caffe2's inputs (dY, Y, mean, std, X[, gamma]), or asyncnet's earlier "
    "(dY, X, mean, std[, gamma]) (one input fewer; Y is not read): dX = (g - mean(g) - xhat mean(g xhat)) / std "
    "with g = dY (* gamma); dgamma = sum_rows dY xhat, dbeta = sum_rows dY.",
)
def layer_norm_gradient(ctx: Any, *inputs: Any) -> Any:
    if len(inputs) == (6 if ctx.args["elementwise_affine"] else 5):  # Caffe2's (dY, Y, mean, std, X[, gamma])
        dy, _, mu, std, x, *gamma = inputs
        return _layer_norm_gradient(ctx, dy, x, mu, std, gamma, (0, 4, 2, 3, 5))
    dy, x, mu, std, *gamma = inputs
    return _layer_norm_gradient(ctx, dy, x, mu, std, gamma, (0, 1, 2, 3, 4))


def _layer_norm_gradient(ctx: Any, dy: Any, x: Any, mu: Any, std: Any, gamma: list[Any], at: tuple[int, ...]) -> Any:
    """The math; ``at`` gives the input indices of (dY, X, mean, std, gamma) for the messages."""
    dy, x = float_array(ctx, dy, at[0]), float_array(ctx, x, at[1])
    namespace(ctx, dy, x, mu, std, *gamma)
    same_dtype(ctx, [dy, x])
    _check_affine(ctx, 2 * len(gamma))
    if dy.shape != x.shape:
        raise ValueError(f"expected dY of X's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    x2, _ = _rows(ctx, x)
    rows = x2.shape[0]
    mu, std = (_stats(ctx, v, i, rows) for i, v in ((at[2], mu), (at[3], std)))
    dy2 = dy.reshape(x2.shape)
    xhat = (x2 - mu) / std
    g = dy2 * _affine(ctx, tuple(gamma), x, at[4])[0] if gamma else dy2  # the gradient of the normalized rows
    dx = (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True)) / std
    if not gamma:
        return dx.reshape(x.shape)
    pshape = tuple(gamma[0].shape)
    return dx.reshape(x.shape), (dy2 * xhat).sum(axis=0).reshape(pshape), dy2.sum(axis=0).reshape(pshape)


def _stats(ctx: Any, v: Any, i: int, rows: int) -> Any:
    """A mean or std input: one value per normalized row."""
    v = float_array(ctx, v, i)
    if namespace(ctx, v).size(v) != rows:
        raise ValueError(
            f"expected {rows} values (one per row) in input {i} {ctx.op.inputs[i]!r}, got shape {tuple(v.shape)}"
        )
    return v.reshape(rows, 1)


@register_gradient("LayerNorm")
def _layer_norm_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    if any(g is not None for g in gout[1:]):
        raise NetDefinitionError("LayerNorm: only output 0 (Y) is differentiable")
    affine = len(op.inputs) == 3
    # Caffe2's GetLayerNormGradient: (dY, Y, mean, std, X[, gamma])
    inputs = [output_grad(op, gout), op.outputs[0], op.outputs[1], op.outputs[2], op.inputs[0], *op.inputs[1:2]]
    outs = ["#dx", "#dgamma", "#dbeta"] if affine else ["#dx"]
    return [OperatorDef("LayerNormGradient", inputs, outs, dict(op.args))], list(outs)


# -- Dropout: Y = X * mask / (1 - ratio), mask ~ Bernoulli(1 - ratio);  dX = dY * mask / (1 - ratio) -
def _keep_scale(ratio: float, f: Any) -> Any:
    return f(0.0 if ratio >= 1.0 else 1.0 / (1.0 - ratio))


_STREAM = "_random_seed_stream"  # key in the op instance's own args dict holding its generator
_DROP_ARGS = [Arg("ratio", float, 0.5, "the probability of zeroing an element"), _IS_TEST]


def dropout_generator(ctx: Any) -> np.random.Generator:
    """The generator of one Dropout op instance (``ctx``: its context, ``operator.ctx``), made on
    first use from its ``seed`` (else ``DeviceOption.random_seed``, else fresh entropy) and kept
    with the instance. A trainer reads and sets its ``bit_generator.state`` to checkpoint it.

        >>> import asyncnet as an
        >>> ws = an.Workspace(); ws.feed("x", np.ones(4, np.float32))
        >>> d = an.Net("d"); _ = d.Dropout("x", ["y", "m"], seed=3)
        >>> net = ws.create_net(d); op = net.operators[0]; before = dropout_generator(op.ctx).bit_generator.state
        >>> net.run(); dropout_generator(op.ctx).bit_generator.state == before
        False
    """
    rng = ctx.args.get(_STREAM)
    if rng is None:  # one generator per op instance (its args dict is its own), as fill.py does
        seed = ctx.args["seed"]
        rng = ctx.args[_STREAM] = np.random.default_rng(seed if seed >= 0 else getattr(ctx.device, "random_seed", None))
    return rng


@register_op(
    "Dropout",
    inputs=1,
    outputs=(1, 2),
    allow_inplace={0: 0},
    args=[
        *_DROP_ARGS,
        Arg(
            "seed",
            int,
            -1,
            "seed of the op's generator (made on its first run); -1: "
            "DeviceOption.random_seed, or fresh entropy when there is none",
        ),
    ],
    inputs_doc=("data",),
    outputs_doc=("output", "mask (bool; needed for the gradient)"),
    doc="Caffe2's Dropout: in training each element is zeroed with probability `ratio` and the rest scaled by "
    "1 / (1 - ratio); the bool mask marks the kept ones. is_test=1: the output is the input (mask all true).",
)
def dropout(ctx: Any, x: Any) -> Any:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x)
    ratio = ctx.args["ratio"]
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"expected 0 <= ratio <= 1, got {ratio}")
    if ctx.args["is_test"]:
        y = x if ctx.op.outputs[0] == ctx.op.inputs[0] else xp.copy(x)
        mask = np.ones(x.shape, dtype=np.bool_)
    else:
        rng = dropout_generator(ctx)
        # numpy's draws on both libraries: one seed, one mask (asarray: a 0-d input draws a Python float)
        mask = np.asarray(rng.random(tuple(x.shape)) >= ratio)
    if xp.name == "torch":
        mask = xp.lib.from_numpy(mask).to(x.device)
    if not ctx.args["is_test"]:
        f = _number(xp, x)
        y = xp.where(mask, x * _keep_scale(ratio, f), f(0))
    return y if len(ctx.op.outputs) == 1 else (y, mask)


@register_op(
    "DropoutGrad",
    inputs=2,
    outputs=1,
    allow_inplace={0: 0},
    args=_DROP_ARGS,
    inputs_doc=("dY", "mask"),
    outputs_doc=("dX",),
    doc="Gradient of Dropout: dX = dY * mask / (1 - ratio) (dY itself with is_test=1).",
)
def dropout_grad(ctx: Any, dy: Any, mask: Any) -> np.ndarray:
    dy, mask = float_array(ctx, dy, 0), array(ctx, mask, 1)
    xp = namespace(ctx, dy, mask)
    if mask.shape != dy.shape or xp.kind(mask) != "b":
        raise ValueError(f"expected a bool mask of dY's shape {tuple(dy.shape)}, got {mask.dtype} {tuple(mask.shape)}")
    if ctx.args["is_test"]:
        return xp.copy(dy)
    f = _number(xp, dy)
    return xp.result(xp.where(mask, dy * _keep_scale(ctx.args["ratio"], f), f(0)))


@register_gradient("Dropout")
def _dropout_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    args = {k: op.args[k] for k in ("ratio", "is_test") if k in op.args}
    if args.get("is_test"):
        return [OperatorDef("Copy", [output_grad(op, gout)], ["#dx"])], ["#dx"]
    if len(op.outputs) < 2:
        raise NetDefinitionError("Dropout needs its mask output (outputs [Y, mask]) to be differentiated in training")
    return [OperatorDef("DropoutGrad", [output_grad(op, gout), op.outputs[1]], ["#dx"], args)], ["#dx"]
