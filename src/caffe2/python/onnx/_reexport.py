"""ONNX exporters for the ops asyncnet's ONNX importer emits (``ONNXGemm``, ``ONNXFlatten``, ...,
and ``ONNXReference``, which holds the ONNX node itself), so that a net converted from ONNX
(:mod:`caffe2.python.onnx.backend`) goes back to ONNX (:mod:`caffe2.python.onnx.frontend`).

They are added to asyncnet's exporter registry (``asyncnet.interop.onnx._export.EXPORTERS``)
when this module is imported; each writes the ONNX node the op was translated from, at the
export's opset (17). An ``ONNXReference`` node is written as it was read when its operator's
definition is the same at opset 17 as at the model's opset; otherwise it is refused.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.interop.onnx._export import EXPORTERS, OPSET, exporter

__all__: list[str] = []

_SAME = {  # asyncnet op -> the ONNX op of the same inputs and outputs, attributes copied by name
    "ONNXIdentity": ("Identity", ()),
    "ONNXExpand": ("Expand", ()),
    "ONNXWhere": ("Where", ()),
    "ONNXErf": ("Erf", ()),
    "ONNXPow": ("Pow", ()),
    "ONNXSlice": ("Slice", ()),
    "ONNXFlatten": ("Flatten", ("axis",)),
    "ONNXConcat": ("Concat", ("axis",)),
    "ONNXBatchNorm": ("BatchNormalization", ("epsilon",)),
    "ONNXLayerNorm": ("LayerNormalization", ("axis", "epsilon")),
    "ONNXCast": ("Cast", ("to",)),
}


def _attrs(op: OperatorDef, names: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for k in names:
        if k in op.args:
            v = op.args[k]
            out[k] = int(v) if isinstance(v, bool) else v
    return out


def _same(g: Any, op: OperatorDef, needed: set) -> None:
    onnx_type, names = _SAME[op.type]
    g.node(onnx_type, op.inputs, op.outputs, **_attrs(op, names))


def _const_input(g: Any, op: OperatorDef, arg: str) -> list[str]:
    """The op's inputs, with the constant the importer folded into ``arg`` (if it did) as input 1."""
    if len(op.inputs) > 1 or op.args.get(arg) is None:
        return list(op.inputs)
    return [op.inputs[0], g.const(op.args[arg])]


def _reshape(g: Any, op: OperatorDef, needed: set) -> None:
    g.node("Reshape", _const_input(g, op, "shape"), op.outputs, **_attrs(op, ("allowzero",)))


def _gather(g: Any, op: OperatorDef, needed: set) -> None:
    g.node("Gather", _const_input(g, op, "index"), op.outputs, **_attrs(op, ("axis",)))


def _layout(g: Any, op: OperatorDef, needed: set) -> None:
    """ONNXLayout's chain of layout ops, one ONNX node each."""
    import json

    steps = [json.loads(text) for text in op.args["steps"]]
    current = op.inputs[0]
    for i, step in enumerate(steps):
        out = op.outputs[0] if i == len(steps) - 1 else g.tmp(f"{op.outputs[0]}_layout{i}")
        args = {k: v for k, v in step.items() if k != "op"}
        EXPORTERS[step["op"]](g, OperatorDef(step["op"], [current], [out], args), needed)
        current = out


def _gemm(g: Any, op: OperatorDef, needed: set) -> None:
    g.node("Gemm", op.inputs, op.outputs, **_attrs(op, ("alpha", "beta", "transA", "transB")))


def _matmul_add(g: Any, op: OperatorDef, needed: set) -> None:
    product = g.tmp(op.outputs[0] + "_matmul")
    g.node("MatMul", op.inputs[:2], [product])
    g.node("Add", [product, op.inputs[2]], op.outputs)


def _transpose(g: Any, op: OperatorDef, needed: set) -> None:
    perm = list(op.args.get("perm", []))
    g.node("Transpose", op.inputs, op.outputs, **({"perm": perm} if perm else {}))


def _softmax(g: Any, op: OperatorDef, needed: set) -> None:
    axis = int(op.args.get("axis", -1))
    if op.args.get("legacy", False) and axis not in (-1,):
        raise ValueError("a Softmax of opset < 13 over axis != -1 (flattening) has no opset-17 form here")
    g.node("LogSoftmax" if op.args.get("log", False) else "Softmax", op.inputs, op.outputs, axis=axis)


def _global_pool(g: Any, op: OperatorDef, needed: set) -> None:
    kind = "GlobalAveragePool" if op.args.get("mode", "avg") == "avg" else "GlobalMaxPool"
    g.node(kind, op.inputs, op.outputs)


def _clip(g: Any, op: OperatorDef, needed: set) -> None:
    lo, hi = op.args.get("min"), op.args.get("max")
    bounds = [g.const(lo, np.float32) if lo is not None else "", g.const(hi, np.float32) if hi is not None else ""]
    while bounds and not bounds[-1]:
        bounds.pop()
    g.node("Clip", [op.inputs[0], *bounds], op.outputs)


def _shape(g: Any, op: OperatorDef, needed: set) -> None:
    attrs = {"start": int(op.args.get("start", 0))}
    end = int(op.args.get("end", 2**62))
    if end < 2**62:
        attrs["end"] = end
    g.node("Shape", op.inputs, op.outputs, **attrs)


def _axes_op(g: Any, op: OperatorDef, needed: set) -> None:
    kind = op.type[len("ONNX") :]
    axes = op.args.get("axes", [])
    inputs = list(op.inputs) if len(op.inputs) > 1 or not axes else [op.inputs[0], g.const(axes)]
    g.node(kind, inputs, op.outputs)


def _reduce(g: Any, op: OperatorDef, needed: set) -> None:
    kind = "Reduce" + op.args.get("fn", "mean").capitalize()
    keep = int(op.args.get("keepdims", True))
    axes = list(op.args.get("axes", []))
    if kind == "ReduceSum":  # an input from opset 13 on
        inputs = list(op.inputs) if len(op.inputs) > 1 or not axes else [op.inputs[0], g.const(axes)]
        g.node(kind, inputs, op.outputs, keepdims=keep)
    else:  # an attribute until opset 18
        g.node(kind, op.inputs[:1], op.outputs, keepdims=keep, **({"axes": axes} if axes else {}))


def _fn(g: Any, op: OperatorDef, needed: set) -> None:
    g.node(op.args["fn"], op.inputs, op.outputs)


def _constant_of_shape(g: Any, op: OperatorDef, needed: set) -> None:
    from onnx import helper, numpy_helper

    dtype = helper.tensor_dtype_to_np_dtype(int(op.args.get("to", 1)))
    value = numpy_helper.from_array(np.array([op.args.get("value", 0.0)], dtype=dtype))
    g.node("ConstantOfShape", op.inputs, op.outputs, value=value)


def _rnn(g: Any, op: OperatorDef, needed: set) -> None:
    """ONNXLSTM / ONNXGRU back to the ONNX LSTM / GRU node: W, R and B are still in ONNX's gate order;
    an absent ``sequence_lens`` and the outputs ``produce`` leaves out are empty names."""
    kind = op.type[len("ONNX") :]
    ins = list(op.inputs)
    if op.args.get("gate_order", "onnx") == "torch":  # the importer reordered W, R and B's gate blocks
        ins[1:4] = _onnx_gate_order(g, op, ins[1:4], {"LSTM": 4, "GRU": 3}[kind])
    inputs = ins[:4] if len(ins) <= 4 else [*ins[:4], "", *ins[4:]]  # input 4 is sequence_lens
    produce = list(op.args.get("produce", [1, 1]))
    got = iter(op.outputs)
    outputs = [next(got) if p else "" for p in produce]
    while outputs and not outputs[-1]:
        outputs.pop()
    attrs = {"hidden_size": int(op.args["hidden_size"]), "direction": op.args.get("direction", "forward")}
    attrs["layout"] = int(op.args.get("layout", 0))
    if kind == "GRU":
        attrs["linear_before_reset"] = int(bool(op.args.get("linear_before_reset", False)))
    g.node(kind, inputs, outputs, **attrs)


def _onnx_gate_order(g: Any, op: OperatorDef, weights: list[str], n_gates: int) -> list[str]:
    """W, R (and B) with their gate blocks taken back from torch's order to ONNX's: a parameter
    becomes a reordered initializer (the importer reorders only weights the RNN alone reads), any
    other blob goes through a Gather on axis 1."""
    from asyncnet.ops.onnx_rnn import gate_permutation

    hidden = int(op.args["hidden_size"])
    idx = gate_permutation(n_gates, hidden, "onnx")
    perms = [idx, idx, np.concatenate([idx, n_gates * hidden + idx])]
    out = []
    for name, perm in zip(weights, perms):
        if not name:
            out.append(name)
            continue
        back = g.tmp(f"{name}_onnx_gates")
        if name in g.inits:
            g.inits[back] = np.ascontiguousarray(np.asarray(g.inits[name])[:, perm])
        else:
            g.node("Gather", [name, g.const(perm)], [back], axis=1)
        out.append(back)
    return out


def _reference(g: Any, op: OperatorDef, needed: set) -> None:
    import onnx
    import onnx.defs

    model = onnx.load_model_from_string(base64.b64decode(op.args["model"]))
    node = model.graph.node[0]
    if node.domain not in ("", "ai.onnx"):
        raise ValueError(f"the node is in domain {node.domain!r}; only the default domain is exported")
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    then = onnx.defs.get_schema(node.op_type, version).since_version
    now = onnx.defs.get_schema(node.op_type, OPSET).since_version
    if then != now:
        raise ValueError(f"{node.op_type} changed between opset {version} (its model's) and {OPSET} (the export's)")
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = f"{node.op_type}_{len(g.nodes)}"
    g.nodes.append(out)


def _register() -> None:
    table = {
        **dict.fromkeys(_SAME, _same),
        "ONNXGemm": _gemm,
        "ONNXReshape": _reshape,
        "ONNXGather": _gather,
        "ONNXLayout": _layout,
        "ONNXBinary": _fn,
        "ONNXMatMulAdd": _matmul_add,
        "ONNXTranspose": _transpose,
        "ONNXSoftmax": _softmax,
        "ONNXGlobalPool": _global_pool,
        "ONNXClip": _clip,
        "ONNXShape": _shape,
        "ONNXUnsqueeze": _axes_op,
        "ONNXSqueeze": _axes_op,
        "ONNXReduce": _reduce,
        "ONNXUnary": _fn,
        "ONNXCompare": _fn,
        "ONNXConstantOfShape": _constant_of_shape,
        "ONNXReference": _reference,
        "ONNXLSTM": _rnn,
        "ONNXGRU": _rnn,
    }
    for op_type, fn in table.items():
        if op_type not in EXPORTERS:
            exporter(op_type)(fn)


_register()
