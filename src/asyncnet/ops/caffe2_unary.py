"""Caffe2's element-wise math operators: Abs, Exp, Log, Sqrt, Sqr, Rsqrt, Cube, Reciprocal,
Negative, Cos, Sin, Tan and Softsign, each with its gradient op ``<Op>Gradient`` (inputs: the
forward input X, or its output Y where the derivative is cheaper from Y, then dY).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([1.0, 4.0], np.float32))
    >>> net = an.Net("unary"); _ = net.Sqrt("x", "r"); _ = net.Negative("x", "n")
    >>> ws.run_net_once(net); ws.fetch("r"), ws.fetch("n")
    (array([1., 2.], dtype=float32), array([-1., -4.], dtype=float32))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op
from asyncnet.ops._check import as_array, float_array, same_dtype
from asyncnet.ops.math import CPU_CUDA
from asyncnet.tensor.namespace import namespace

__all__ = ["UNARY"]

Fn = Callable[[Any, Any], Any]


def _lib(ctx: Any, *xs: Any) -> Any:
    return namespace(ctx, *xs).lib


# name: (forward f(lib, x), "X" or "Y" (what the gradient reads), gradient g(lib, x_or_y, dy), doc)
UNARY: dict[str, tuple[Fn, str, Callable[[Any, Any, Any], Any], str]] = {
    "Abs": (lambda L, x: L.abs(x), "X", lambda L, x, dy: dy * L.sign(x), "Y = |X|; dX = sign(X) dY."),
    "Exp": (lambda L, x: L.exp(x), "Y", lambda L, y, dy: dy * y, "Y = exp(X); dX = Y dY."),
    "Log": (lambda L, x: L.log(x), "X", lambda L, x, dy: dy / x, "Y = log(X); dX = dY / X."),
    "Sqrt": (lambda L, x: L.sqrt(x), "Y", lambda L, y, dy: dy * 0.5 / y, "Y = sqrt(X); dX = dY / (2 Y)."),
    "Sqr": (lambda L, x: x * x, "X", lambda L, x, dy: 2 * x * dy, "Y = X^2; dX = 2 X dY."),
    "Rsqrt": (lambda L, x: 1 / L.sqrt(x), "Y", lambda L, y, dy: -0.5 * dy * y * y * y, "Y = X^-1/2; dX = -Y^3 dY / 2."),
    "Cube": (lambda L, x: x * x * x, "X", lambda L, x, dy: 3 * x * x * dy, "Y = X^3; dX = 3 X^2 dY."),
    "Reciprocal": (lambda L, x: 1 / x, "Y", lambda L, y, dy: -dy * y * y, "Y = 1 / X; dX = -Y^2 dY."),
    "Negative": (lambda L, x: -x, "Y", lambda L, y, dy: -dy, "Y = -X; dX = -dY."),
    "Cos": (lambda L, x: L.cos(x), "X", lambda L, x, dy: -L.sin(x) * dy, "Y = cos(X); dX = -sin(X) dY."),
    "Sin": (lambda L, x: L.sin(x), "X", lambda L, x, dy: L.cos(x) * dy, "Y = sin(X); dX = cos(X) dY."),
    "Tan": (lambda L, x: L.tan(x), "X", lambda L, x, dy: dy / (L.cos(x) * L.cos(x)), "Y = tan(X); dX = dY / cos(X)^2."),
    "Softsign": (
        lambda L, x: x / (1 + L.abs(x)),
        "X",
        lambda L, x, dy: dy / ((1 + L.abs(x)) * (1 + L.abs(x))),
        "Y = X / (1 + |X|); dX = dY / (1 + |X|)^2.",
    ),
}


def _forward(fn: Fn) -> Callable[..., Any]:
    def kernel(ctx: Any, x: Any) -> Any:
        x = float_array(ctx, x, 0)
        return as_array(fn(_lib(ctx, x), x))

    return kernel


def _backward(fn: Callable[[Any, Any, Any], Any]) -> Callable[..., Any]:
    def kernel(ctx: Any, xy: Any, dy: Any) -> Any:
        xy, dy = float_array(ctx, xy, 0), float_array(ctx, dy, 1)
        same_dtype(ctx, [xy, dy])
        if xy.shape != dy.shape:
            raise ValueError(f"expected dY of the forward blob's shape {tuple(xy.shape)}, got {tuple(dy.shape)}")
        return as_array(fn(_lib(ctx, xy, dy), xy, dy))

    return kernel


def _maker(grad_type: str, reads: str) -> Callable[..., Any]:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None]
        if reads == "X" and op.inputs[0] == op.outputs[0]:
            raise ValueError(
                f"cannot differentiate an in-place {op.type}: its gradient reads its input, which the "
                "output overwrote; write the output to another blob"
            )
        first = op.outputs[0] if reads == "Y" else op.inputs[0]
        return [OperatorDef(grad_type, [first, gout[0]], ["#dx"])], ["#dx"]

    return maker


def _register(name: str, fwd: Fn, reads: str, bwd: Callable[[Any, Any, Any], Any], doc: str) -> None:
    register_op(name, inputs=1, outputs=1, allow_inplace={0: 0}, devices=CPU_CUDA, doc=doc)(_forward(fwd))
    register_op(
        f"{name}Gradient",
        inputs=2,
        outputs=1,
        allow_inplace={1: 0},
        devices=CPU_CUDA,
        inputs_doc=(reads, "dY"),
        outputs_doc=("dX",),
        doc=f"Gradient of {name}: {doc.split('; ', 1)[1]}",
    )(_backward(bwd))
    register_gradient(name)(_maker(f"{name}Gradient", reads))


for _name, (_fwd, _reads, _bwd, _doc) in UNARY.items():
    _register(_name, _fwd, _reads, _bwd, _doc)
