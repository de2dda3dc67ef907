"""Caffe2's half-precision operators: ``FloatToHalf`` and ``HalfToFloat`` (each the other's
gradient), and the fused momentum updates with weight decay that Caffe2's ``FP16SgdOptimizer``
emits, ``FP16MomentumSGDUpdate`` (float16 data) and ``FP32MomentumSGDUpdate`` (float32 data).

Caffe2 had the two updates on CUDA only; here they run on the CPU with numpy. Their formula
(``caffe2/sgd/fp16_momentum_sgd_op.cu``), with ``g' = g + weight_decay * param``:

* plain: ``step = lr * g' + momentum * m``; ``m = step``; ``param -= step``;
* nesterov: ``m' = lr * g' + momentum * m``; ``step = (1 + momentum) * m' - momentum * m``;
  ``m = m'``; ``param -= step``;

and output 0 is the step. ``FP16MomentumSGDUpdate`` rounds to float16 where Caffe2's half
kernel rounds (the constants, then after each fused multiply-add), or, with ``fp32_update``,
computes in float32 and rounds the results once, as Caffe2's FP32 kernel does.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([1.0, 70000.0], np.float32))
    >>> net = an.Net("half"); _ = net.FloatToHalf("x", "h", clip=True); _ = net.HalfToFloat("h", "y")
    >>> ws.run_net_once(net); ws.fetch("h").dtype, ws.fetch("y").tolist()
    (dtype('float16'), [1.0, 65504.0])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops._check import array
from asyncnet.ops._half import to_half
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import is_torch

__all__: list[str] = []

_HALF_MAX = 65504.0


def _dtype_name(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def _expect(ctx: Any, x: Any, i: int, dtype: str) -> Any:
    x = array(ctx, x, i)
    if _dtype_name(x) != dtype:
        raise TypeError(f"expected {dtype} in input {i} {ctx.op.inputs[i]!r}, got {_dtype_name(x)}")
    return x


# -- FloatToHalf and HalfToFloat -----------------------------------------------------------------------


@register_op(
    "FloatToHalf",
    inputs=1,
    outputs=1,
    devices=("cpu", "cuda"),
    differentiable=True,
    args=[Arg("clip", bool, False, "clamp to float16's range [-65504, 65504] first (else overflow gives inf)")],
    doc="Y = X (float32) as float16 (Caffe2's FloatToHalf).",
)
def float_to_half(ctx: Any, x: Any) -> Any:
    x = _expect(ctx, x, 0, "float32")
    if is_torch(x):
        import torch

        return (x.clamp(-_HALF_MAX, _HALF_MAX) if ctx.args["clip"] else x).to(torch.float16)
    return to_half(np.clip(x, -_HALF_MAX, _HALF_MAX) if ctx.args["clip"] else x)


@register_op(
    "HalfToFloat",
    inputs=1,
    outputs=1,
    devices=("cpu", "cuda"),
    differentiable=True,
    doc="Y = X (float16) as float32 (Caffe2's HalfToFloat).",
)
def half_to_float(ctx: Any, x: Any) -> Any:
    x = _expect(ctx, x, 0, "float16")
    if is_torch(x):
        import torch

        return x.to(torch.float32)
    return x.astype(np.float32)


@register_gradient("FloatToHalf")
def _float_to_half_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("HalfToFloat", [output_grad(op, gout)], ["#dx"])], ["#dx"]


@register_gradient("HalfToFloat")
def _half_to_float_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("FloatToHalf", [output_grad(op, gout)], ["#dx"])], ["#dx"]


# -- the fused momentum updates -------------------------------------------------------------------------

_UPDATE_ARGS = [
    Arg("momentum", float, 0.0, "momentum coefficient"),
    Arg("weight_decay", float, 0.0, "added to the gradient times the parameter"),
    Arg("nesterov", bool, False, "Nesterov momentum"),
]


def _update_inputs(ctx: Any, inputs: tuple[Any, ...], dtype: str) -> tuple[np.ndarray, ...]:
    grad, moment, lr, param = inputs
    arrays = [_expect(ctx, x, i, dtype) for i, x in ((0, grad), (1, moment), (3, param))]
    if any(not isinstance(a, np.ndarray) for a in arrays):
        raise TypeError(f"{ctx.op.type} runs on numpy arrays (the CPU); got a torch tensor")
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"expected grad, moment and param of one shape, got {[a.shape for a in arrays]}")
    lr = array(ctx, lr, 2)
    if np.size(lr) != 1:
        raise ValueError(f"expected a one-element lr in input 2 {ctx.op.inputs[2]!r}, got shape {tuple(lr.shape)}")
    return arrays[0], arrays[1], float(np.asarray(lr).ravel()[0]), arrays[2]


def _write(ctx: Any, out: int, inp: int, source: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Output ``out``: written into input ``inp``'s array when the op runs in place."""
    if ctx.op.outputs[out] == ctx.op.inputs[inp]:
        if not source.flags.writeable:
            raise ValueError(f"input {inp} {ctx.op.inputs[inp]!r} is read-only; an update op writes it in place")
        np.copyto(source, value)
        return source
    return value


def _momentum32(g: Any, m: Any, lr: float, p: Any, a: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(step, new moment, new param) in float32."""
    f = np.float32
    mom, wd = f(a["momentum"]), f(a["weight_decay"])
    ng = wd * p + g
    mom_m = mom * m
    m_new = f(lr) * ng + mom_m
    step = (m_new * mom + m_new) - mom_m if a["nesterov"] else m_new
    return step, m_new, p - step


def _momentum32_from16(g: Any, m: Any, lr: float, p: Any, a: dict[str, Any]) -> tuple[Any, Any, Any]:
    return _momentum32(g.astype(np.float32), m.astype(np.float32), lr, p.astype(np.float32), a)


def _momentum16(g: Any, m: Any, lr: float, p: Any, a: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(step, new moment, new param) as Caffe2's half kernel: float16 constants, each fused
    multiply-add computed in float32 and rounded to float16."""
    h, f = np.float16, np.float32
    g, m, p = g.astype(f), m.astype(f), p.astype(f)
    mom, wd, rate = (f(h(v)) for v in (a["momentum"], a["weight_decay"], lr))

    def r(x: Any) -> Any:  # rounded to float16, computed on in float32
        return to_half(x).astype(f)

    ng = r(wd * p + g)
    mom_m = r(mom * m)
    m_new = r(rate * ng + mom_m)
    step = r(r(m_new * mom + m_new) - mom_m) if a["nesterov"] else m_new
    return to_half(step), to_half(m_new), to_half(p - step)


def _update(ctx: Any, inputs: tuple[Any, ...], dtype: str, fn: Any) -> tuple[np.ndarray, ...]:
    g, m, lr, p = _update_inputs(ctx, inputs, dtype)
    step, m_new, p_new = fn(g, m, lr, p, ctx.args)
    t = np.dtype(dtype)
    m_out = _write(ctx, 1, 1, m, m_new.astype(t))
    p_out = _write(ctx, 2, 3, p, p_new.astype(t))
    g_out = _write(ctx, 0, 0, g, step.astype(t))
    return g_out, m_out, p_out


@register_op(
    "FP16MomentumSGDUpdate",
    inputs=4,
    outputs=3,
    allow_inplace={0: 0, 1: 1, 3: 2},
    args=[*_UPDATE_ARGS, Arg("fp32_update", bool, False, "compute in float32, round the results once")],
    inputs_doc=("grad (float16)", "moment (float16)", "lr (1 element)", "param (float16)"),
    outputs_doc=("the step taken", "moment", "param"),
    doc="Caffe2's FP16MomentumSGDUpdate: momentum SGD with weight decay on float16 data (see the module doc).",
)
def fp16_momentum_sgd_update(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    return _update(ctx, inputs, "float16", _momentum32_from16 if ctx.args["fp32_update"] else _momentum16)


@register_op(
    "FP32MomentumSGDUpdate",
    inputs=4,
    outputs=3,
    allow_inplace={0: 0, 1: 1, 3: 2},
    args=_UPDATE_ARGS,
    inputs_doc=("grad (float32)", "moment (float32)", "lr (1 element)", "param (float32)"),
    outputs_doc=("the step taken", "moment", "param"),
    doc="Caffe2's FP32MomentumSGDUpdate: momentum SGD with weight decay on float32 data (see the module doc).",
)
def fp32_momentum_sgd_update(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    return _update(ctx, inputs, "float32", _momentum32)


register_no_gradient("FP16MomentumSGDUpdate", "FP32MomentumSGDUpdate")
