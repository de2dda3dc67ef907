"""ONNX control flow on asyncnet nets: ``ONNXIf``, ``ONNXLoop`` and ``ONNXScan`` run their bodies
(imported ONNX subgraphs, given as NetDef JSON arguments) as asyncnet nets in a workspace of their
own, created once per run of the op: the body's outer-scope values are the op's trailing inputs
(``outer`` names them), fed into that workspace before the first iteration.

``ONNXIf``: input 0 the condition; runs ``then_net`` or ``else_net`` and returns its outputs.
``ONNXLoop``: ONNX Loop (optional trip count and condition, loop-carried values, scan outputs
stacked on a new axis 0). ``ONNXScan``: ONNX Scan (opset 9 on: per-input axes and directions).

    >>> import asyncnet as an, numpy as np
    >>> body = an.Net("body"); _ = body.Add(["acc_in", "x"], "acc_out"); _ = body.Copy(["acc_out"], "y")
    >>> ws = an.Workspace(); ws.feed("acc0", np.zeros(2, np.float32)); ws.feed("xs", np.ones((3, 2), np.float32))
    >>> net = an.Net("n")
    >>> _ = net.ONNXScan(["acc0", "xs"], ["acc", "ys"], body=body.to_def().to_json(), body_inputs=["acc_in", "x"],
    ...                  body_outputs=["acc_out", "y"], num_scan_inputs=1)
    >>> ws.run_net_once(net); ws.fetch("acc"), ws.fetch("ys")[:, 0]
    (array([3., 3.], dtype=float32), array([1., 2., 3.], dtype=float32))
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef
from asyncnet.core.registry import Arg, register_op
from asyncnet.tensor.namespace import is_torch

_NETS: dict[str, tuple[NetDef, NetDef]] = {}
_FILLS = ("ONNXTensorFill", "ONNXEmptyOptional")
_LOCK = threading.Lock()


def _net(text: str) -> tuple[NetDef, NetDef]:
    """A body's constants (its input-free fills, run once per op run) and the rest of its ops."""
    pair = _NETS.get(text)
    if pair is None:
        nd = NetDef.from_json(text)
        fills = [op for op in nd.ops if op.type in _FILLS and not op.inputs]
        rest = [op for op in nd.ops if not (op.type in _FILLS and not op.inputs)]
        pair = (NetDef(nd.name + "_constants", ops=fills), NetDef(nd.name, ops=rest))
        with _LOCK:
            pair = _NETS.setdefault(text, pair)
    return pair


class _Body:
    """A body net created once in a workspace of its own, the outer values fed."""

    def __init__(self, text: str, outer: list[str], values: tuple[Any, ...]):
        from asyncnet.core.workspace import Workspace

        self.ws = Workspace()
        constants, self.net_def = _net(text)
        self.ws.run_net_once(constants)
        if any(is_torch(v) for v in values):  # the body's constants in the library of its inputs
            for name in self.ws.blobs():
                v = self.ws.fetch(name)
                if isinstance(v, np.ndarray) and v.dtype.name in _TORCH_DTYPES:
                    self.ws.feed(name, _torch_scalar(v))
        for name, v in zip(outer, values):
            self.ws.feed(name, v)
        self.ws.create_net(self.net_def)

    def run(self, feeds: dict[str, Any], outputs: list[str]) -> list[Any]:
        for name, v in feeds.items():
            self.ws.feed(name, v)
        self.ws.run_net(self.net_def.name)
        return [self.ws.fetch(n) for n in outputs]

    def close(self) -> None:
        self.ws.close()


_TORCH_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"}


def _torch_scalar(v: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(v.copy())


def _scalar(v: Any, dtype: Any, torch_like: bool) -> Any:
    a = np.array(v, dtype=dtype)
    if torch_like:
        import torch

        return torch.from_numpy(a)
    return a


def _host_value(x: Any) -> Any:
    return x.item() if is_torch(x) else np.asarray(x).item()


def _stack(xs: list[Any], axis: int = 0) -> Any:
    if xs and is_torch(xs[0]):
        import torch

        return torch.stack(xs, dim=axis)
    return np.stack(xs, axis=axis)


def _finish(outs: list[Any]) -> Any:
    return outs[0] if len(outs) == 1 else outs


_COMMON = [
    Arg("body_outputs", list, [], "the body's output blobs, in ONNX order", item_type=str),
    Arg("outer", list, [], "the body's outer-scope blobs: the op's trailing inputs", item_type=str),
]


@register_op(
    "ONNXIf",
    inputs=(1, None),
    outputs=(1, None),
    devices=("cpu", "cuda"),
    args=[
        Arg("then_net", str, Arg.REQUIRED, "NetDef JSON"),
        Arg("else_net", str, Arg.REQUIRED, "NetDef JSON"),
        Arg("then_outputs", list, [], "then_net's outputs", item_type=str),
        Arg("else_outputs", list, [], "else_net's outputs", item_type=str),
        Arg("outer", list, [], "outer-scope blobs: inputs 1..", item_type=str),
    ],
    doc="ONNX If: run then_net when input 0 is true, else else_net; the outputs are the branch's.",
)
def onnx_if(ctx: Any, cond: Any, *outer: Any) -> Any:
    a = ctx.args
    branch, outs = (a["then_net"], a["then_outputs"]) if bool(_host_value(cond)) else (a["else_net"], a["else_outputs"])
    body = _Body(branch, a["outer"], outer)
    try:
        return _finish(body.run({}, outs))
    finally:
        body.close()


@register_op(
    "ONNXLoop",
    inputs=(0, None),
    outputs=(1, None),
    devices=("cpu", "cuda"),
    args=[
        Arg("body", str, Arg.REQUIRED, "NetDef JSON"),
        Arg("body_inputs", list, [], "iter, cond, carried...", item_type=str),
        *_COMMON,
        Arg("has_trip_count", bool, False, "input 0 is the trip count M"),
        Arg("has_cond", bool, False, "the next input is the initial condition"),
        Arg("num_carried", int, 0, "loop-carried values after M and cond"),
    ],
    doc="ONNX Loop: run the body while i < M and cond; outputs the final carried values, then the scan outputs "
    "stacked on a new axis 0.",
)
def onnx_loop(ctx: Any, *xs: Any) -> Any:
    a = ctx.args
    k = 0
    trip = None
    if a["has_trip_count"]:
        trip, k = int(_host_value(xs[0])), 1
    cond = True
    if a["has_cond"]:
        cond, k = bool(_host_value(xs[k])), k + 1
    n = a["num_carried"]
    carried, outer = list(xs[k : k + n]), xs[k + n :]
    torch_like = any(is_torch(x) for x in xs)
    iter_name, cond_name, *carried_names = a["body_inputs"]
    scans: list[list[Any]] = [[] for _ in a["body_outputs"][1 + n :]]
    body = _Body(a["body"], a["outer"], outer)
    try:
        i = 0
        while (trip is None or i < trip) and cond:
            feeds = {iter_name: _scalar(i, np.int64, torch_like), cond_name: _scalar(cond, np.bool_, torch_like)}
            feeds.update(zip(carried_names, carried))
            out = body.run(feeds, a["body_outputs"])
            cond = bool(_host_value(out[0]))
            carried = out[1 : 1 + n]
            for s, v in zip(scans, out[1 + n :]):
                s.append(v)
            i += 1
    finally:
        body.close()
    stacked = [_stack(s) if s else np.zeros((0,), np.float32) for s in scans]
    return _finish(carried + stacked)


@register_op(
    "ONNXScan",
    inputs=(1, None),
    outputs=(1, None),
    devices=("cpu", "cuda"),
    args=[
        Arg("body", str, Arg.REQUIRED, "NetDef JSON"),
        Arg("body_inputs", list, [], "states, then scan slices", item_type=str),
        *_COMMON,
        Arg("num_scan_inputs", int, Arg.REQUIRED, "how many inputs are scanned (the last ones before outer)"),
        Arg("num_inputs", int, -1, "states + scan inputs (-1: all but the outer ones)"),
        Arg("scan_input_axes", list, [], "axis of each scan input (default 0)", item_type=int),
        Arg("scan_input_directions", list, [], "0 forward, 1 reverse", item_type=int),
        Arg("scan_output_axes", list, [], "axis of each scan output (default 0)", item_type=int),
        Arg("scan_output_directions", list, [], "0 append, 1 prepend", item_type=int),
        Arg("batched", bool, False, "Scan-8: states and scan inputs have a batch axis 0 (scan axis 1)"),
        Arg("has_sequence_lens", bool, False, "Scan-8: input 0 is sequence_lens (full lengths only)"),
    ],
    doc="ONNX Scan (opset 9 on): states carried across the slices of the scan inputs; outputs the final states, "
    "then the scan outputs stacked along their axes.",
)
def onnx_scan(ctx: Any, *xs: Any) -> Any:
    a = ctx.args
    n_in = len(xs) - len(a["outer"]) if a["num_inputs"] < 0 else a["num_inputs"]
    m = a["num_scan_inputs"]
    lens = None
    if a["batched"]:
        lens, xs = (xs[0] if a["has_sequence_lens"] else None), (xs[1:] if a["has_sequence_lens"] else xs)
        n_in -= int(a["has_sequence_lens"])
    states, scan_in, outer = list(xs[: n_in - m]), list(xs[n_in - m : n_in]), xs[n_in:]
    body = _Body(a["body"], a["outer"], outer)
    try:
        if not a["batched"]:
            return _finish(_scan(a, body, states, scan_in))
        batch = int(scan_in[0].shape[0])
        if lens is not None and any(
            int(n) != int(scan_in[0].shape[1]) for n in np.asarray(_host_list(lens)).reshape(-1)
        ):
            raise ValueError(
                f"sequence_lens {_host_list(lens)} shorter than the scanned length {scan_in[0].shape[1]} "
                "are not supported (expected every sequence at its full length)"
            )
        per = [_scan(a, body, [x[b] for x in states], [x[b] for x in scan_in]) for b in range(batch)]
        return _finish([_stack([p[i] for p in per]) for i in range(len(per[0]))])
    finally:
        body.close()


def _host_list(x: Any) -> Any:
    return x.detach().cpu().numpy() if is_torch(x) else np.asarray(x)


def _scan(a: dict[str, Any], body: _Body, states: list[Any], scan_in: list[Any]) -> list[Any]:
    """One scan: the final states, then the scan outputs stacked along their axes."""
    m = len(scan_in)
    in_axes = [ax % x.ndim for ax, x in zip(a["scan_input_axes"] or [0] * m, scan_in)]
    in_dirs = a["scan_input_directions"] or [0] * m
    steps = {int(x.shape[ax]) for x, ax in zip(scan_in, in_axes)}
    if len(steps) != 1:
        raise ValueError(f"expected scan inputs of one sequence length, got lengths {sorted(steps)}")
    seq = steps.pop()
    n_state = len(states)
    names = a["body_inputs"]
    n_out = len(a["body_outputs"]) - n_state
    scans: list[list[Any]] = [[] for _ in range(n_out)]
    for t in range(seq):
        feeds = dict(zip(names[:n_state], states))
        for name, x, ax, d in zip(names[n_state:], scan_in, in_axes, in_dirs):
            idx = seq - 1 - t if d else t
            feeds[name] = x.select(ax, idx) if is_torch(x) else np.take(x, idx, axis=ax)
        out = body.run(feeds, a["body_outputs"])
        states = out[:n_state]
        for s, v in zip(scans, out[n_state:]):
            s.append(v)
    out_axes = a["scan_output_axes"] or [0] * n_out
    out_dirs = a["scan_output_directions"] or [0] * n_out
    stacked = []
    for s, ax, d in zip(scans, out_axes, out_dirs):
        s = s[::-1] if d else s
        rank = (s[0].ndim if s else 0) + 1
        stacked.append(_stack(s, ax % rank) if s else np.zeros((0,), np.float32))
    return states + stacked
