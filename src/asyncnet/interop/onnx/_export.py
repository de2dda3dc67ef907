"""asyncnet nets -> an ONNX model (opset 17), for inference.

``export`` takes a :class:`~asyncnet.model.ModelHelper` (its eval net) or an ``(init_net,
predict_net)`` pair, the graph inputs (example arrays, or ``(shape, dtype)``), the outputs to
keep, and the parameter values (a workspace, e.g. after training; else the init net is run).
Only the ops the outputs need are exported; loss and metric ops are dropped, and
``SoftmaxWithLoss`` exports its softmax. The model is checked with ``onnx.checker`` (full check).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.errors import NetDefinitionError

OPSET = 17
INT64_MAX = 2**63 - 1


class OnnxExportError(NetDefinitionError):
    """A net asyncnet cannot export to ONNX (an op with no ONNX mapping, a missing value)."""


class _Graph:
    """The ONNX graph being built: nodes, initializers, fresh names."""

    def __init__(self, values: Mapping[str, np.ndarray]):
        self.nodes: list[Any] = []
        self.inits: dict[str, np.ndarray] = {}
        self.values = values
        self.n = 0
        self.zero_states: set = set()

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> None:
        import onnx.helper

        self.nodes.append(
            onnx.helper.make_node(op_type, list(inputs), list(outputs), name=f"{op_type}_{len(self.nodes)}", **attrs)
        )

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        self.n += 1
        name = f"_const_{self.n}"
        self.inits[name] = np.asarray(value, dtype=dtype)
        return name

    def tmp(self, base: str) -> str:
        self.n += 1
        return f"{base}__{self.n}"


Export = Callable[[_Graph, OperatorDef, set], None]
EXPORTERS: dict[str, Export] = {}


def exporter(*op_types: str) -> Callable[[Export], Export]:
    def deco(fn: Export) -> Export:
        for t in op_types:
            EXPORTERS[t] = fn
        return fn

    return deco


@exporter("Relu", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div")
def _same(g: _Graph, op: OperatorDef, needed: set) -> None:
    if op.args.get("broadcast"):
        raise ValueError("Caffe2's legacy broadcast=1 has no ONNX equivalent")
    g.node(op.type, op.inputs, op.outputs[:1])


@exporter("FC")
def _fc(g: _Graph, op: OperatorDef, needed: set) -> None:
    if op.args.get("axis_w", 1) != 1:
        raise ValueError("FC with axis_w != 1")
    x = g.tmp(op.inputs[0] + "_2d")
    g.node("Flatten", [op.inputs[0]], [x], axis=int(op.args.get("axis", 1)))
    g.node("Gemm", [x, op.inputs[1], op.inputs[2]], op.outputs[:1], transB=1)


def _window(op: OperatorDef, kernel: tuple[int, int] | None) -> dict[str, Any]:
    from asyncnet.ops.conv import geometry

    if op.args.get("legacy_pad", 0) not in (0, 1):
        raise ValueError("legacy_pad SAME or CAFFE_LEGACY_POOLING (pads that depend on the input size)")
    geo = geometry(dict(op.args), (1 << 20, 1 << 20), kernel)
    return {"kernel_shape": list(geo.kernel), "strides": list(geo.stride), "pads": list(geo.pads)}, geo


@exporter("Conv")
def _conv(g: _Graph, op: OperatorDef, needed: set) -> None:
    if op.args.get("order", "NCHW") != "NCHW":
        raise ValueError("only NCHW convolutions export")
    w = g.values[op.inputs[1]]
    attrs, geo = _window(op, tuple(w.shape[2:]))
    g.node("Conv", op.inputs, op.outputs[:1], dilations=list(geo.dilation), group=int(op.args.get("group", 1)), **attrs)


@exporter("ONNXConv")
def _onnx_conv(g: _Graph, op: OperatorDef, needed: set) -> None:
    """Conv, then the residual Add and the Relu or Clip the importer fused into it (one node each)."""
    a = op.args
    attrs = {
        "kernel_shape": list(a["kernels"]),
        "strides": list(a.get("strides", [1, 1])),
        "pads": list(a.get("pads", [0, 0, 0, 0])),
        "dilations": list(a.get("dilations", [1, 1])),
        "group": int(a.get("group", 1)),
    }
    n_conv = 2 + bool(a.get("bias", True))
    act, residual = a.get("activation", ""), bool(a.get("residual", False))
    y = op.outputs[0]
    steps = [s for s, on in (("conv", True), ("add", residual), ("act", bool(act))) if on]
    names = {s: (y if s == steps[-1] else g.tmp(f"{y}_{s}")) for s in steps}
    g.node("Conv", op.inputs[:n_conv], [names["conv"]], **attrs)
    last = names["conv"]
    if residual:
        g.node("Add", [last, op.inputs[-1]], [names["add"]])
        last = names["add"]
    if act == "Relu":
        g.node("Relu", [last], [names["act"]])
    elif act == "Clip":
        w = g.values.get(op.inputs[1])
        dtype = w.dtype if isinstance(w, np.ndarray) else np.float32
        bounds = [g.const(a[k], dtype) if a.get(k) is not None else "" for k in ("min", "max")]
        while bounds and not bounds[-1]:
            bounds.pop()
        g.node("Clip", [last, *bounds], [names["act"]])


@exporter("ONNXMatMul")
def _onnx_matmul(g: _Graph, op: OperatorDef, needed: set) -> None:
    g.node("MatMul", op.inputs, op.outputs[:1])


@exporter("ONNXMaxPool")
def _onnx_max_pool(g: _Graph, op: OperatorDef, needed: set) -> None:
    a = op.args
    attrs = {"kernel_shape": list(a["kernels"]), "strides": list(a.get("strides", [1, 1]))}
    g.node("MaxPool", op.inputs, op.outputs[:1], pads=list(a.get("pads", [0, 0, 0, 0])), **attrs)


@exporter("MaxPool", "AveragePool")
def _pool(g: _Graph, op: OperatorDef, needed: set) -> None:
    if op.args.get("order", "NCHW") != "NCHW":
        raise ValueError("only NCHW pooling exports")
    if op.args.get("global_pooling"):
        g.node("Global" + op.type, op.inputs, op.outputs[:1])
        return
    attrs, _ = _window(op, None)
    if op.type == "AveragePool":
        attrs["count_include_pad"] = int(bool(op.args.get("count_include_pad", False)))
    g.node(op.type, op.inputs, op.outputs[:1], **attrs)


@exporter("Flatten")
def _flatten(g: _Graph, op: OperatorDef, needed: set) -> None:
    g.node("Flatten", op.inputs, op.outputs[:1], axis=int(op.args.get("axis", 1)))


@exporter("Reshape")
def _reshape(g: _Graph, op: OperatorDef, needed: set) -> None:
    if len(op.outputs) > 1 and op.outputs[1] in needed:
        raise ValueError("Reshape's old_shape output has no ONNX equivalent")
    shape = op.inputs[1] if len(op.inputs) > 1 else g.const(op.args["shape"])
    g.node("Reshape", [op.inputs[0], shape], op.outputs[:1])


@exporter("Concat")
def _concat(g: _Graph, op: OperatorDef, needed: set) -> None:
    if len(op.outputs) > 1 and op.outputs[1] in needed:
        raise ValueError("Concat's split_info output has no ONNX equivalent")
    axis = int(op.args.get("axis", 1))
    inputs = list(op.inputs)
    if op.args.get("add_axis"):
        inputs = []
        for x in op.inputs:
            u = g.tmp(x + "_unsq")
            g.node("Unsqueeze", [x, g.const([axis])], [u])
            inputs.append(u)
    g.node("Concat", inputs, op.outputs[:1], axis=axis)


@exporter("BatchMatMul")
def _batch_matmul(g: _Graph, op: OperatorDef, needed: set) -> None:
    ins = []
    for x, flag in zip(op.inputs, ("trans_a", "trans_b")):
        if op.args.get(flag):
            t = g.tmp(x + "_T")
            rank = _rank(g, op, x)
            g.node("Transpose", [x], [t], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
            x = t
        ins.append(x)
    g.node("MatMul", ins, op.outputs[:1])


def _rank(g: _Graph, op: OperatorDef, name: str) -> int:
    rank = g.values.get("__rank__" + name)
    if rank is None:
        raise ValueError(f"the rank of {name!r} is unknown: pass example inputs so that shapes can be traced")
    return int(rank)


@exporter("Slice")
def _slice(g: _Graph, op: OperatorDef, needed: set) -> None:
    if len(op.inputs) > 1:
        raise ValueError("Slice with starts/ends inputs (only the argument form exports)")
    starts, ends = list(op.args["starts"]), list(op.args["ends"])
    onnx_ends = [INT64_MAX if e == -1 else (e + 1 if e < 0 else e) for e in ends]  # Caffe2's -1 is 'to the end'
    g.node(
        "Slice", [op.inputs[0], g.const(starts), g.const(onnx_ends), g.const(list(range(len(starts))))], op.outputs[:1]
    )


@exporter("Softmax")
def _softmax(g: _Graph, op: OperatorDef, needed: set) -> None:
    axis = int(op.args.get("axis", 1))
    if _rank(g, op, op.inputs[0]) != axis + 1:
        raise ValueError("Softmax over more than the last dim (Caffe2 flattens at axis)")
    g.node("Softmax", op.inputs, op.outputs[:1], axis=axis)


@exporter("SoftmaxWithLoss")
def _softmax_with_loss(g: _Graph, op: OperatorDef, needed: set) -> None:
    if op.outputs[1:] and op.outputs[1] in needed:
        raise ValueError("the loss output needs labels; export the softmax output only")
    if _rank(g, op, op.inputs[0]) != 2:
        raise ValueError("SoftmaxWithLoss exports for 2-D logits only")
    g.node("Softmax", op.inputs[:1], op.outputs[:1], axis=1)


@exporter("SparseLengthsSum")
def _sparse_lengths_sum(g: _Graph, op: OperatorDef, needed: set) -> None:
    """out[i] = sum of data[indices[s_i:e_i]]: a cumulative sum with a zero row, read at the segment
    ends and starts (Gather, CumSum, Sub: exact up to float rounding of the running sum)."""
    data, idx, lengths = op.inputs
    rows = g.tmp("rows")
    g.node("Gather", [data, idx], [rows], axis=0)
    cs = g.tmp("cumsum")
    g.node("CumSum", [rows, g.const(0)], [cs])
    zero_row = g.tmp("zero_row")
    g.node("Slice", [rows, g.const([0]), g.const([1]), g.const([0])], [zero_row + "_first"])
    g.node("Sub", [zero_row + "_first", zero_row + "_first"], [zero_row])
    padded = g.tmp("padded")
    g.node("Concat", [zero_row, cs], [padded], axis=0)
    len64 = g.tmp("len64")
    g.node("Cast", [lengths], [len64], to=7)
    ends = g.tmp("ends")
    g.node("CumSum", [len64, g.const(0)], [ends])
    starts = g.tmp("starts")
    g.node("Sub", [ends, len64], [starts])
    at_end, at_start = g.tmp("at_end"), g.tmp("at_start")
    g.node("Gather", [padded, ends], [at_end], axis=0)
    g.node("Gather", [padded, starts], [at_start], axis=0)
    g.node("Sub", [at_end, at_start], op.outputs[:1])


_USED_INPUTS = {"SoftmaxWithLoss": 1}  # the inputs an export reads (the loss's labels are not)


@exporter("Transpose")
def _transpose(g: _Graph, op: OperatorDef, needed: set) -> None:
    axes = op.args.get("axes") or list(range(_rank(g, op, op.inputs[0])))[::-1]
    g.node("Transpose", op.inputs[:1], op.outputs[:1], perm=[int(a) for a in axes])


_TORCH_TO_ONNX_GATES = (0, 3, 1, 2)  # torch's (i, f, g, o) blocks in ONNX's order (i, o, f, c)


@exporter("LSTM")
def _lstm(g: _Graph, op: OperatorDef, needed: set) -> None:
    """asyncnet's LSTM (torch.nn.LSTM's layout) as ONNX LSTM: the gate blocks reordered, the two
    biases concatenated, the direction axis squeezed out of Y, h_T and c_T."""
    if len(op.outputs) > 3 and op.outputs[3] in needed:
        raise ValueError("the LSTM's gradient cache output has no ONNX equivalent")
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = op.inputs
    for name in (w_ih, w_hh, b_ih, b_hh):
        if name not in g.values:
            raise ValueError(f"the LSTM's weight {name!r} is not a parameter")
    hidden = g.values[w_hh].shape[1]

    def gates(a: np.ndarray) -> np.ndarray:
        blocks = np.split(a, 4, axis=0)
        return np.concatenate([blocks[i] for i in _TORCH_TO_ONNX_GATES], axis=0)

    w = g.const(gates(g.values[w_ih])[None], g.values[w_ih].dtype)
    r = g.const(gates(g.values[w_hh])[None], g.values[w_hh].dtype)
    b = g.const(np.concatenate([gates(g.values[b_ih]), gates(g.values[b_hh])])[None], g.values[b_ih].dtype)
    states = []
    for s in (h0, c0):
        if s in g.zero_states:
            states.append("")
        else:
            u = g.tmp(s + "_dir")
            g.node("Unsqueeze", [s, g.const([0])], [u])
            states.append(u)
    y4, h3, c3 = g.tmp(op.outputs[0] + "_4d"), g.tmp(op.outputs[1] + "_dir"), g.tmp(op.outputs[2] + "_dir")
    g.node("LSTM", [x, w, r, b, "", *states], [y4, h3, c3], hidden_size=int(hidden))
    g.node("Squeeze", [y4, g.const([1])], op.outputs[:1])
    g.node("Squeeze", [h3, g.const([0])], op.outputs[1:2])
    g.node("Squeeze", [c3, g.const([0])], op.outputs[2:3])


def _zero_states(ops: list[OperatorDef]) -> set:
    """Blobs that a ConstantFill of value 0 makes from a shape (an LSTM's zero initial states)."""
    return {op.outputs[0] for op in ops if op.type == "ConstantFill" and float(op.args.get("value", 0.0)) == 0.0}


def _used(op: OperatorDef, zero: set) -> list[str]:
    if op.type == "LSTM":
        return [n for i, n in enumerate(op.inputs) if not (i in (1, 2) and n in zero)]
    return list(op.inputs[: _USED_INPUTS.get(op.type)])


_DROPPED = {"Accuracy", "AveragedLoss", "SigmoidCrossEntropyWithLogits", "LabelCrossEntropy", "SquaredL2Distance"}


def _needed_ops(ops: list[OperatorDef], outputs: list[str]) -> tuple[list[OperatorDef], set]:
    needed, kept = set(outputs), []
    zero = _zero_states(ops)
    for op in reversed(ops):
        if any(o in needed for o in op.outputs):
            kept.append(op)
            needed.update(_used(op, zero))
    return kept[::-1], needed


def _traced_ops(all_ops: list[OperatorDef], kept: list[OperatorDef]) -> list[OperatorDef]:
    """The exported ops and every op they read from (the zero initial states' fills and what
    their shapes come from included): what runs to trace the blobs' ranks."""
    needed = {i for op in kept for i in op.inputs}
    out = [op for op in kept]
    ids = {id(op) for op in kept}
    for op in reversed(all_ops):
        if id(op) not in ids and any(o in needed for o in op.outputs):
            ids.add(id(op))
            needed.update(op.inputs)
    return [op for op in all_ops if id(op) in ids] if out else []


def _nets(model: Any) -> tuple[NetDef, NetDef]:
    if isinstance(model, tuple) and len(model) == 2:
        init, pred = model
    elif hasattr(model, "eval_net") and hasattr(model, "init_net"):
        init, pred = model.init_net, model.eval_net()
    else:
        raise OnnxExportError(
            f"expected a ModelHelper or an (init_net, predict_net) pair, got {type(model).__name__}", "model"
        )
    as_def = lambda n: n if isinstance(n, NetDef) else n.to_def()
    return as_def(init), as_def(pred)


def _values(init: NetDef, pred: NetDef, workspace: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Parameter values (from ``workspace`` or by running the init net) and every blob's rank,
    traced by running the predict net on the example inputs in a scratch workspace."""
    from asyncnet.core.workspace import Workspace
    from asyncnet.tensor.namespace import to_numpy

    with Workspace() as ws:
        if workspace is None:
            ws.run_net_once(init)
        else:
            for name in workspace.blobs():
                ws.feed(name, to_numpy(workspace.fetch(name)))
        params = {n: np.asarray(to_numpy(ws.fetch(n))) for n in ws.blobs() if hasattr(ws.fetch(n), "shape")}
        for k, v in feeds.items():
            ws.feed(k, v)
        ops = [
            OperatorDef("Softmax", op.inputs[:1], op.outputs[:1], {"axis": 1}) if op.type == "SoftmaxWithLoss" else op
            for op in pred.ops
        ]  # the softmax without the labels the loss needs
        try:
            ws.run_net_once(NetDef(pred.name + "_trace", ops=ops))
        except Exception as e:  # noqa: BLE001 - the ops need inputs the export does not have (labels)
            raise OnnxExportError(f"cannot run the net on the example inputs to trace shapes: {e}", "inputs") from None
        ranks = {"__rank__" + n: np.ndim(ws.fetch(n)) for n in ws.blobs() if hasattr(ws.fetch(n), "shape")}
    return {**params, **ranks}


def _input_dims(name: str, v: np.ndarray, dynamic_batch: bool | Collection[str]) -> list[Any]:
    """An input's dims: dim 0 symbolic (``batch``, or ``<name>_len`` for an input not named in a
    collection ``dynamic_batch``, such as a flat id list), unless ``dynamic_batch`` is False."""
    if not v.ndim or dynamic_batch is False:
        return list(v.shape)
    first = "batch" if dynamic_batch is True or name in dynamic_batch else f"{name}_len"
    return [first, *v.shape[1:]]


def export(
    model: Any,
    path: str | os.PathLike[str] | None,
    inputs: Mapping[str, np.ndarray],
    outputs: Sequence[str] | None = None,
    workspace: Any = None,
    opset: int = OPSET,
    dynamic_batch: bool | Collection[str] = True,
) -> Any:
    """Export ``model`` (a ModelHelper or ``(init_net, predict_net)``) as an ONNX model; returns the
    ``ModelProto`` and writes it to ``path`` (when not None).

    ``inputs`` maps each graph input to an example array (its dtype and shape; the first dim is the
    symbolic ``batch`` when ``dynamic_batch`` is True; a collection of names: those inputs' first dim
    is ``batch``, the others' ``<name>_len``); ``outputs`` are the blobs to export (default: the
    predict net's external outputs, else the outputs of its last op); ``workspace`` holds the
    trained parameters (default: run the init net).

        >>> import numpy as np, asyncnet as an
        >>> from asyncnet.model.zoo import mlp
        >>> m = an.onnx.export(mlp(4, (8,), 3), None, {"data": np.zeros((2, 4), np.float32)}, ["softmax"])
        >>> [n.op_type for n in m.graph.node]
        ['Flatten', 'Gemm', 'Relu', 'Flatten', 'Gemm', 'Softmax']
    """
    import onnx
    import onnx.helper

    init, pred = _nets(model)
    outs = list(outputs or pred.external_outputs or (pred.ops[-1].outputs[:1] if pred.ops else []))
    feeds = {k: np.asarray(v) for k, v in inputs.items()}
    ops, needed = _needed_ops(
        [op for op in pred.ops if op.type not in _DROPPED or any(o in outs for o in op.outputs)], outs
    )
    values = _values(init, NetDef(pred.name, ops=_traced_ops(pred.ops, ops)), workspace, feeds)
    g = _Graph(values)
    g.zero_states = _zero_states(pred.ops)
    produced = set(feeds)
    for i, op in enumerate(ops):
        fn = EXPORTERS.get(op.type)
        if fn is None:
            raise OnnxExportError(
                f"op {op.type!r} has no ONNX export; exportable ops: {sorted(EXPORTERS)}",
                f"ops[{i}] ({op.type}{' ' + repr(op.name) if op.name else ''})",
            )
        for name in _used(op, g.zero_states):
            if name not in produced and name not in g.inits:
                if name not in values:
                    raise OnnxExportError(
                        f"input {name!r} is neither a graph input, an op output nor a parameter",
                        f"ops[{i}] ({op.type})",
                    )
                g.inits[name] = values[name]
        try:
            fn(g, op, needed)
        except (ValueError, KeyError) as e:
            raise OnnxExportError(
                str(e).strip("'\""), f"ops[{i}] ({op.type}{' ' + repr(op.name) if op.name else ''})"
            ) from None
        produced.update(op.outputs)
    g_inputs = [
        onnx.helper.make_tensor_value_info(
            k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), _input_dims(k, v, dynamic_batch)
        )
        for k, v in feeds.items()
    ]
    g_outputs = [onnx.helper.make_empty_tensor_value_info(o) for o in outs]
    from onnx import numpy_helper

    read = _read_names(g.nodes, outs)
    graph = onnx.helper.make_graph(
        g.nodes,
        pred.name or "asyncnet",
        g_inputs,
        g_outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in g.inits.items() if k in read],
    )
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)], producer_name="asyncnet")
    proto = onnx.shape_inference.infer_shapes(proto)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as e:
        raise OnnxExportError(f"onnx.checker refuses the exported model: {str(e).splitlines()[0]}", "model") from None
    if path is not None:
        onnx.save(proto, os.fspath(path))
    return proto


def _read_names(nodes: list[Any], outputs: Sequence[str]) -> set[str]:
    """The names the nodes (subgraphs included) read, and the graph's outputs: the initializers
    worth writing (an exporter may replace one, as a reordered copy, leaving the first unread)."""
    read = set(outputs)
    for node in nodes:
        read.update(node.input)
        for attr in node.attribute:
            if attr.HasField("g"):
                read.update(_read_names(list(attr.g.node), [o.name for o in attr.g.output]))
            for sub in attr.graphs:
                read.update(_read_names(list(sub.node), [o.name for o in sub.output]))
    return read


def export_trained(result: Any, dataset: Any, path: str | os.PathLike[str], rows: int = 8) -> Any:
    """Export a training run's model (a :class:`~asyncnet.train.api.TrainResult`) as ONNX: its
    inference net (inputs -> ``softmax`` or ``prob``) with the trained parameters, the first
    ``rows`` test examples of ``dataset`` giving the inputs' dtypes and shapes (an input whose
    length follows the number of examples gets the symbolic ``batch`` dim, another one, such as
    DLRM's flat id lists, a dim of its own). What
    ``asyncnet train --export-onnx FILE`` does after training; for example
    ``export_trained(an.train("mlp", ds, epochs=1), ds, "mlp.onnx")`` writes ``mlp.onnx``, whose
    output ``softmax`` onnxruntime computes as ``result.predict(x)`` does.
    """
    program = result.program
    names = program.inputs
    feeds = dataset.feeds(dataset.x_test[:rows], dataset.y_test[:rows])
    more = dataset.feeds(dataset.x_test[: rows + 1], dataset.y_test[: rows + 1])
    missing = [n for n in names if n not in feeds]
    if missing:
        raise OnnxExportError(f"the dataset gives no example for the model's inputs {missing}", "inputs")
    batched = [n for n in names if np.ndim(feeds[n]) and len(feeds[n]) == rows and len(more[n]) == rows + 1]
    ws = result.workspace()
    try:
        inputs = {n: np.ascontiguousarray(feeds[n]) for n in names}
        return export(
            (program.model.init_net, program.inference_net()),
            path,
            inputs,
            [program.scores],
            workspace=ws,
            dynamic_batch=batched,
        )
    finally:
        ws.close()
