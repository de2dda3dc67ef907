"""Caffe2's element-wise Max and Min of any number of same-shape inputs, with their gradients
``MaxGradient``/``MinGradient`` (inputs Y, dY, X1..Xn; each Xi gets dY where it equals Y).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("a", np.array([1.0, 5.0], np.float32)); ws.feed("b", np.array([3.0, 2.0], np.float32))
    >>> net = an.Net("mm"); _ = net.Max(["a", "b"], "hi"); _ = net.Min(["a", "b"], "lo")
    >>> ws.run_net_once(net); ws.fetch("hi"), ws.fetch("lo")
    (array([3., 5.], dtype=float32), array([1., 2.], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op
from asyncnet.ops._check import as_array, float_array, same_dtype

__all__: list[str] = []  # the ops are reached through the registry


def _inputs(ctx: Any, xs: tuple[Any, ...], first: int = 0) -> list[np.ndarray]:
    arrays = [float_array(ctx, x, first + i) for i, x in enumerate(xs)]
    same_dtype(ctx, arrays)
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(f"expected inputs of one shape, got {sorted(shapes)}")
    return arrays


def _reduce(fn: Any) -> Any:
    def kernel(ctx: Any, *xs: Any) -> np.ndarray:
        arrays = _inputs(ctx, xs)
        out = arrays[0].copy()
        for a in arrays[1:]:
            fn(out, a, out=out)
        return as_array(out)

    return kernel


def _grad(ctx: Any, y: Any, dy: Any, *xs: Any) -> Any:
    y, dy = float_array(ctx, y, 0), float_array(ctx, dy, 1)
    arrays = _inputs(ctx, xs, 2)
    if arrays and (arrays[0].shape != y.shape or dy.shape != y.shape):
        raise ValueError(f"expected Y, dY and the inputs of one shape, got {y.shape}, {dy.shape}, {arrays[0].shape}")
    grads = tuple(as_array(np.where(a == y, dy, 0).astype(dy.dtype)) for a in arrays)
    return grads[0] if len(grads) == 1 else grads


def _one_output_per_x(op: OperatorDef) -> None:
    if len(op.outputs) != len(op.inputs) - 2:
        raise ValueError(f"expected {len(op.inputs) - 2} outputs (one per X), got {len(op.outputs)}")


for _name, _fn in (("Max", np.maximum), ("Min", np.minimum)):
    register_op(
        _name,
        inputs=(1, None),
        outputs=1,
        allow_inplace={0: 0},
        doc=f"Element-wise {_name.lower()} of the inputs (all of one shape).",
    )(_reduce(_fn))
    register_op(
        f"{_name}Gradient",
        inputs=(3, None),
        outputs=(1, None),
        inputs_doc=("Y", "dY", "X1...Xn"),
        doc=f"Gradient of {_name}: dXi = dY where Xi equals Y, 0 elsewhere.",
        validate=_one_output_per_x,
    )(_grad)


def _maker(name: str) -> Any:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None] * len(op.inputs)
        grads = [f"#d{i}" for i in range(len(op.inputs))]
        return [OperatorDef(f"{name}Gradient", [op.outputs[0], gout[0], *op.inputs], grads)], grads

    return maker


register_gradient("Max")(_maker("Max"))
register_gradient("Min")(_maker("Min"))
