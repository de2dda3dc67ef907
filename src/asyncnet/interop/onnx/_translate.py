"""One ONNX node -> asyncnet ops: a native op where asyncnet has the same semantics, else the
``ONNXReference`` op (onnx's reference evaluator behind one asyncnet op).

A native translator is a function ``(tr, node) -> list[OperatorDef] | None`` registered with
:func:`native`; it returns None when this node's attributes or dtypes fall outside what the
native op does exactly (then the reference op runs it, so no node changes meaning).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.interop.onnx._model import OnnxImportError, node_where, reference_op

Translate = Callable[["Translator", Any], "list[OperatorDef] | None"]
NATIVE: dict[str, Translate] = {}
FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def native(*op_types: str) -> Callable[[Translate], Translate]:
    """Register a native translator for these ONNX op types (default domain)."""

    def deco(fn: Translate) -> Translate:
        for t in op_types:
            NATIVE[t] = fn
        return fn

    return deco


class Translator:
    """Translation state of one model: its opsets, functions, inferred types and the counts of
    ops translated natively or by reference."""

    def __init__(self, model: Any, opset: int, types: dict[str, Any]):
        self.model = model
        self.opset = opset
        self.types = types
        self.opsets = {o.domain: o.version for o in model.opset_import}
        self.functions = list(model.functions)
        self.function_ids = {(f.domain, f.name) for f in model.functions}
        self.constants: dict[str, np.ndarray] = {}
        from onnx import numpy_helper

        for t in model.graph.initializer:
            if t.data_type != t.STRING and len(t.dims) <= 1 and int(np.prod(t.dims)) <= 64:
                self.constants[t.name] = numpy_helper.to_array(t)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.index = 0

    # -- facts about values ------------------------------------------------------------------
    def dtype(self, name: str) -> np.dtype | None:
        """The inferred numpy dtype of value ``name`` (None if unknown or not a tensor)."""
        from asyncnet.interop.onnx._model import value_spec

        v = self.types.get(name)
        return None if v is None else value_spec(v).dtype

    def rank(self, name: str) -> int | None:
        from asyncnet.interop.onnx._model import value_spec

        v = self.types.get(name)
        s = None if v is None else value_spec(v).shape
        return None if s is None else len(s)

    def shape(self, name: str) -> tuple[Any, ...] | None:
        from asyncnet.interop.onnx._model import value_spec

        v = self.types.get(name)
        return None if v is None else value_spec(v).shape

    def all_float(self, names: Any) -> bool:
        """Every named value is known to be float16/32/64."""
        return all(n and self.dtype(n) in FLOATS for n in names)

    def const(self, name: str) -> np.ndarray | None:
        """The value of a small initializer or Constant (for shapes, axes), else None."""
        return self.constants.get(name)

    # -- translation --------------------------------------------------------------------------
    def node(self, i: int, node: Any) -> list[OperatorDef]:
        """The asyncnet ops of node ``i``: native when a translator accepts it, else reference."""
        self.index = i
        if node.domain in ("", "ai.onnx") and node.op_type in NATIVE:
            ops = NATIVE[node.op_type](self, node)
            if ops is not None:
                for op in ops:
                    op.name = op.name or node.name
                self.counts[(node.op_type, "native")] += 1
                return ops
        self._check_supported(i, node)
        self.counts[(node.op_type, "reference")] += 1
        return [self.reference(node)]

    def reference(self, node: Any) -> OperatorDef:
        opsets = self.opsets
        if node.op_type == "Scatter" and node.domain in ("", "ai.onnx"):
            node = _scatter_elements(node)
            opsets = {**opsets, "": max(self.opset, 11)}
        inputs = _unique([n for n in node.input if n] + sorted(outer_names(node)))
        outputs = [n for n in node.output if n]
        op = reference_op(node, inputs, outputs, opsets, self.functions, self.types)
        from asyncnet.ops.onnx_ref import evaluator

        try:
            evaluator(op.args["model"])
        except Exception as e:  # noqa: BLE001 - the reference evaluator cannot run this node
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise OnnxImportError(
                f"unsupported op {node.op_type!r} (domain {node.domain or 'ai.onnx'!r}, opset "
                f"{self.opsets.get(node.domain, self.opset)}): no asyncnet kernel, and onnx's reference "
                f"evaluator refuses it: {type(e).__name__}: {first}",
                node_where(self.index, node, "op_type"),
            ) from None
        return op

    def subnet(self, graph: Any, name: str) -> tuple[Any, list[str]]:
        """A subgraph (If branch, Loop or Scan body) as a NetDef and its outer-scope names."""
        from asyncnet.core.defs import NetDef
        from asyncnet.interop.onnx._model import constant_op, initializer_op

        child = Translator.__new__(Translator)
        child.__dict__.update(self.__dict__)
        child.types = dict(self.types)
        child.types.update({v.name: v for v in (*graph.input, *graph.value_info, *graph.output)})
        child.constants = dict(self.constants)
        ops = [initializer_op(t) for t in graph.initializer]
        for i, node in enumerate(graph.node):
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and constant_op(child, i, node, ops):
                continue
            ops += child.node(i, node)
        self.index = child.index
        return NetDef(name, ops=ops), sorted(_free(graph))

    def one_node_model(self, node: Any, inputs: list[str], outputs: list[str]) -> Any:
        import base64

        import onnx

        op = reference_op(node, inputs, outputs, self.opsets, self.functions, self.types)
        return onnx.load_model_from_string(base64.b64decode(op.args["model"]))

    def _check_supported(self, i: int, node: Any) -> None:
        import onnx.defs

        domain = node.domain or ""
        if (domain, node.op_type) in self.function_ids:
            return
        version = self.opsets.get(domain, self.opsets.get("ai.onnx") if domain == "" else None)
        if version is None:
            raise OnnxImportError(
                f"the op's domain {domain!r} is not imported by the model", node_where(i, node, "domain")
            )
        if not onnx.defs.has(node.op_type, domain):
            raise OnnxImportError(
                f"unsupported op: ONNX defines no op {node.op_type!r} in domain {domain or 'ai.onnx'!r}",
                node_where(i, node, "op_type"),
            )
        try:
            schema = onnx.defs.get_schema(node.op_type, version, domain)
        except onnx.defs.SchemaError:
            raise OnnxImportError(
                f"unsupported op: {node.op_type!r} does not exist in opset {version}", node_where(i, node, "op_type")
            ) from None
        if schema.has_function or schema.has_context_dependent_function:
            return  # the reference evaluator runs the op's function body
        # whether the reference evaluator implements it: checked when the op is built (reference())


def _scatter_elements(node: Any) -> Any:
    """Scatter (opset 9-10, deprecated) is ScatterElements (opset 11) under its old name."""
    import onnx

    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.op_type = "ScatterElements"
    return new


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def outer_names(node: Any) -> set[str]:
    """Names a node's subgraphs read from the enclosing scopes."""
    import onnx

    found: set[str] = set()
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            found |= _free(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            for g in a.graphs:
                found |= _free(g)
    return found


def _free(graph: Any) -> set[str]:
    defined = (
        {v.name for v in graph.input} | {t.name for t in graph.initializer} | {t.name for t in graph.sparse_initializer}
    )
    free: set[str] = set()
    for node in graph.node:
        for n in node.input:
            if n and n not in defined:
                free.add(n)
        free |= {n for n in outer_names(node) if n not in defined}
        defined |= set(node.output)
    for v in graph.output:
        if v.name not in defined:
            free.add(v.name)
    return free


def attrs(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values."""
    import onnx.helper

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
