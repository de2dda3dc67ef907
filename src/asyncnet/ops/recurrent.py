"""LSTM over a whole sequence, beside its gradient through time.

The op follows torch.nn.LSTM's layout (one layer, one direction, sequence first), not
Caffe2's: Caffe2 built its LSTM as a RecurrentNetwork op running a step net, a construct
asyncnet does not re-create. Gates are ordered i, f, g, o as in torch::

    gates = X[t] W_ih^T + b_ih + h W_hh^T + b_hh = [i | f | g | o]   (each [N, H])
    c = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c);   Y[t] = h

The input projection of every step is one matmul before the loop; the loop does one [N, H] x
[H, 4H] matmul per step. The gradient runs back through time from the forward's optional 4th
output (the activated gates, cells and outputs, [T, N, 6H]), or recomputes the forward when the
op has 3 outputs; the weight gradients are again one matmul each over all steps.

The same kernel runs on numpy arrays and torch tensors (results keep the inputs' library and
device); torch's sums and matmuls round differently, so the two agree within float rounding.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); H = 2
    >>> for name, shape in [("x", (3, 1, 4)), ("h0", (1, H)), ("c0", (1, H)), ("w_ih", (4 * H, 4)),
    ...                     ("w_hh", (4 * H, H)), ("b_ih", (4 * H,)), ("b_hh", (4 * H,))]:
    ...     ws.feed(name, np.zeros(shape, np.float32))
    >>> net = an.Net("lstm"); _ = net.LSTM(["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"], ["y", "hT", "cT"])
    >>> ws.run_net_once(net)
    >>> ws.fetch("y").shape, ws.fetch("hT").shape
    ((3, 1, 2), (1, 2))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import float_array, same_dtype
from asyncnet.ops.grad import GradOut, MakerResult
from asyncnet.tensor.namespace import is_torch, namespace

__all__ = ["lstm", "lstm_gradient", "lstm_forward"]

_INPUTS_DOC = ("X [T, N, I]", "h0 [N, H]", "c0 [N, H]", "W_ih [4H, I]", "W_hh [4H, H]", "b_ih [4H]", "b_hh [4H]")


def _empty(shape: tuple[int, ...], like: Any) -> Any:
    """An uninitialized array of ``like``'s library, dtype and device."""
    return like.new_empty(shape) if is_torch(like) else np.empty(shape, like.dtype)


def _cat(arrays: list[Any], axis: int = 0) -> Any:
    if is_torch(arrays[0]):
        import torch

        return torch.cat(arrays, dim=axis)
    return np.concatenate(arrays, axis=axis)


def _gate_scale(hid: int, like: Any) -> np.ndarray:
    """[4H]: 1/2 for the sigmoid gates (i, f, o), 1 for g. With s this vector every gate is one
    tanh: sigmoid(z) = tanh(z / 2) / 2 + 1/2 and tanh(z) = tanh(z * 1) * 1 + 0, i.e.
    act = tanh(s * z) * s + (1 - s); s is folded into the weights once per call."""
    s = namespace(None, like).full((4 * hid,), 0.5, like=like)
    s[2 * hid : 3 * hid] = 1
    return s


def _check(ctx: Any, inputs: tuple[Any, ...]) -> tuple[np.ndarray, ...]:
    arrays = tuple(float_array(ctx, v, i) for i, v in enumerate(inputs))
    namespace(ctx, *arrays)
    same_dtype(ctx, list(arrays))
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = arrays
    if x.ndim != 3:
        raise ValueError(f"expected X of shape [T, N, I], got {tuple(x.shape)}")
    t, n, i = x.shape
    h = h0.shape[-1] if h0.ndim == 2 else -1
    want = {1: (n, h), 2: (n, h), 3: (4 * h, i), 4: (4 * h, h), 5: (4 * h,), 6: (4 * h,)}
    for k, shape in want.items():
        if arrays[k].shape != shape:
            raise ValueError(
                f"expected input {k} {ctx.op.inputs[k]!r} ({_INPUTS_DOC[k]}) of shape {shape} for X "
                f"{tuple(x.shape)} and hidden size {h}, got {tuple(arrays[k].shape)}"
            )
    return arrays


def lstm_forward(
    x: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    w_ih: np.ndarray,
    w_hh: np.ndarray,
    b_ih: np.ndarray,
    b_hh: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Y [T, N, H], C [T, N, H] every step's cell, A [T, N, 4H] the activated gates i, f, g, o)."""
    ys, cs, acts, _ = _forward((x, h0, c0, w_ih, w_hh, b_ih, b_hh), cache=False)
    return ys, cs, acts


def _forward(arrays: tuple[Any, ...], cache: bool) -> tuple[Any, Any, Any, Any]:
    """(Y, C, A, the cache [T, N, 6H] or None). The cache's memory holds A, then C, then Y, each a
    contiguous block (so the loop writes A and C into it directly); its shape is [T, N, 6H]."""
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = arrays
    xp = namespace(None, x)
    t_len, n, _ = x.shape
    hid = h0.shape[1]
    tn, h4 = t_len * n, 4 * hid
    s = _gate_scale(hid, x)
    buf = _empty((tn * 6 * hid,), x) if cache else None
    if buf is not None:
        acts, cs = buf[: tn * h4].reshape(t_len, n, h4), buf[tn * h4 : tn * 5 * hid].reshape(t_len, n, hid)
    else:
        acts, cs = _empty((t_len, n, h4), x), _empty((t_len, n, hid), x)
    # the input projection of every step in one matmul, written where the step's gates go;
    # s is a power of two, so scaling W and b instead of the product gives the same bits
    xp.matmul(x.reshape(tn, -1), w_ih.T * s, out=acts.reshape(tn, h4))
    acts += (b_ih + b_hh) * s
    w_s = w_hh.T * s  # [H, 4H]
    ys = _empty((t_len, n, hid), x)
    rec, tmp = _empty((n, h4), x), _empty((n, hid), x)
    h, c, one_minus_s = h0, c0, 1 - s
    for t in range(t_len):
        a = acts[t]
        xp.matmul(h, w_s, out=rec)
        a += rec
        xp.tanh(a, out=a)
        a *= s
        a += one_minus_s
        i, f, g, o = a[:, :hid], a[:, hid : 2 * hid], a[:, 2 * hid : 3 * hid], a[:, 3 * hid :]
        c = xp.multiply(f, c, out=cs[t])
        c += xp.multiply(i, g, out=tmp)
        h = xp.tanh(c, out=ys[t])
        h *= o
    if buf is not None:
        buf[tn * 5 * hid :] = ys.reshape(-1)
        buf = buf.reshape(t_len, n, 6 * hid)
    return ys, cs, acts, buf


def _cache_blocks(cache: Any, hid: int) -> tuple[Any, Any, Any]:
    """(A [T, N, 4H], C [T, N, H], Y [T, N, H]): the blocks of a cache made by :func:`_forward`."""
    t_len, n = cache.shape[:2]
    flat, tn = cache.reshape(-1), t_len * n
    return (
        flat[: tn * 4 * hid].reshape(t_len, n, 4 * hid),
        flat[tn * 4 * hid : tn * 5 * hid].reshape(t_len, n, hid),
        flat[tn * 5 * hid :].reshape(t_len, n, hid),
    )


@register_op(
    "LSTM",
    inputs=7,
    outputs=(3, 4),
    inputs_doc=_INPUTS_DOC,
    outputs_doc=(
        "Y [T, N, H]",
        "h_T [N, H]",
        "c_T [N, H]",
        "cache [T, N, 6H] (optional: gates, cells, Y for the gradient)",
    ),
    doc="One LSTM layer over a whole sequence in torch.nn.LSTM's layout and gate order (i, f, g, o): "
    "every step's hidden state, and the last hidden and cell states. With a 4th output the activated "
    "gates and cells are kept for the gradient, which otherwise recomputes the forward.",
)
def lstm(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    x, h0, c0, *rest = _check(ctx, inputs)
    xp = namespace(ctx, x)
    if x.shape[0] == 0:
        ys, cs, acts = (
            _empty((0, *h0.shape), x),
            _empty((0, *h0.shape), x),
            _empty((0, h0.shape[0], 4 * h0.shape[1]), x),
        )
        out = (ys, xp.copy(h0), xp.copy(c0))
    else:
        ys, cs, acts, buf = _forward((x, h0, c0, *rest), cache=len(ctx.op.outputs) == 4)
        out = (ys, xp.copy(ys[-1]), xp.copy(cs[-1]))
        if buf is not None:
            return (*out, buf)
    return out if len(ctx.op.outputs) == 3 else (*out, _cat([acts, cs, ys], axis=2))


def lstm_backward(
    arrays: tuple[np.ndarray, ...],
    dy: np.ndarray,
    dh: np.ndarray,
    dc: np.ndarray,
    cache: np.ndarray | None = None,
    dx: bool = True,
) -> tuple[np.ndarray, ...]:
    """(dW_ih, dW_hh, db, dh0, dc0, dX) by backpropagation through time (from the forward's cache
    [T, N, 6H] when given, else recomputing the forward); dX is None when ``dx`` is False."""
    x, h0, c0, w_ih, w_hh, _, _ = arrays
    xp = namespace(None, x)
    t_len, n, _ = x.shape
    hid = h0.shape[1]
    tn, h4 = t_len * n, 4 * hid
    if cache is None:
        ys, cs, acts, _ = _forward(arrays, cache=False)
    else:
        acts, cs, ys = _cache_blocks(cache, hid)
    tc = xp.tanh(cs)
    p = _gate_derivatives(acts, cs, c0, tc)  # [4, T, N, H]
    gates = acts.reshape(t_len, n, 4, hid)
    f, o = gates[:, :, 1], gates[:, :, 3]
    dc_dh = xp.multiply(tc, tc, out=tc)
    dc_dh *= -1
    dc_dh += 1
    dc_dh *= o  # d c / d h through h = o * tanh(c): o (1 - tanh(c)^2)
    da = _empty((t_len, n, 4, hid), x)  # gradient of the gates before activation
    dh, dc, tmp = xp.copy(dh), xp.copy(dc), _empty((n, hid), x)
    for t in reversed(range(t_len)):
        dh += dy[t]
        dc += xp.multiply(dh, dc_dh[t], out=tmp)
        xp.multiply(
            dc[:, None],
            p[:3, t].transpose(1, 0, 2) if xp.name == "numpy" else p[:3, t].permute(1, 0, 2),
            out=da[t, :, :3],
        )
        xp.multiply(dh, p[3, t], out=da[t, :, 3])
        dc *= f[t]
        xp.matmul(da[t].reshape(n, h4), w_hh, out=dh)
    da2 = da.reshape(tn, h4)
    h_prev = _cat([h0[None], ys[:-1]]).reshape(tn, hid)
    dw_ih = da2.T @ x.reshape(tn, -1)
    dw_hh = da2.T @ h_prev
    return dw_ih, dw_hh, da2.sum(axis=0), dh, dc, (da2 @ w_ih).reshape(x.shape) if dx else None


def _gate_derivatives(acts: Any, cs: Any, c0: Any, tc: Any) -> Any:
    """[4, T, N, H] (gate first, each gate's block contiguous): what multiplies dc (dh for o) in
    each gate's pre-activation gradient: the gate's derivative (a (1 - a) for the sigmoids i, f,
    o, 1 - a^2 for g), times g for i, the previous cell for f, i for g and ``tc`` = tanh(c) for o."""
    xp = namespace(None, acts)
    t_len, n, hid = cs.shape
    gates = acts.reshape(t_len, n, 4, hid)
    if xp.name == "numpy":  # one strided copy, then every pass below runs on contiguous memory
        gt = np.ascontiguousarray(gates.transpose(2, 0, 1, 3))
    else:
        gt = gates.permute(2, 0, 1, 3).contiguous()
    i, g = gt[0], gt[2]
    d = xp.subtract(1, gt) if xp.name == "numpy" else 1 - gt
    d *= gt  # a (1 - a)
    xp.multiply(g, g, out=d[2])
    d[2] *= -1
    d[2] += 1  # 1 - g^2
    d[0] *= g
    d[1, 0] *= c0
    d[1, 1:] *= cs[:-1]
    d[2] *= i
    d[3] *= tc
    return d


@register_op(
    "LSTMGradient",
    inputs=(7, 11),
    outputs=(4, 7),
    args=[
        Arg(
            "grads",
            list,
            [1, 0, 0],
            "1 for each forward output (Y, h_T, c_T) whose gradient is an input",
            item_type=int,
        ),
        Arg("cached", bool, False, "input 7 is the forward's cache output"),
    ],
    inputs_doc=(*_INPUTS_DOC, "cache (if cached)", "dY, dh_T, dc_T (those marked in `grads`)"),
    outputs_doc=("dW_ih", "dW_hh", "db_ih", "db_hh", "dh0 (optional)", "dc0 (optional)", "dX (optional)"),
    doc="Gradient of LSTM through time (the forward is recomputed): the weight and bias gradients, then, when "
    "those outputs are given, dh0, dc0 and dX.",
)
def lstm_gradient(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    arrays = _check(ctx, inputs[:7])
    x, h0 = arrays[0], arrays[1]
    xp = namespace(ctx, *inputs)
    flags, first = ctx.args["grads"], 8 if ctx.args["cached"] else 7
    if len(flags) != 3 or sum(flags) != len(inputs) - first:
        raise ValueError(f"expected `grads` of 3 flags matching the {len(inputs) - first} gradient inputs, got {flags}")
    cache = None
    if ctx.args["cached"]:
        cache = float_array(ctx, inputs[7], 7)
        if cache.shape != (x.shape[0], x.shape[1], 6 * h0.shape[1]) or cache.dtype != x.dtype:
            raise ValueError(
                f"expected the forward's cache of shape {(x.shape[0], x.shape[1], 6 * h0.shape[1])}, "
                f"got {tuple(cache.shape)}"
            )
    given = iter(inputs[first:])
    out_shapes = ((x.shape[0], *h0.shape), tuple(h0.shape), tuple(h0.shape))
    dy, dh, dc = (
        _grad_in(ctx, next(given), s, x.dtype) if on else xp.full(s, 0, like=x) for on, s in zip(flags, out_shapes)
    )
    if x.shape[0] == 0:
        z = [xp.zeros_like(a) for a in arrays[3:]]
        res: tuple[np.ndarray, ...] = (z[0], z[1], z[2], z[3], dh, dc, xp.zeros_like(x))
    else:
        dw_ih, dw_hh, db, dh0, dc0, dx = lstm_backward(arrays, dy, dh, dc, cache, dx=len(ctx.op.outputs) == 7)
        res = (dw_ih, dw_hh, db, xp.copy(db), dh0, dc0, dx)
    return res[: len(ctx.op.outputs)]


def _grad_in(ctx: Any, g: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    g = g if is_torch(g) else np.asarray(g)
    if g.shape != shape or g.dtype != dtype:
        raise ValueError(
            f"expected an output gradient of shape {shape} and dtype {dtype}, got {tuple(g.shape)} {g.dtype}"
        )
    return g


@register_gradient("LSTM")
def _lstm_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    if len(gout) == 4 and gout[3] is not None:
        raise ValueError("LSTM: the cache output is not differentiable")
    flags = [0 if g is None else 1 for g in gout[:3]]
    cached = len(op.outputs) == 4
    inputs = [*op.inputs, *op.outputs[3:], *(g for g in gout[:3] if g is not None)]
    outs = ["#dw_ih", "#dw_hh", "#db_ih", "#db_hh", "#dh0", "#dc0", "#dx"]
    gop = OperatorDef("LSTMGradient", inputs, outs, {"grads": flags, "cached": cached})
    return [gop], ["#dx", "#dh0", "#dc0", "#dw_ih", "#dw_hh", "#db_ih", "#db_hh"]
