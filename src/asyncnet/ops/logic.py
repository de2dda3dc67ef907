"""Comparison, logic and cast operators (Caffe2's LT ... NE, Not, And, Or, Xor, Cast).

Plans compute their stop conditions with these. As in Caffe2 the comparisons take two inputs
of one numeric or bool dtype and give a bool tensor; And, Or, Xor and Not take bool tensors.
Every binary op broadcasts like numpy, or with ``broadcast=1`` (and ``axis``) by Caffe2's
legacy rule (see :mod:`asyncnet.ops.math`). None of them has a gradient, as in Caffe2, except
Cast, whose gradient casts back (it needs ``from_type``, as Caffe2's does)::

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("i", np.array(3, np.int64)); ws.feed("n", np.array(10, np.int64))
    >>> net = an.Net("cond"); _ = net.LT(["i", "n"], "go"); _ = net.Not("go", "stop")
    >>> _ = net.Cast("go", "go_f", to=1)  # 1 is Caffe2's TensorProto.FLOAT
    >>> ws.run_net_once(net); ws.fetch("stop"), ws.fetch("go_f")
    (array(False), array(1., dtype=float32))
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.errors import NetDefinitionError
from asyncnet.ops._check import array, as_array
from asyncnet.ops.math import CPU_CUDA, LEGACY_ARGS, binary_operands, validate_legacy
from asyncnet.tensor.namespace import namespace

__all__ = ["CAFFE2_DTYPES", "cast_dtype"]

#: Caffe2's TensorProto.DataType numbers of the types Cast supports (caffe2.proto; core.DataType)
CAFFE2_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.int32),
    3: np.dtype(np.uint8),
    5: np.dtype(np.bool_),
    6: np.dtype(np.uint8),
    7: np.dtype(np.int8),
    8: np.dtype(np.uint16),
    9: np.dtype(np.int16),
    10: np.dtype(np.int64),
    12: np.dtype(np.float16),
    13: np.dtype(np.float64),
}
_CAFFE2_NAMES = {
    "FLOAT": 1,
    "INT32": 2,
    "BYTE": 3,
    "BOOL": 5,
    "UINT8": 6,
    "INT8": 7,
    "UINT16": 8,
    "INT16": 9,
    "INT64": 10,
    "FLOAT16": 12,
    "DOUBLE": 13,
}
_NUMERIC_KINDS = "biuf"


def cast_dtype(to: Any) -> np.dtype:
    """The numpy dtype of Cast's ``to``: a Caffe2 enum number, a Caffe2 name (any case) or a numpy name.

    >>> cast_dtype(10), cast_dtype("float"), cast_dtype("INT32"), cast_dtype("float64")
    (dtype('int64'), dtype('float32'), dtype('int32'), dtype('float64'))
    """
    if isinstance(to, int) and not isinstance(to, bool):
        if to not in CAFFE2_DTYPES:
            raise ValueError(
                f"Cast to={to}: expected one of Caffe2's TensorProto.DataType numbers {sorted(CAFFE2_DTYPES)} "
                "(0 UNDEFINED, 4 STRING, 14 and 15 are not tensor types Cast supports)"
            )
        return CAFFE2_DTYPES[to]
    if isinstance(to, str):
        if to.upper() in _CAFFE2_NAMES:
            return CAFFE2_DTYPES[_CAFFE2_NAMES[to.upper()]]
        try:
            dt = np.dtype(to)
        except TypeError:
            dt = None
        if dt is not None and dt in CAFFE2_DTYPES.values():
            return dt
    raise ValueError(
        f"Cast to={to!r}: expected a Caffe2 TensorProto.DataType number or one of "
        f"{sorted(_CAFFE2_NAMES)} (any case) or a numpy name such as 'float32'"
    )


def _validate_cast(op: OperatorDef) -> None:
    if "to" in op.args:
        cast_dtype(op.args["to"])
    if "from_type" in op.args:
        cast_dtype(op.args["from_type"])


def _compare(op_type: str, fn: Callable[[Any, Any], Any], sign: str) -> None:
    @register_op(
        op_type,
        inputs=2,
        outputs=1,
        allow_inplace={0: 0},
        args=LEGACY_ARGS,
        validate=validate_legacy,
        devices=CPU_CUDA,
        inputs_doc=("A", "B"),
        outputs_doc=("C (bool)",),
        doc=f"C = A {sign} B elementwise, a bool tensor; A and B share a numeric or bool dtype; "
        "numpy broadcasting or Caffe2's legacy broadcast=1, axis.",
    )
    def kernel(ctx: Any, a: Any, b: Any) -> np.ndarray:
        a, b = binary_operands(ctx, a, b)
        if namespace(ctx, a).kind(a) not in _NUMERIC_KINDS:
            raise TypeError(f"expected numeric or bool inputs, got dtype {a.dtype} in {ctx.op.inputs[0]!r}")
        return as_array(fn(a, b))

    kernel.__name__ = op_type.lower()


def _logical(op_type: str, fn: str, doc: str) -> None:
    @register_op(
        op_type,
        inputs=2,
        outputs=1,
        allow_inplace={0: 0},
        args=LEGACY_ARGS,
        validate=validate_legacy,
        devices=CPU_CUDA,
        inputs_doc=("A (bool)", "B (bool)"),
        outputs_doc=("C (bool)",),
        doc=doc,
    )
    def kernel(ctx: Any, a: Any, b: Any) -> np.ndarray:
        a, b = binary_operands(ctx, a, b)
        _bool(ctx, a, 0)
        return as_array(getattr(namespace(ctx, a), fn)(a, b))

    kernel.__name__ = op_type.lower()


def _bool(ctx: Any, x: np.ndarray, i: int) -> None:
    if namespace(ctx, x).kind(x) != "b":
        raise TypeError(f"expected a bool tensor in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")


_compare("LT", operator.lt, "<")
_compare("LE", operator.le, "<=")
_compare("GT", operator.gt, ">")
_compare("GE", operator.ge, ">=")
_compare("EQ", operator.eq, "==")
_compare("NE", operator.ne, "!=")
_logical("And", "logical_and", "C = A and B elementwise on bool tensors; numpy or Caffe2's legacy broadcasting.")
_logical("Or", "logical_or", "C = A or B elementwise on bool tensors; numpy or Caffe2's legacy broadcasting.")
_logical("Xor", "logical_xor", "C = A xor B elementwise on bool tensors; numpy or Caffe2's legacy broadcasting.")
# bool results: Caffe2 stops gradients here (SHOULD_NOT_DO_GRADIENT), and so does asyncnet's autodiff
register_no_gradient("LT", "LE", "GT", "GE", "EQ", "NE", "And", "Or", "Xor")


@register_op(
    "Not",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    inputs_doc=("X (bool)",),
    outputs_doc=("Y (bool)",),
    doc="Y = not X elementwise on a bool tensor.",
)
def not_(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    _bool(ctx, x, 0)
    return as_array(namespace(ctx, x).logical_not(x))


@register_op(
    "Cast",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    validate=_validate_cast,
    devices=CPU_CUDA,
    args=[
        Arg(
            "to",
            (int, str),
            1,
            "the target type: Caffe2's TensorProto.DataType number "
            "(1 FLOAT, 2 INT32, 5 BOOL, 10 INT64, 13 DOUBLE...) or a name; FLOAT when absent, as in Caffe2",
        ),
        Arg("from_type", (int, str), None, "the input's type, needed only by the gradient (as in Caffe2)"),
    ],
    inputs_doc=("X",),
    outputs_doc=("Y, X converted to `to`",),
    doc="Y = X converted to the type `to` (C++ conversion: floats truncate toward zero, nonzero is true).",
)
def cast(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    to = cast_dtype(ctx.args["to"])
    if type(x) is np.ndarray:
        if x.dtype.kind in "OSUV":
            try:
                return as_array(x.astype(to))
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"cannot convert input 0 {ctx.op.inputs[0]!r} of dtype {x.dtype} to {to}: {exc}"
                ) from exc
        return as_array(x.astype(to))
    return x.to(getattr(namespace(ctx, x).lib, to.name))  # torch names its dtypes as numpy does


@register_gradient("Cast")
def _cast_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    """Caffe2's GetCastGradient: dX = Cast(dY, to=from_type, from_type=to); from_type is required."""
    if "from_type" not in op.args:
        raise NetDefinitionError(
            f"Cast {op.inputs[0]!r} -> {op.outputs[0]!r}: the gradient needs argument "
            "from_type (the input's type), as in Caffe2; none was given"
        )
    dy = gout[0]
    if dy is None:
        return [], [None]
    args = {"to": op.args["from_type"], "from_type": op.args["to"]}
    return [OperatorDef("Cast", [dy], ["#dx"], args)], ["#dx"]
