"""ONNX model -> an init net (the initializers and constants) and a predict net of asyncnet ops.

The importer reads the model (a path, bytes or a ``ModelProto``), checks it (protobuf, opset
range, ``onnx.checker``, every op known), infers the types of its values, then translates node by
node: an op with an asyncnet kernel of the same semantics (:mod:`._translate`) becomes that op,
any other op becomes one ``ONNXReference`` op that runs the node with onnx's reference evaluator.
Every failure is an :class:`OnnxImportError` naming the node (index, name, op type) and the field.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.errors import AsyncNetError, NetDefinitionError, near_names

MIN_OPSET = 1  # the reference evaluator runs every opset; the native translators target 7 and up


class OnnxImportError(NetDefinitionError):
    """An ONNX model asyncnet cannot import: malformed, unsupported op or opset, bad node."""


class OnnxInputError(AsyncNetError, ValueError):
    """Inputs fed to an imported model do not match its graph inputs (names, dtypes, shapes)."""


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


@dataclass
class OnnxModel:
    """An imported ONNX model: run ``init_net`` once, then ``predict_net`` per batch.

    >>> import onnx, onnx.helper as oh, numpy as np, asyncnet as an
    >>> g = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
    ...     [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
    ...     [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    >>> m = an.onnx.load(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]))
    >>> ws = an.Workspace(); ws.run_net_once(m.init_net)
    >>> ws.feed("x", np.array([-1.0, 2.0], np.float32)); ws.run_net_once(m.predict_net); ws.fetch("y")
    array([0., 2.], dtype=float32)
    """

    init_net: NetDef
    predict_net: NetDef
    inputs: list[ValueSpec]
    outputs: list[ValueSpec]
    opset: int
    op_counts: dict[str, tuple[str, int]] = field(default_factory=dict)

    def check_feeds(self, feeds: Mapping[str, Any]) -> None:
        """Raise :class:`OnnxInputError` unless ``feeds`` has every graph input, of its dtype and shape."""
        check_feeds(self.inputs, feeds)


def read_model(source: Any) -> Any:
    """A ``ModelProto`` from a path, bytes or a ``ModelProto``; a bad file raises :class:`OnnxImportError`."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    where = "model"
    if isinstance(source, (str, os.PathLike)):
        where = os.fspath(source)
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OnnxImportError(f"cannot read the ONNX file: {e.strerror or e}", where) from None
    elif isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:
        raise OnnxImportError(f"expected a path, bytes or an onnx.ModelProto, got {type(source).__name__}", where)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise OnnxImportError(f"not a valid ONNX model (malformed or truncated protobuf, {len(data)} bytes): "
                              f"{type(e).__name__}: {e}", where) from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise OnnxImportError(f"not an ONNX model: no graph ({len(data)} bytes; truncated or not an .onnx file?)", where)
    if isinstance(source, (str, os.PathLike)) and any(t.data_location == onnx.TensorProto.EXTERNAL
                                                      for t in model.graph.initializer):
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, os.path.dirname(os.fspath(source)) or ".")
    return model


def default_opset(model: Any) -> int:
    """The model's version of the default ("" / "ai.onnx") domain, checked against the supported range."""
    import onnx.defs

    newest = onnx.defs.onnx_opset_version()
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:  # only other domains (ai.onnx.ml, training, functions)
        return newest
    v = versions[0]
    if not MIN_OPSET <= v <= newest:
        raise OnnxImportError(f"expected opset {MIN_OPSET} to {newest} of the default domain, got {v}", "opset_import")
    return v


def node_where(i: int, node: Any, field_name: str = "") -> str:
    """``node 3 'conv1' (Conv)`` and the field, for messages."""
    name = f" {node.name!r}" if node.name else ""
    return f"node {i}{name} ({node.op_type}){'.' + field_name if field_name else ''}"


def load(source: Any, *, net_type: str = "simple", num_workers: int | None = None, name: str = "onnx",
         check: bool = True, optimize: bool = True) -> OnnxModel:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) as asyncnet nets.

    ``net_type`` and ``num_workers`` are the predict net's executor; ``check`` runs
    ``onnx.checker`` first; ``optimize`` folds inference batch norms into the convolutions
    before them, computes shape arithmetic at import and fuses MatMul + Add pairs
    (:mod:`._optimize`). Errors are :class:`OnnxImportError` naming the node and field::

        >>> import asyncnet as an
        >>> an.onnx.load(b"not a model")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        asyncnet.interop.onnx._import.OnnxImportError: ...not a valid ONNX model...
    """
    import onnx

    from asyncnet.interop.onnx import _translate

    model = read_model(source)
    opset = default_opset(model)
    if check:
        _check(model)
    if optimize:
        from asyncnet.interop.onnx._optimize import drop_zero_states, fold_batch_norm, fold_shapes

        model = drop_zero_states(fold_batch_norm(model))
        for _ in range(4):  # a folded Reshape target lets shape inference find the dims the next round folds
            folded = fold_shapes(model, infer_types(model))
            if folded is model:
                break
            model = folded
    types = infer_types(model)
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    inputs = [value_spec(v) for v in graph.input if v.name not in init_names]
    outputs = [value_spec(types.get(v.name, v)) for v in graph.output]
    init_ops = [initializer_op(t) for t in graph.initializer]
    tr = _translate.Translator(model, opset, types)
    predict_ops: list[OperatorDef] = []
    for i, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and constant_op(tr, i, node, init_ops):
            continue
        predict_ops += tr.node(i, node)
    if optimize:
        from asyncnet.interop.onnx._optimize import fuse_matmul_add

        params = {t.name: (tuple(t.dims), onnx.helper.tensor_dtype_to_np_dtype(t.data_type)) for t in graph.initializer
                  if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE) and t.name not in {v.name for v in graph.input}}
        predict_ops = fuse_matmul_add(predict_ops, params, {v.name for v in graph.output})
    known = [v.name for v in inputs] + [op.outputs[0] for op in init_ops]
    init_net = NetDef(f"{name}_init", ops=init_ops, external_outputs=[op.outputs[0] for op in init_ops])
    predict_net = NetDef(name, ops=predict_ops, type=net_type, num_workers=num_workers, external_inputs=known,
                         external_outputs=[v.name for v in graph.output])
    _ = onnx  # imported first so that a missing onnx fails here, with its own message
    return OnnxModel(init_net, predict_net, inputs, outputs, opset, dict(tr.counts))


def _check(model: Any) -> None:
    import onnx.checker

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxImportError(f"onnx.checker refuses the model: {first}", _checker_where(model, str(e))) from None


def _checker_where(model: Any, text: str) -> str:
    for i, node in enumerate(model.graph.node):
        if (node.name and f"'{node.name}'" in text) or f"OpType: {node.op_type}" in text:
            return node_where(i, node)
    return "graph"


def infer_types(model: Any) -> dict[str, Any]:
    """Every value's ``ValueInfoProto`` that onnx's shape inference finds (empty where it fails)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is best effort: types only speed translation up
        inferred = model
    g = inferred.graph
    types = {t.name: onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.initializer}
    types.update({v.name: v for v in (*g.input, *g.value_info, *g.output)})
    return types


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
    raw = base64.b64encode(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode("ascii")
    return OperatorDef("ONNXTensorFill", [], [name], {"raw": raw, "dtype": a.dtype.name, "shape": list(a.shape)})


def constant_op(tr: Any, i: int, node: Any, init_ops: list[OperatorDef]) -> bool:
    """Evaluate a Constant node at import and put its value in the init net (True when done)."""
    if len(node.output) != 1 or any(a.type == a.GRAPH for a in node.attribute) or any(a.ref_attr_name for a in node.attribute):
        return False
    from onnx.reference import ReferenceEvaluator

    try:
        value = ReferenceEvaluator(tr.one_node_model(node, [], list(node.output))).run(None, {})[0]
    except Exception as e:  # noqa: BLE001 - a Constant the reference refuses is a bad node
        raise OnnxImportError(f"cannot evaluate the constant: {type(e).__name__}: {e}", node_where(i, node, "attribute")) from None
    if not isinstance(value, np.ndarray) and not np.isscalar(value):
        return False
    value = np.asarray(value)
    init_ops.append(tensor_fill(node.output[0], value))
    if value.size <= 64 and value.dtype.kind in "biuf":
        tr.constants[node.output[0]] = value
    return True


def reference_op(node: Any, inputs: list[str], outputs: list[str], opsets: Mapping[str, int], functions: Iterable[Any],
                 value_infos: Mapping[str, Any] | None = None) -> OperatorDef:
    """The ``ONNXReference`` op running ``node`` (inputs: the node's and its subgraphs' outer-scope names)."""
    import onnx.helper

    infos = value_infos or {}
    g_inputs = [_bare_info(infos.get(n), n) for n in inputs]
    g_outputs = [_bare_info(None, n) for n in outputs]
    graph = onnx.helper.make_graph([node], "one_node", g_inputs, g_outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()],
                                   functions=list(functions))
    model.ir_version = max(model.ir_version, 8)
    text = base64.b64encode(model.SerializeToString()).decode("ascii")
    return OperatorDef("ONNXReference", list(inputs), list(outputs), {"model": text, "onnx_op": node.op_type}, name=node.name)


def _bare_info(info: Any, name: str) -> Any:
    import onnx

    v = onnx.ValueInfoProto()
    if info is not None:
        v.CopyFrom(info)
    v.name = name
    return v


def check_feeds(specs: list[ValueSpec], feeds: Mapping[str, Any]) -> None:
    """Names, dtypes, ranks and fixed dims of ``feeds`` against the graph inputs."""
    names = [s.name for s in specs]
    for k in feeds:
        if k not in names:
            near = near_names(k, names)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise OnnxInputError(f"input {k!r} is not a graph input of the model; expected some of {names}{hint}")
    for s in specs:
        if s.name not in feeds:
            raise OnnxInputError(f"missing graph input {s.describe()}")
        _check_one(s, feeds[s.name])


def _check_one(s: ValueSpec, x: Any) -> None:
    if s.kind != "tensor":
        return
    shape = tuple(x.shape) if hasattr(x, "shape") else None
    if shape is None:
        raise OnnxInputError(f"input {s.name!r}: expected a tensor ({s.describe()}), got {type(x).__name__}")
    dtype = x.dtype if isinstance(x, np.ndarray) else _torch_np_dtype(x)
    if s.dtype is not None and dtype is not None and np.dtype(dtype) != s.dtype:
        raise OnnxInputError(f"input {s.name!r}: expected dtype {s.dtype}, got {np.dtype(dtype)} ({s.describe()})")
    if s.shape is not None:
        if len(shape) != len(s.shape):
            raise OnnxInputError(f"input {s.name!r}: expected rank {len(s.shape)} ({s.describe()}), got shape {shape}")
        for i, (want, got) in enumerate(zip(s.shape, shape)):
            if isinstance(want, int) and want > 0 and want != got:
                raise OnnxInputError(f"input {s.name!r}: expected dim {i} = {want} ({s.describe()}), got shape {shape}")


def _torch_np_dtype(x: Any) -> Any:
    try:
        import torch

        return torch.empty(0, dtype=x.dtype).numpy().dtype
    except (ImportError, TypeError, RuntimeError):
        return None
