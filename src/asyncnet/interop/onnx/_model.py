"""What an imported ONNX model is made of, below the importer and the translators: the errors,
the specs of graph values, and the ops every translation emits (a tensor fill for an initializer
or constant, an ``ONNXReference`` op for a node without a native kernel)."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.errors import AsyncNetError, NetDefinitionError


class OnnxImportError(NetDefinitionError):
    """An ONNX model asyncnet cannot import: malformed, unsupported op or opset, bad node."""

    __module__ = "asyncnet.interop.onnx"  # where users import it from


class OnnxInputError(AsyncNetError, ValueError):
    """Inputs fed to an imported model do not match its graph inputs (names, dtypes, shapes)."""

    __module__ = "asyncnet.interop.onnx"


@dataclass(frozen=True)
class ValueSpec:
    """A graph input or output: name, numpy dtype (None if not a tensor or unknown), shape
    (ints for fixed dims, str or None for symbolic ones; None if the rank is unknown)."""

    name: str
    dtype: np.dtype | None
    shape: tuple[int | str | None, ...] | None
    kind: str = "tensor"

    def describe(self) -> str:
        dims = "?" if self.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
        return f"{self.name}: {self.kind} {self.dtype} {dims}"


def node_where(i: int, node: Any, field_name: str = "") -> str:
    """``node 3 'conv1' (Conv)`` and the field, for messages."""
    name = f" {node.name!r}" if node.name else ""
    return f"node {i}{name} ({node.op_type}){'.' + field_name if field_name else ''}"


def value_spec(v: Any) -> ValueSpec:
    """A :class:`ValueSpec` from an ONNX ``ValueInfoProto``."""
    import onnx.helper

    t = v.type
    which = t.WhichOneof("value")
    if which != "tensor_type":
        return ValueSpec(v.name, None, None, which or "unknown")
    tt = t.tensor_type
    dtype = None
    if tt.elem_type:
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            dtype = None
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return ValueSpec(v.name, dtype, shape)


def initializer_op(t: Any) -> OperatorDef:
    """The ``ONNXTensorFill`` (or, for strings, ``ONNXReference`` Constant) of an initializer."""
    from onnx import numpy_helper

    return tensor_fill(t.name, numpy_helper.to_array(t))


def tensor_fill(name: str, a: np.ndarray) -> OperatorDef:
    """An op making blob ``name`` = ``a`` (raw bytes for numeric dtypes; a Constant node for strings)."""
    a = np.asarray(a)
    if a.dtype.kind in "OUS":
        import onnx.helper
        from onnx import numpy_helper

        node = onnx.helper.make_node("Constant", [], [name], value=numpy_helper.from_array(a, name))
        return reference_op(node, [], [name], {"": 17}, [])
    raw = base64.b64encode(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode(
        "ascii"
    )
    return OperatorDef("ONNXTensorFill", [], [name], {"raw": raw, "dtype": a.dtype.name, "shape": list(a.shape)})


def constant_op(tr: Any, i: int, node: Any, init_ops: list[OperatorDef]) -> bool:
    """Evaluate a Constant node at import and put its value in the init net (True when done)."""
    if (
        len(node.output) != 1
        or any(a.type == a.GRAPH for a in node.attribute)
        or any(a.ref_attr_name for a in node.attribute)
    ):
        return False
    from onnx.reference import ReferenceEvaluator

    try:
        value = ReferenceEvaluator(tr.one_node_model(node, [], list(node.output))).run(None, {})[0]
    except Exception as e:  # noqa: BLE001 - a Constant the reference refuses is a bad node
        raise OnnxImportError(
            f"cannot evaluate the constant: {type(e).__name__}: {e}", node_where(i, node, "attribute")
        ) from None
    if not isinstance(value, np.ndarray) and not np.isscalar(value):
        return False
    value = np.asarray(value)
    init_ops.append(tensor_fill(node.output[0], value))
    if value.size <= 64 and value.dtype.kind in "biuf":
        tr.constants[node.output[0]] = value
    return True


def reference_op(
    node: Any,
    inputs: list[str],
    outputs: list[str],
    opsets: Mapping[str, int],
    functions: Iterable[Any],
    value_infos: Mapping[str, Any] | None = None,
) -> OperatorDef:
    """The ``ONNXReference`` op running ``node`` (inputs: the node's and its subgraphs' outer-scope names)."""
    import onnx.helper

    infos = value_infos or {}
    g_inputs = [_bare_info(infos.get(n), n) for n in inputs]
    g_outputs = [_bare_info(None, n) for n in outputs]
    graph = onnx.helper.make_graph([node], "one_node", g_inputs, g_outputs)
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()], functions=list(functions)
    )
    model.ir_version = max(model.ir_version, 8)
    text = base64.b64encode(model.SerializeToString()).decode("ascii")
    return OperatorDef(
        "ONNXReference", list(inputs), list(outputs), {"model": text, "onnx_op": node.op_type}, name=node.name
    )


def _bare_info(info: Any, name: str) -> Any:
    import onnx

    v = onnx.ValueInfoProto()
    if info is not None:
        v.CopyFrom(info)
    v.name = name
    return v
