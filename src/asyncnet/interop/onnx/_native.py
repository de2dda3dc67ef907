"""Native translators: ONNX nodes whose semantics an asyncnet op has exactly (see :mod:`._translate`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.interop.onnx._translate import FLOATS, Translator, attrs, native


def _io(node: Any) -> tuple[list[str], list[str]]:
    return [n for n in node.input], [n for n in node.output if n]


def _op(op_type: str, node: Any, inputs: list[str] | None = None, **args: Any) -> list[OperatorDef]:
    ins = [n for n in node.input if n] if inputs is None else inputs
    return [OperatorDef(op_type, ins, [n for n in node.output if n], args)]


def _no_unknown(node: Any, allowed: set[str]) -> bool:
    return all(a.name in allowed for a in node.attribute)


@native("Add", "Sub", "Mul", "Div")
def _binary(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """Elementwise arithmetic with numpy broadcasting (opset 7 on): ONNXBinary on floats; asyncnet's Add,
    Sub and Mul on the integer types torch has, which wrap as ONNX's do."""
    if tr.opset < 7 or node.attribute or tr.dtype(node.input[0]) != tr.dtype(node.input[1]):
        return None
    if tr.all_float(node.input):
        return _op("ONNXBinary", node, fn=node.op_type)  # numpy's broadcasting, no Caffe2 legacy checks
    ints = node.op_type != "Div" and _numeric(tr, node.input) and tr.dtype(node.input[0]).kind in "iu"
    if not ints:
        return None
    return _op(node.op_type, node)


@native("Relu", "Sigmoid", "Tanh")
def _activation(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input) or node.attribute:
        return None
    return _op(node.op_type, node)


@native("MatMul")
def _matmul(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """numpy.matmul semantics: ONNXMatMul."""
    if not tr.all_float(node.input):
        return None
    return _op("ONNXMatMul", node)


@native("Gemm")
def _gemm(tr: Translator, node: Any) -> list[OperatorDef] | None:
    a = attrs(node)
    if not tr.all_float(node.input) or not _no_unknown(node, {"alpha", "beta", "transA", "transB", "broadcast"}):
        return None
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    c = node.input[2] if len(node.input) > 2 and node.input[2] else None
    n_out = tr.shape(node.input[1])
    if (
        c
        and tb
        and not ta
        and alpha == 1.0
        and beta == 1.0
        and tr.rank(c) == 1
        and n_out is not None
        and tr.shape(c) == (n_out[0],)
        and isinstance(n_out[0], int)
        and tr.rank(node.input[0]) == 2
    ):
        return _op("FC", node)  # Y = X W^T + b: Caffe2's FC exactly
    if tr.opset < 7 and c:
        return None  # Gemm before opset 7 broadcast C only when told to
    return _op("ONNXGemm", node, alpha=alpha, beta=beta, transA=ta, transB=tb)


def _pads(a: dict[str, Any], spatial: int) -> list[int] | None:
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    pads = list(a.get("pads", [0] * 2 * spatial))
    return pads


@native("Conv")
def _conv(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """2-D convolutions with explicit pads: ONNXConv (NCHW, pads [t, l, b, r] as ONNX's; the importer
    fuses a following Relu, Clip or residual Add into it)."""
    a = attrs(node)
    w_shape = tr.shape(node.input[1])
    if (
        not tr.all_float(node.input)
        or tr.rank(node.input[0]) != 4
        or w_shape is None
        or len(w_shape) != 4
        or not all(isinstance(d, int) for d in w_shape[2:])
        or not _no_unknown(node, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    ):
        return None
    pads = _pads(a, 2)
    if pads is None or len(pads) != 4:
        return None
    if "kernel_shape" in a and list(a["kernel_shape"]) != list(w_shape[2:]):
        return None
    return _op(
        "ONNXConv",
        node,
        bias=len(node.input) > 2 and bool(node.input[2]),
        kernels=list(w_shape[2:]),
        strides=list(a.get("strides", [1, 1])),
        pads=pads,
        dilations=list(a.get("dilations", [1, 1])),
        group=int(a.get("group", 1)),
    )


@native("MaxPool", "AveragePool")
def _pool(tr: Translator, node: Any) -> list[OperatorDef] | None:
    a = attrs(node)
    if (
        not tr.all_float(node.input)
        or tr.rank(node.input[0]) != 4
        or len([o for o in node.output if o]) != 1
        or a.get("ceil_mode", 0)
        or a.get("storage_order", 0)
        or any(d != 1 for d in a.get("dilations", [1, 1]))
        or not _no_unknown(
            node,
            {
                "auto_pad",
                "kernel_shape",
                "pads",
                "strides",
                "count_include_pad",
                "ceil_mode",
                "storage_order",
                "dilations",
            },
        )
    ):
        return None
    pads = _pads(a, 2)
    if pads is None or len(pads) != 4 or len(a["kernel_shape"]) != 2:
        return None
    args: dict[str, Any] = {"kernels": list(a["kernel_shape"]), "strides": list(a.get("strides", [1, 1])), "pads": pads}
    if node.op_type == "AveragePool":
        args["count_include_pad"] = bool(a.get("count_include_pad", 0))
        return _op("AveragePool", node, **args)
    return _op("ONNXMaxPool", node, **args)


@native("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input):
        return None
    return _op("ONNXGlobalPool", node, mode="avg" if node.op_type == "GlobalAveragePool" else "max")


@native("BatchNormalization")
def _batch_norm(tr: Translator, node: Any) -> list[OperatorDef] | None:
    a = attrs(node)
    if (
        tr.opset < 9
        or len([o for o in node.output if o]) != 1
        or a.get("training_mode", 0)
        or not tr.all_float(node.input)
        or len({tr.dtype(n) for n in node.input}) != 1
        or not _no_unknown(node, {"epsilon", "momentum", "training_mode"})
    ):
        return None
    return _op("ONNXBatchNorm", node, epsilon=float(a.get("epsilon", 1e-5)))


@native("Flatten")
def _flatten(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    return _op("ONNXFlatten", node, axis=int(attrs(node).get("axis", 1)))


@native("Reshape")
def _reshape(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    if tr.opset < 5:
        return None
    allowzero = bool(attrs(node).get("allowzero", 0))
    target = tr.const(node.input[1])
    if target is not None and target.ndim == 1 and target.dtype.kind in "iu":  # resolved once, at import
        return _op("ONNXReshape", node, inputs=[node.input[0]], allowzero=allowzero, shape=_int_list(target))
    return _op("ONNXReshape", node, allowzero=allowzero)


def _int_list(v: np.ndarray) -> list[int]:
    return [int(x) for x in v.reshape(-1)]


@native("Transpose")
def _transpose(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    return _op("ONNXTranspose", node, perm=[int(p) for p in attrs(node).get("perm", [])])


@native("Concat")
def _concat(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    a = attrs(node)
    if "axis" not in a or tr.dtype(node.input[0]) is None:
        return None
    return _op("ONNXConcat", node, axis=int(a["axis"]))


@native("Identity")
def _identity(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    if tr.dtype(node.input[0]) is None:
        return None  # sequences and optionals: the reference op
    return _op("ONNXIdentity", node)


@native("Dropout")
def _dropout(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """Inference Dropout (no training_mode input, one output) is the identity."""
    if not _torchable(tr, node.input[0]):
        return None
    if (
        len([o for o in node.output if o]) != 1
        or len([n for n in node.input if n]) > 2
        or tr.dtype(node.input[0]) is None
    ):
        return None
    if len(node.input) > 2 and node.input[2]:
        return None
    if tr.opset < 7:
        return None
    return _op("ONNXIdentity", node, inputs=[node.input[0]])


@native("Softmax", "LogSoftmax")
def _softmax(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input):
        return None
    legacy = tr.opset < 13
    axis = int(attrs(node).get("axis", 1 if legacy else -1))
    return _op("ONNXSoftmax", node, axis=axis, legacy=legacy, log=node.op_type == "LogSoftmax")


@native("Gather")
def _gather(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    if tr.dtype(node.input[0]) is None or tr.dtype(node.input[1]) is None:
        return None
    axis = int(attrs(node).get("axis", 0))
    idx = tr.const(node.input[1])
    if idx is not None and idx.ndim == 0 and idx.dtype.kind in "iu":  # one constant index: an argument
        return _op("ONNXGather", node, inputs=[node.input[0]], axis=axis, index=int(idx))
    return _op("ONNXGather", node, axis=axis)


@native("Expand")
def _expand(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    if tr.dtype(node.input[0]) is None:
        return None
    return _op("ONNXExpand", node)


@native("ConstantOfShape")
def _constant_of_shape(tr: Translator, node: Any) -> list[OperatorDef] | None:
    from onnx import numpy_helper

    from asyncnet.ops.onnx_nn import _ONNX_TO_NP

    value = next((a.t for a in node.attribute if a.name == "value"), None)
    if value is None:
        return _op("ONNXConstantOfShape", node, value=0.0, to=1)
    v = numpy_helper.to_array(value).reshape(-1)
    if value.data_type not in _ONNX_TO_NP or v.size != 1 or float(v[0]) != v[0]:
        return None
    return _op("ONNXConstantOfShape", node, value=float(v[0]), to=int(value.data_type))


@native("Where")
def _where(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if tr.dtype(node.input[1]) is None or tr.dtype(node.input[1]).kind not in "biuf":
        return None
    return _op("ONNXWhere", node)


@native("Erf")
def _erf(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input):
        return None
    return _op("ONNXErf", node)


@native("Gelu")
def _gelu(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input):
        return None
    approx = attrs(node).get("approximate", b"none")
    return _op("ONNXGelu", node, approximate=approx.decode() if isinstance(approx, bytes) else str(approx))


@native("LayerNormalization")
def _layer_norm(tr: Translator, node: Any) -> list[OperatorDef] | None:
    a = attrs(node)
    if (
        len([o for o in node.output if o]) != 1
        or not tr.all_float([n for n in node.input if n])
        or len({tr.dtype(n) for n in node.input if n}) != 1
        or a.get("stash_type", 1) != 1
        and tr.dtype(node.input[0]) != FLOATS[1]
    ):
        return None
    return _op("ONNXLayerNorm", node, axis=int(a.get("axis", -1)), epsilon=float(a.get("epsilon", 1e-5)))


@native("Clip")
def _clip(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """Clip with constant bounds (opset 11 on: inputs; before: attributes) on floats."""
    if not tr.all_float(node.input[:1]):
        return None
    if tr.opset < 11:
        a = attrs(node)
        lo, hi = a.get("min"), a.get("max")
    else:
        bounds = []
        for k in (1, 2):
            name = node.input[k] if len(node.input) > k else ""
            v = tr.const(name) if name else None
            if name and (v is None or v.size != 1):
                return None
            bounds.append(None if v is None else float(v.reshape(())))
        lo, hi = bounds
    args: dict[str, Any] = {}
    if lo is not None:
        args["min"] = float(lo)
    if hi is not None:
        args["max"] = float(hi)
    return _op("ONNXClip", node, inputs=[node.input[0]], **args)


@native("LSTM", "GRU")
def _rnn(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """Default activations, no clip, no peepholes, no sequence_lens: ONNXLSTM / ONNXGRU."""
    a = attrs(node)
    allowed = {"hidden_size", "direction", "layout", "activations", "input_forget", "linear_before_reset"}
    ins = list(node.input) + [""] * (8 - len(node.input))
    n_state = 2 if node.op_type == "LSTM" else 1
    acts = [s.decode() if isinstance(s, bytes) else s for s in a.get("activations", [])]
    default_acts = ["Sigmoid", "Tanh", "Tanh"] if n_state == 2 else ["Sigmoid", "Tanh"]
    if (
        not _no_unknown(node, allowed)
        or not tr.all_float(ins[:3])
        or "hidden_size" not in a
        or a.get("input_forget", 0)
        or (acts and acts != default_acts * (len(acts) // len(default_acts)))
        or ins[4]
        or (n_state == 2 and ins[7])
    ):
        return None
    states = ins[5 : 5 + n_state]
    optional = [ins[3], *states]
    while optional and not optional[-1]:
        optional.pop()
    if any(not n for n in optional):
        return None  # a gap (no B but an initial state): positions would shift
    outs = list(node.output) + [""] * (n_state + 1 - len(node.output))
    produce = [1 if o else 0 for o in outs[: n_state + 1]]
    direction = a.get("direction", b"forward")
    args: dict[str, Any] = {
        "hidden_size": int(a["hidden_size"]),
        "layout": int(a.get("layout", 0)),
        "produce": produce,
        "direction": direction.decode() if isinstance(direction, bytes) else str(direction),
    }
    if node.op_type == "GRU":
        args["linear_before_reset"] = bool(a.get("linear_before_reset", 0))
    return [OperatorDef("ONNX" + node.op_type, [*ins[:3], *optional], [o for o in outs if o], args)]


def _graph(node: Any, name: str) -> Any:
    return next(a.g for a in node.attribute if a.name == name)


def _outs(g: Any) -> list[str]:
    return [v.name for v in g.output]


@native("If")
def _if(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """Both branches become asyncnet nets (ONNXIf runs one of them in a workspace of its own)."""
    base = node.name or f"if{tr.index}"
    then_net, then_outer = tr.subnet(_graph(node, "then_branch"), base + "_then")
    else_net, else_outer = tr.subnet(_graph(node, "else_branch"), base + "_else")
    outer = sorted(set(then_outer) | set(else_outer))
    return [
        OperatorDef(
            "ONNXIf",
            [node.input[0], *outer],
            list(node.output),
            {
                "then_net": then_net.to_json(None),
                "else_net": else_net.to_json(None),
                "outer": outer,
                "then_outputs": _outs(_graph(node, "then_branch")),
                "else_outputs": _outs(_graph(node, "else_branch")),
            },
        )
    ]


@native("Loop")
def _loop(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if any(not o for o in node.output):
        return None
    g = _graph(node, "body")
    body, outer = tr.subnet(g, (node.name or f"loop{tr.index}") + "_body")
    ins = list(node.input) + [""] * (2 - len(node.input))
    carried = ins[2:]
    if any(not n for n in carried):
        return None
    head = [n for n in ins[:2] if n]
    return [
        OperatorDef(
            "ONNXLoop",
            [*head, *carried, *outer],
            list(node.output),
            {
                "body": body.to_json(None),
                "body_inputs": [v.name for v in g.input],
                "body_outputs": _outs(g),
                "outer": outer,
                "has_trip_count": bool(ins[0]),
                "has_cond": bool(ins[1]),
                "num_carried": len(carried),
            },
        )
    ]


@native("Scan")
def _scan(tr: Translator, node: Any) -> list[OperatorDef] | None:
    a = attrs(node)
    batched = tr.opset < 9  # Scan-8: sequence_lens first, a batch axis
    inputs = list(node.input)
    has_lens = batched and bool(inputs and inputs[0])
    if batched:
        inputs = ([inputs[0]] if has_lens else []) + inputs[1:]
    if any(not n for n in inputs) or any(not o for o in node.output):
        return None
    g = _graph(node, "body")
    body, outer = tr.subnet(g, (node.name or f"scan{tr.index}") + "_body")
    args: dict[str, Any] = {
        "body": body.to_json(None),
        "body_inputs": [v.name for v in g.input],
        "body_outputs": _outs(g),
        "outer": outer,
        "num_scan_inputs": int(a["num_scan_inputs"]),
        "num_inputs": len(inputs),
        "batched": batched,
        "has_sequence_lens": has_lens,
    }
    names = {"directions": "scan_input_directions"} if batched else {}
    for k in ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions", "directions"):
        if k in a:
            args[names.get(k, k)] = [int(v) for v in a[k]]
    return [OperatorDef("ONNXScan", [*inputs, *outer], list(node.output), args)]


@native("Optional")
def _optional(tr: Translator, node: Any) -> list[OperatorDef] | None:
    """An optional holding a value is the value itself in a blob; an empty one is OnnxValue(None)."""
    if node.input and node.input[0]:
        return _op("ONNXIdentity", node)
    return [OperatorDef("ONNXEmptyOptional", [], [node.output[0]])]


NUMERIC = "biuf"


def _numeric(tr: Translator, names: Any) -> bool:
    return all(
        n
        and tr.dtype(n) is not None
        and tr.dtype(n).kind in NUMERIC
        and tr.dtype(n).itemsize <= 8
        and tr.dtype(n).name in _NUMPY_NAMES
        for n in names
    )


_NUMPY_NAMES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "float32",
    "float64",
}  # torch has these too


@native("Shape")
def _shape(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    if tr.dtype(node.input[0]) is None:
        return None
    a = attrs(node)
    return _op("ONNXShape", node, start=int(a.get("start", 0)), end=int(a.get("end", 2**62)))


@native("Unsqueeze", "Squeeze")
def _squeeze(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _torchable(tr, node.input[0]):
        return None
    if tr.dtype(node.input[0]) is None:
        return None
    a = attrs(node)
    axes = tr.const(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if axes is not None and axes.ndim <= 1 and axes.size and axes.dtype.kind in "iu":  # constant axes: the argument
        return _op("ONNX" + node.op_type, node, inputs=[node.input[0]], axes=_int_list(axes))
    return _op("ONNX" + node.op_type, node, axes=[int(v) for v in a.get("axes", [])])


@native("Slice")
def _slice(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if tr.opset < 10 or not _numeric(tr, node.input[:1]) or any(not n for n in node.input[1:]):
        return None
    return _op("ONNXSlice", node)


@native("Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal")
def _unary(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input):
        return None
    return _op("ONNXUnary", node, fn=node.op_type)


@native("Cast")
def _cast(tr: Translator, node: Any) -> list[OperatorDef] | None:
    to = int(attrs(node).get("to", 0))
    a = attrs(node)
    if set(a) - {"to"} or not _numeric(tr, node.input) or to not in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13):
        return None
    if tr.dtype(node.input[0]).kind == "f" and to not in (1, 10, 11):
        return None  # float -> int/bool: out-of-range values are implementation-defined; keep the reference's
    if to in (4, 12, 13):
        return None  # uint16/32/64: torch has no kernels for them
    return _op("ONNXCast", node, to=to)


@native("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")
def _reduce(tr: Translator, node: Any) -> list[OperatorDef] | None:
    a = attrs(node)
    shape = tr.shape(node.input[0])
    if (
        not tr.all_float(node.input[:1])
        or a.get("noop_with_empty_axes", 0)
        or shape is None
        or set(a) - {"axes", "keepdims"}
    ):
        return None
    if len(node.input) > 1 and node.input[1] and tr.const(node.input[1]) is None:
        return None
    axes = (
        [int(v) for v in tr.const(node.input[1]).reshape(-1)]
        if len(node.input) > 1 and node.input[1]
        else [int(v) for v in a.get("axes", [])]
    )
    reduced = [shape[x] for x in axes if -len(shape) <= x < len(shape)] if axes else list(shape)
    if len(reduced) != (len(axes) or len(shape)) or any(not isinstance(d, int) or d == 0 for d in reduced):
        return None  # a reduced dim symbolic or empty (the other dims may be symbolic: the batch)
    return _op(
        "ONNXReduce",
        node,
        fn=node.op_type[len("Reduce") :].lower(),
        axes=[int(v) for v in a.get("axes", [])],
        keepdims=bool(a.get("keepdims", 1)),
    )


@native("Pow")
def _pow(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not tr.all_float(node.input) or tr.dtype(node.input[0]) != tr.dtype(node.input[1]):
        return None
    return _op("ONNXPow", node)


@native("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")
def _compare(tr: Translator, node: Any) -> list[OperatorDef] | None:
    if not _numeric(tr, node.input) or tr.dtype(node.input[0]) != tr.dtype(node.input[1]) or tr.opset < 7:
        return None
    return _op("ONNXCompare", node, fn=node.op_type)


def _torchable(tr: Translator, name: str) -> bool:
    """The value's dtype is known and one torch has too (so a net on torch tensors keeps one library)."""
    d = tr.dtype(name)
    return d is not None and d.name in _NUMPY_NAMES
