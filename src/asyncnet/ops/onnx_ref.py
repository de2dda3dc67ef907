"""ONNX operators run by onnx's own reference evaluator, and the tensor fill of ONNX initializers.

``ONNXReference`` runs one ONNX node (any op, any opset, subgraphs included) with
``onnx.reference.ReferenceEvaluator``: the importer uses it for the ops asyncnet has no kernel of
its own for (rare ops, control flow, sequences). Its ``model`` argument is a one-node ONNX model,
serialized and base64-encoded; the op's inputs are that model's graph inputs (the node's inputs
plus the outer-scope values its subgraphs read), its outputs the model's outputs. Torch tensors
go through numpy and come back as torch tensors. The evaluator is built once per model text.

``ONNXTensorFill`` makes a tensor from its raw bytes (base64), dtype and shape: the init net of an
imported model is one of these per initializer.

Importing this module does not import onnx: the kernels do, when they first run.

    >>> import asyncnet as an, base64, numpy as np
    >>> raw = base64.b64encode(np.arange(3, dtype=np.float32).tobytes()).decode()
    >>> ws = an.Workspace(); net = an.Net("init")
    >>> _ = net.ONNXTensorFill([], "w", raw=raw, dtype="float32", shape=[3])
    >>> ws.run_net_once(net); ws.fetch("w")
    array([0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

import base64
import binascii
import threading
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_op
from asyncnet.tensor.namespace import is_torch, to_numpy

_EVALUATORS: dict[str, Any] = {}


class OnnxValue:
    """A non-tensor ONNX value held in a blob: a sequence (a list of arrays) or an empty optional
    (None). The wrapper keeps the workspace from turning a list into an array."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"OnnxValue({self.value!r})"


_LOCK = threading.Lock()


def _decode_model(text: str) -> Any:
    import onnx

    try:
        return onnx.load_model_from_string(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"argument model is not a base64 ONNX model: {e}") from None


def evaluator(text: str) -> Any:
    """The reference evaluator of the one-node model ``text`` (built once, then shared)."""
    ev = _EVALUATORS.get(text)
    if ev is None:
        from onnx.reference import ReferenceEvaluator

        ev = ReferenceEvaluator(_decode_model(text))
        with _LOCK:
            ev = _EVALUATORS.setdefault(text, ev)
    return ev


def _validate_reference(op: OperatorDef) -> None:
    if not isinstance(op.args.get("model"), str) or not op.args["model"]:
        raise ValueError("expected argument model: a base64 one-node ONNX model")


@register_op(
    "ONNXReference",
    inputs=(0, None),
    outputs=(1, None),
    validate=_validate_reference,
    args=[
        Arg("model", str, Arg.REQUIRED, "a one-node ONNX model, serialized, base64"),
        Arg("onnx_op", str, "", "the ONNX op type it runs (for messages and drawings)"),
        Arg("torch_outputs", bool, False, "return torch tensors even from numpy inputs (a net on torch tensors)"),
    ],
    doc="Run one ONNX node with onnx's reference evaluator (onnx.reference): inputs are the node's "
    "inputs and the outer-scope values its subgraphs read, outputs the node's outputs.",
)
def onnx_reference(ctx: Any, *xs: Any) -> Any:
    ev = evaluator(ctx.args["model"])
    torch_out = ctx.args["torch_outputs"] or any(is_torch(x) for x in xs)
    feeds = {name: _host(x) for name, x in zip(ev.input_names, xs)}
    outs = ev.run(None, feeds)
    outs = [_result(y, torch_out) for y in outs]
    return outs[0] if len(outs) == 1 else outs


def _host(x: Any) -> Any:
    if isinstance(x, OnnxValue):
        return _host(x.value)
    if is_torch(x):
        return to_numpy(x)
    if isinstance(x, list):
        return [_host(v) for v in x]
    return x


_TORCH_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"}


def _result(y: Any, torch_out: bool) -> Any:
    if isinstance(y, (np.generic, bool, int, float)):
        y = np.asarray(y)
    if y is None:
        return OnnxValue(None)
    if isinstance(y, list):
        return OnnxValue([_result(v, torch_out) for v in y])
    if torch_out and isinstance(y, np.ndarray) and y.dtype.name in _TORCH_DTYPES:
        import torch

        return torch.from_numpy(y if y.flags.c_contiguous and y.flags.writeable else y.copy())  # 0-d stays 0-d
    return y


def _validate_fill(op: OperatorDef) -> None:
    shape = op.args.get("shape", [])
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise ValueError(f"expected shape of non-negative ints, got {shape}")
    numpy_dtype(op.args.get("dtype", "float32"))


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of ``name``: numpy's names, and ml_dtypes' (bfloat16, float8_*) when installed."""
    try:
        return np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError(f"unknown dtype {name!r}") from None
        if not hasattr(ml_dtypes, name):
            raise ValueError(f"unknown dtype {name!r}") from None
        return np.dtype(getattr(ml_dtypes, name))


@register_op(
    "ONNXTensorFill",
    inputs=0,
    outputs=1,
    validate=_validate_fill,
    args=[
        Arg("raw", str, "", "the tensor's bytes, little-endian, base64"),
        Arg("dtype", str, "float32", "a numpy dtype name"),
        Arg("shape", list, [], "the tensor's shape", item_type=int),
    ],
    doc="Y = the tensor of these raw bytes, dtype and shape (an ONNX initializer or Constant).",
)
def onnx_tensor_fill(ctx: Any) -> np.ndarray:
    dtype = numpy_dtype(ctx.args["dtype"])
    shape = tuple(ctx.args["shape"])
    data = base64.b64decode(ctx.args["raw"].encode("ascii"))
    n = int(np.prod(shape, dtype=np.int64))
    if len(data) != n * dtype.itemsize:
        raise ValueError(f"expected {n * dtype.itemsize} bytes for a {dtype} tensor of shape {shape}, got {len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


@register_op("ONNXEmptyOptional", inputs=0, outputs=1, doc="Y = an empty ONNX optional (OnnxValue(None)).")
def onnx_empty_optional(ctx: Any) -> OnnxValue:
    return OnnxValue(None)
