"""ONNX model -> an init net (the initializers and constants) and a predict net of asyncnet ops.

The importer reads the model (a path, bytes or a ``ModelProto``), checks it (protobuf, opset
range, ``onnx.checker``, every op known), infers the types of its values, then translates node by
node: an op with an asyncnet kernel of the same semantics (:mod:`._translate`) becomes that op,
any other op becomes one ``ONNXReference`` op that runs the node with onnx's reference evaluator.
Every failure is an :class:`OnnxImportError` naming the node (index, name, op type) and the field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.errors import near_names
from asyncnet.interop.onnx._model import (  # noqa: F401 - the model types are importable from here too
    OnnxImportError,
    OnnxInputError,
    ValueSpec,
    constant_op,
    initializer_op,
    node_where,
    reference_op,
    tensor_fill,
    value_spec,
)

MIN_OPSET = 1  # the reference evaluator runs every opset; the native translators target 7 and up


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
        raise OnnxImportError(
            f"not a valid ONNX model (malformed or truncated protobuf, {len(data)} bytes): {type(e).__name__}: {e}",
            where,
        ) from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise OnnxImportError(
            f"not an ONNX model: no graph ({len(data)} bytes; truncated or not an .onnx file?)", where
        )
    if isinstance(source, (str, os.PathLike)) and any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer
    ):
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


def load(
    source: Any,
    *,
    net_type: str = "simple",
    num_workers: int | None = None,
    name: str = "onnx",
    check: bool = True,
    optimize: bool = True,
) -> OnnxModel:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) as asyncnet nets.

    ``net_type`` and ``num_workers`` are the predict net's executor; ``check`` runs
    ``onnx.checker`` first; ``optimize`` folds inference batch norms into the convolutions
    before them, computes shape arithmetic at import and fuses MatMul + Add pairs
    (:mod:`._optimize`). Errors are :class:`OnnxImportError` naming the node and field::

        >>> import asyncnet as an
        >>> an.onnx.load(b"not a model")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        asyncnet.interop.onnx.OnnxImportError: ...not a valid ONNX model...
    """
    import onnx

    from asyncnet.interop.onnx import _translate

    model = read_model(source)
    opset = default_opset(model)
    if check:
        _check(model)
    if optimize:
        from asyncnet.interop.onnx._optimize import (
            drop_zero_states,
            fold_batch_norm,
            fold_shapes,
        )

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
        from asyncnet.interop.onnx._optimize import (
            fuse_concat_relu,
            fuse_conv,
            fuse_encoder_layers,
            fuse_layout_chains,
            fuse_matmul_add,
            last_step_from_state,
            torch_gate_order,
        )

        params = {
            t.name: (tuple(t.dims), onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
            for t in graph.initializer
            if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
            and t.name not in {v.name for v in graph.input}
        }
        predict_ops = fuse_matmul_add(predict_ops, params, {v.name for v in graph.output})
        predict_ops, init_ops = torch_gate_order(predict_ops, init_ops, {v.name for v in graph.output})
        predict_ops = fuse_layout_chains(predict_ops, {v.name for v in graph.output})
        predict_ops = last_step_from_state(predict_ops, tr.shape, {v.name for v in graph.output})
        predict_ops = fuse_conv(predict_ops, tr.shape, {v.name for v in graph.output})
        predict_ops = fuse_concat_relu(predict_ops, {v.name for v in graph.output})
        predict_ops, init_ops = fuse_encoder_layers(predict_ops, init_ops, tr.shape, {v.name for v in graph.output})
    known = [v.name for v in inputs] + [op.outputs[0] for op in init_ops]
    init_net = NetDef(f"{name}_init", ops=init_ops, external_outputs=[op.outputs[0] for op in init_ops])
    predict_net = NetDef(
        name,
        ops=predict_ops,
        type=net_type,
        num_workers=num_workers,
        external_inputs=known,
        external_outputs=[v.name for v in graph.output],
    )
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
