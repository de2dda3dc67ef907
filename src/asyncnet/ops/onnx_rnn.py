"""ONNX's LSTM and GRU (forward, reverse, bidirectional; layout 0 or 1), one kernel written against
numpy and torch alike (matmuls, sigmoid, tanh); for imported ONNX models.

The importer routes a node here when it has the default activations, no clip, no peepholes, no
``sequence_lens`` and (LSTM) ``input_forget=0``: every sequence runs its full length. ``produce``
says which of the node's outputs (Y, Y_h[, Y_c]) the op writes, in that order.

    >>> import asyncnet as an, numpy as np
    >>> g = np.random.default_rng(0)
    >>> ws = an.Workspace()
    >>> for n, s in [("x", (5, 2, 3)), ("w", (1, 12, 3)), ("r", (1, 12, 4))]:
    ...     ws.feed(n, g.standard_normal(s).astype(np.float32))
    >>> net = an.Net("n"); _ = net.ONNXGRU(["x", "w", "r"], ["y", "h"], hidden_size=4, produce=[1, 1])
    >>> ws.run_net_once(net); ws.fetch("y").shape, ws.fetch("h").shape
    ((5, 1, 2, 4), (1, 2, 4))
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import float_array
from asyncnet.ops.conv import _torch as torch_if_installed
from asyncnet.tensor.namespace import is_torch

_ARGS = [
    Arg("hidden_size", int, Arg.REQUIRED, "H"),
    Arg(
        "direction",
        str,
        "forward",
        "forward, reverse or bidirectional",
        choices=("forward", "reverse", "bidirectional"),
    ),
    Arg("layout", int, 0, "0: X [seq, batch, in]; 1: X [batch, seq, in]", choices=(0, 1)),
    Arg("produce", list, [1, 1], "which outputs the op writes: Y, Y_h (and Y_c for LSTM), 1 or 0 each", item_type=int),
    Arg(
        "gate_order",
        str,
        "onnx",
        "the order of the gate blocks in W, R and B: ONNX's (LSTM i, o, f, c; GRU z, r, h) or torch's "
        "(i, f, g, o; r, z, n), which the importer writes for weights that are initializers",
        choices=("onnx", "torch"),
    ),
]


def _validate(n_state: int) -> Any:
    def check(op: OperatorDef) -> None:
        produce = op.args.get("produce", [1, 1])
        if len(produce) > n_state + 1 or sum(1 for p in produce if p) != len(op.outputs):
            raise ValueError(
                f"expected one output per 1 in produce={produce} (at most {n_state + 1}), got {len(op.outputs)} outputs"
            )

    return check


class _Ops:
    """The array functions the recurrence needs, for numpy or torch."""

    def __init__(self, like: Any):
        self.torch = is_torch(like)
        if self.torch:
            import torch

            self.lib = torch

    def sigmoid(self, x: Any) -> Any:
        return self.lib.sigmoid(x) if self.torch else 1 / (1 + np.exp(-x))

    def tanh(self, x: Any) -> Any:
        return self.lib.tanh(x) if self.torch else np.tanh(x)

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        return (
            self.lib.zeros(shape, dtype=like.dtype, device=like.device) if self.torch else np.zeros(shape, like.dtype)
        )

    def stack(self, xs: list[Any], axis: int) -> Any:
        return self.lib.stack(xs, dim=axis) if self.torch else np.stack(xs, axis=axis)

    def swap01(self, x: Any) -> Any:
        return x.transpose(0, 1) if self.torch else np.swapaxes(x, 0, 1)

    def split(self, x: Any, n: int) -> list[Any]:
        return list(self.lib.chunk(x, n, dim=-1)) if self.torch else np.split(x, n, axis=-1)


# ONNX's gate blocks in torch's order: LSTM (i, o, f, c) -> (i, f, g, o); GRU (z, r, h) -> (r, z, n)
_TORCH_ORDER = {4: (0, 2, 3, 1), 3: (1, 0, 2)}


# id(W) -> (W, the versions of W, R and B, R, the weights in torch's order): reordered once per weight
_REORDERED: dict[int, tuple[Any, Any, Any, list[Any]]] = {}


def _fused_torch(ctx: Any, x: Any, w: Any, r: Any, b: Any, h0: Any, c0: Any, n_gates: int) -> Any:
    """torch's fused LSTM / GRU (torch.lstm, torch.gru: one C++ call for the whole sequence) with the
    weights reordered; GRU only with linear_before_reset=1, the form torch computes."""
    import torch

    hidden, layout = ctx.args["hidden_size"], ctx.args["layout"]
    direction = ctx.args["direction"]
    dirs = 2 if direction == "bidirectional" else 1
    if w.shape[0] != dirs or w.shape[1] != n_gates * hidden or r.shape[1] != n_gates * hidden or r.shape[2] != hidden:
        return None  # the general path raises the shape error

    def reorder(a: Any) -> Any:
        blocks = torch.chunk(a, n_gates, dim=0)
        return torch.cat([blocks[i] for i in _TORCH_ORDER[n_gates]], dim=0)

    batch_first = layout == 1
    if isinstance(x, np.ndarray) and not batch_first and x.ndim == 3 and x.transpose(1, 0, 2).flags.c_contiguous:
        x, batch_first = x.transpose(1, 0, 2), True  # a [batch, seq, in] array seen sequence first: no copy
    if ctx.args["gate_order"] == "torch":  # in torch's order already (reordered at import)
        flat = [a if is_torch(a) else _tensor(torch, a) for a in _halves(w, r, b, n_gates, hidden, dirs)]
        if not is_torch(x):
            x, h0, c0 = (None if a is None else _tensor(torch, a) for a in (x, h0, c0))
    elif isinstance(w, np.ndarray):  # numpy weights: reordered by numpy on every call (in-place writes stay seen)
        flat = [torch.from_numpy(a) for a in _reordered_numpy(w, r, b, n_gates, hidden)]
        x, h0, c0 = (None if a is None else _tensor(torch, a) for a in (x, h0, c0))
    else:
        flat = _reordered_torch(w, r, b, n_gates, hidden, dirs, reorder)
    if direction == "reverse":
        x = x.flip(1 if batch_first else 0)
    batch = x.shape[0 if batch_first else 1]

    def initial(state: Any) -> Any:
        if state is None:
            return x.new_zeros((dirs, batch, hidden))
        return state.transpose(0, 1).contiguous() if layout == 1 else state

    h_init, c_init = initial(h0), initial(c0)
    bidi = direction == "bidirectional"
    if n_gates == 4:
        y, h, c = torch.lstm(x, (h_init, c_init), flat, b is not None, 1, 0.0, False, bidi, batch_first)
    else:
        y, h = torch.gru(x, h_init, flat, b is not None, 1, 0.0, False, bidi, batch_first)
        c = h
    if batch_first:
        y = y.transpose(0, 1)
    if direction == "reverse":
        y = y.flip(0)
    y = y.reshape(y.shape[0], batch, dirs, hidden).permute(0, 2, 1, 3)  # [seq, dirs, batch, H]
    if layout == 1:
        y, h, c = y.permute(2, 0, 1, 3), h.transpose(0, 1), c.transpose(0, 1)
    picked = [v for v, p in zip([y, h, c][: len(ctx.args["produce"])], ctx.args["produce"]) if p]
    return picked[0] if len(picked) == 1 else picked


def _tensor(torch: Any, a: np.ndarray) -> Any:
    """A torch view of numpy array ``a`` (of a C-ordered copy when ``a`` is strided or read-only)."""
    return torch.from_numpy(a if a.flags.c_contiguous and a.flags.writeable else np.array(a, order="C"))


def _reordered_torch(w: Any, r: Any, b: Any, n_gates: int, hidden: int, dirs: int, reorder: Any) -> list[Any]:
    """torch weights in torch's gate order, cached per W while W, R and B keep their versions."""
    key = (w._version, r._version, None if b is None else (id(b), b._version), n_gates, dirs)
    cached = _REORDERED.get(id(w))
    if cached is not None and cached[0]() is w and cached[1] == key and cached[2] is r:
        return cached[3]
    flat = []
    for d in range(dirs):
        flat += [reorder(w[d]), reorder(r[d])]
        if b is not None:
            flat += [reorder(b[d][: n_gates * hidden]), reorder(b[d][n_gates * hidden :])]
    if len(_REORDERED) > 256:
        _REORDERED.clear()
    _REORDERED[id(w)] = (weakref.ref(w), key, r, flat)
    return flat


def _halves(w: Any, r: Any, b: Any, n_gates: int, hidden: int, dirs: int) -> list[Any]:
    """W, R (and B's input and recurrent halves) per direction, as they are."""
    flat = []
    for d in range(dirs):
        flat += [w[d], r[d]]
        if b is not None:
            flat += [b[d][: n_gates * hidden], b[d][n_gates * hidden :]]
    return flat


def gate_permutation(n_gates: int, hidden: int, to: str = "torch") -> np.ndarray:
    """Row indices taking W's or R's gate blocks (``n_gates`` of ``hidden`` rows) from ONNX's order
    to torch's (``to="torch"``), or back (``to="onnx"``); B's halves take the same indices.

    >>> gate_permutation(4, 1).tolist(), gate_permutation(4, 1, "onnx").tolist()
    ([0, 2, 3, 1], [0, 3, 1, 2])
    """
    order = np.array(_TORCH_ORDER[n_gates])
    if to == "onnx":
        order = np.argsort(order)
    return np.concatenate([np.arange(i * hidden, (i + 1) * hidden) for i in order])


def _onnx_order(w: Any, r: Any, b: Any, n_gates: int, hidden: int) -> tuple[Any, Any, Any]:
    """W, R, B given in torch's gate order, back in ONNX's (for the step-by-step path)."""
    if w.shape[1] != n_gates * hidden or r.shape[1] != n_gates * hidden:
        return w, r, b  # the shape error is raised below
    idx = gate_permutation(n_gates, hidden, "onnx")
    take = (lambda a, i: a[:, i]) if not is_torch(w) else (lambda a, i: a[:, _torch_module().from_numpy(i)])
    if b is not None:
        b = take(b, np.concatenate([idx, n_gates * hidden + idx]))
    return take(w, idx), take(r, idx), b


def _reordered_numpy(w: np.ndarray, r: np.ndarray, b: Any, n_gates: int, hidden: int) -> list[np.ndarray]:
    """numpy W, R (and B's two halves) per direction in torch's gate order (new contiguous arrays)."""
    order = np.concatenate([np.arange(i * hidden, (i + 1) * hidden) for i in _TORCH_ORDER[n_gates]])
    flat = []
    for d in range(w.shape[0]):
        flat += [w[d][order], r[d][order]]
        if b is not None:
            flat += [b[d][order], b[d][n_gates * hidden + order]]
    return flat


def _fusable(ctx: Any, x: Any, w: Any, r: Any, b: Any, h0: Any, c0: Any, n_gates: int) -> Any:
    """The torch module when torch's fused recurrence can run these inputs: torch tensors of float32/64,
    or numpy arrays of one of those dtypes (zero-copy views in, numpy out) when torch is installed."""
    if x.shape[0 if ctx.args["layout"] == 0 else 1] == 0 or not (n_gates == 4 or ctx.args.get("linear_before_reset")):
        return None
    if is_torch(x):
        return _torch_module() if x.dtype in _fused_dtypes() else None
    arrays = [a for a in (x, w, r, b, h0, c0) if a is not None]
    if x.dtype not in _NUMPY_FUSED or any(type(a) is not np.ndarray or a.dtype != x.dtype for a in arrays):
        return None
    return torch_if_installed()


_NUMPY_FUSED = (np.dtype(np.float32), np.dtype(np.float64))


def _torch_module() -> Any:
    import torch

    return torch


def _run(ctx: Any, x: Any, w: Any, r: Any, b: Any, h0: Any, c0: Any, cell: Any, n_gates: int) -> Any:
    x, w, r = float_array(ctx, x, 0), float_array(ctx, w, 1), float_array(ctx, r, 2)
    torch = _fusable(ctx, x, w, r, b, h0, c0, n_gates)
    if torch is not None:
        if is_torch(x):
            grads = any(is_torch(a) and a.requires_grad for a in (x, w, r, b, h0, c0))
            with contextlib.nullcontext() if grads else torch.no_grad():  # autograd's dispatch only where it records
                out = _fused_torch(ctx, x, w, r, b, h0, c0, n_gates)
            if out is not None:
                return out
        else:
            with torch.inference_mode():  # numpy in and out: no autograd dispatch on each step's ops (15% at batch 32)
                out = _fused_torch(ctx, x, w, r, b, h0, c0, n_gates)
                if out is not None:
                    return out.numpy() if is_torch(out) else [v.numpy() for v in out]
    ops = _Ops(x)
    hidden, layout = ctx.args["hidden_size"], ctx.args["layout"]
    if ctx.args["gate_order"] == "torch":
        w, r, b = _onnx_order(w, r, b, n_gates, hidden)
    if layout == 1:
        x = ops.swap01(x)
        h0 = None if h0 is None else ops.swap01(h0)
        c0 = None if c0 is None else ops.swap01(c0)
    seq, batch = x.shape[0], x.shape[1]
    dirs = ["forward", "reverse"] if ctx.args["direction"] == "bidirectional" else [ctx.args["direction"]]
    if w.shape[0] != len(dirs) or w.shape[1] != n_gates * hidden or r.shape[1] != n_gates * hidden:
        raise ValueError(
            f"expected W [{len(dirs)}, {n_gates * hidden}, in] and R [{len(dirs)}, {n_gates * hidden}, {hidden}], "
            f"got W {tuple(w.shape)}, R {tuple(r.shape)}"
        )
    ys, hs, cs = [], [], []
    for d, direction in enumerate(dirs):
        wb = b[d][: n_gates * hidden] if b is not None else None
        rb = b[d][n_gates * hidden :] if b is not None else None
        xw = x @ w[d].T  # [seq, batch, G*H] for every step at once
        if wb is not None:
            xw = xw + wb
        if rb is not None and n_gates == 4:  # the LSTM's recurrent bias is added to every gate: once here
            xw = xw + rb
            rb = None
        h = h0[d] if h0 is not None else ops.zeros((batch, hidden), x)
        c = c0[d] if c0 is not None else ops.zeros((batch, hidden), x)
        steps = range(seq - 1, -1, -1) if direction == "reverse" else range(seq)
        out = [None] * seq
        for t in steps:
            h, c = cell(ops, xw[t], h, c, r[d], rb)
            out[t] = h
        ys.append(ops.stack(out, 0) if seq else ops.zeros((0, batch, hidden), x))
        hs.append(h)
        cs.append(c)
    y = ops.stack(ys, 1)  # [seq, dirs, batch, H]
    y_h, y_c = ops.stack(hs, 0), ops.stack(cs, 0)
    if layout == 1:
        y = y.permute(2, 0, 1, 3) if ops.torch else np.transpose(y, (2, 0, 1, 3))
        y_h, y_c = ops.swap01(y_h), ops.swap01(y_c)
    results = [y, y_h, y_c][: len(ctx.args["produce"])]
    picked = [v for v, p in zip(results, ctx.args["produce"]) if p]
    return picked[0] if len(picked) == 1 else picked


def _fused_dtypes() -> tuple[Any, ...]:
    import torch

    return (torch.float32, torch.float64)


def _lstm_cell(ops: _Ops, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
    g = xw + h @ r.T
    if rb is not None:
        g = g + rb
    hidden = h.shape[-1]
    s = ops.sigmoid(g[..., : 3 * hidden])  # i, o, f in one call
    c = s[..., 2 * hidden :] * c + s[..., :hidden] * ops.tanh(g[..., 3 * hidden :])
    return s[..., hidden : 2 * hidden] * ops.tanh(c), c


@register_op(
    "ONNXLSTM",
    inputs=(3, 6),
    outputs=(1, 3),
    args=_ARGS,
    validate=_validate(2),
    devices=("cpu", "cuda"),
    inputs_doc=(
        "X",
        "W [dirs, 4H, in] (gates i, o, f, c)",
        "R [dirs, 4H, H]",
        "B [dirs, 8H] (optional)",
        "initial_h (optional)",
        "initial_c (optional)",
    ),
    outputs_doc=("Y", "Y_h", "Y_c"),
    doc="ONNX LSTM with the default activations (sigmoid, tanh, tanh), no peepholes, full-length sequences.",
)
def onnx_lstm(ctx: Any, x: Any, w: Any, r: Any, b: Any = None, h0: Any = None, c0: Any = None) -> Any:
    return _run(ctx, x, w, r, b, h0, c0, _lstm_cell, 4)


def _gru_cell(linear_before_reset: bool) -> Any:
    def cell(ops: _Ops, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
        hidden = h.shape[-1]
        xz, xr, xh = ops.split(xw, 3)
        hr = h @ r[: 2 * hidden].T
        if rb is not None:
            hr = hr + rb[: 2 * hidden]
        hz, hrr = ops.split(hr, 2)
        z, reset = ops.sigmoid(xz + hz), ops.sigmoid(xr + hrr)
        rh_w, rh_b = r[2 * hidden :], (rb[2 * hidden :] if rb is not None else None)
        if linear_before_reset:
            hh = h @ rh_w.T
            hh = hh + rh_b if rh_b is not None else hh
            cand = ops.tanh(xh + reset * hh)
        else:
            hh = (reset * h) @ rh_w.T
            cand = ops.tanh(xh + (hh + rh_b if rh_b is not None else hh))
        return (1 - z) * cand + z * h, c

    return cell


@register_op(
    "ONNXGRU",
    inputs=(3, 5),
    outputs=(1, 2),
    validate=_validate(1),
    devices=("cpu", "cuda"),
    args=[*_ARGS, Arg("linear_before_reset", bool, False, "apply R_h before the reset gate (torch's GRU)")],
    inputs_doc=(
        "X",
        "W [dirs, 3H, in] (gates z, r, h)",
        "R [dirs, 3H, H]",
        "B [dirs, 6H] (optional)",
        "initial_h (optional)",
    ),
    outputs_doc=("Y", "Y_h"),
    doc="ONNX GRU with the default activations (sigmoid, tanh), full-length sequences.",
)
def onnx_gru(ctx: Any, x: Any, w: Any, r: Any, b: Any = None, h0: Any = None) -> Any:
    return _run(ctx, x, w, r, b, h0, None, _gru_cell(ctx.args["linear_before_reset"]), 3)
