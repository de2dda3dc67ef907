"""Import-time rewrites of an ONNX graph that keep its outputs (up to float rounding).

``fold_batch_norm``: a ``Conv`` whose only consumer is an inference ``BatchNormalization``, with
the filter, bias and the normalization's four vectors all initializers, becomes one ``Conv`` with
``W' = W * k`` and ``b' = (b - mean) * k + B``, ``k = scale / sqrt(var + epsilon)`` (computed in
float64, stored in the filter's dtype): what ResNet and MobileNet exports are full of.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np


def fold_batch_norm(model: Any) -> Any:
    """A copy of ``model`` with each foldable Conv + BatchNormalization pair made one Conv
    (``model`` itself when there is none)."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    graph_outputs = {v.name for v in g.output}
    uses = _uses(g)
    producer = {o: node for node in g.node for o in node.output}
    folds: dict[int, tuple[Any, Any]] = {}  # id(bn node) -> (conv node, bn node)
    for bn in g.node:
        if (
            bn.op_type != "BatchNormalization"
            or bn.domain not in ("", "ai.onnx")
            or len([o for o in bn.output if o]) != 1
        ):
            continue
        if any(a.name == "training_mode" and a.i for a in bn.attribute):
            continue
        conv = producer.get(bn.input[0])
        if (
            conv is None
            or conv.op_type != "Conv"
            or conv.domain not in ("", "ai.onnx")
            or uses[conv.output[0]] != 1
            or conv.output[0] in graph_outputs
            or not all(n in inits for n in bn.input[1:5])
            or conv.input[1] not in inits
            or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits)
        ):
            continue
        folds[id(bn)] = (conv, bn)
    if not folds:
        return model
    new = onnx.ModelProto()
    new.CopyFrom(model)
    ng = new.graph
    replaced: dict[str, Any] = {}
    drop: set[int] = set()
    for conv, bn in folds.values():
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        w = numpy_helper.to_array(inits[conv.input[1]])
        b = (
            numpy_helper.to_array(inits[conv.input[2]])
            if len(conv.input) > 2 and conv.input[2]
            else np.zeros(w.shape[0], w.dtype)
        )
        scale, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
        k = scale / np.sqrt(var + eps)
        w2 = (w.astype(np.float64) * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
        b2 = ((b.astype(np.float64) - mean) * k + beta).astype(w.dtype)
        wn, bn_name = f"{bn.output[0]}__folded_w", f"{bn.output[0]}__folded_b"
        replaced[wn], replaced[bn_name] = numpy_helper.from_array(w2, wn), numpy_helper.from_array(b2, bn_name)
        fused = onnx.NodeProto()
        fused.CopyFrom(conv)
        del fused.input[:]
        fused.input.extend([conv.input[0], wn, bn_name])
        del fused.output[:]
        fused.output.append(bn.output[0])
        fused.name = conv.name or bn.name
        replaced[f"__node__{id(conv)}"] = fused
        drop.add(id(bn))
    nodes = []
    for node in g.node:
        if id(node) in drop:
            continue
        nodes.append(replaced.get(f"__node__{id(node)}", node))
    del ng.node[:]
    ng.node.extend(nodes)
    ng.initializer.extend(v for k, v in replaced.items() if not k.startswith("__node__"))
    still = _uses(ng)
    keep = [
        t for t in ng.initializer if still[t.name] or t.name in {v.name for v in ng.input} or t.name in graph_outputs
    ]
    del ng.initializer[:]
    ng.initializer.extend(keep)
    return new


def _uses(g: Any) -> Counter:
    """How many times each value is read by the graph's nodes (a subgraph's outer reads count)."""
    from asyncnet.interop.onnx._translate import outer_names

    uses: Counter = Counter(n for node in g.node for n in node.input)
    for node in g.node:
        uses.update(outer_names(node))
    return uses


# -- shape folding ---------------------------------------------------------------------------------
# A value is known (a numpy array), partly known (a _Partial: a 0-d or 1-D int64 shape vector with
# None for what depends on a symbolic dim) or unknown (absent).


class _Partial:
    def __init__(self, values: list[int | None], scalar: bool = False):
        self.values, self.scalar = values, scalar

    def full(self) -> np.ndarray | None:
        if any(v is None for v in self.values):
            return None
        a = np.array(self.values, np.int64)
        return a.reshape(()) if self.scalar else a


_SHAPE_DTYPES = (np.int64, np.int32)
_MAX_FOLDED = 4096  # elements: a folded value is a shape or a small constant, never an activation


def _attrs(node: Any) -> dict[str, Any]:
    import onnx.helper

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _as_partial(v: Any) -> _Partial | None:
    if isinstance(v, _Partial):
        return v
    if isinstance(v, np.ndarray) and v.dtype in _SHAPE_DTYPES and v.ndim <= 1:
        return _Partial([int(x) for x in v.reshape(-1)], v.ndim == 0)
    return None


def _shape_of(node: Any, a: dict[str, Any], types: dict[str, Any]) -> Any:
    info = types.get(node.input[0])
    if info is None or not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim]
    start, end = a.get("start", 0), a.get("end", len(dims))
    return _Partial(dims[slice(start, end)])


def _gather(v: Any, idx: Any, a: dict[str, Any]) -> Any:
    p = _as_partial(v)
    if p is None or p.scalar or a.get("axis", 0) != 0 or not isinstance(idx, np.ndarray) or idx.ndim > 1:
        return None
    n = len(p.values)
    if not all(-n <= int(i) < n for i in idx.reshape(-1)):
        return None
    picked = [p.values[int(i)] for i in idx.reshape(-1)]
    return _Partial(picked, idx.ndim == 0)


def _slice(v: Any, ins: list[Any], a: dict[str, Any]) -> Any:
    p = _as_partial(v)
    if p is None or p.scalar or not all(isinstance(x, np.ndarray) for x in ins):
        return None
    starts, ends = ins[0].reshape(-1), ins[1].reshape(-1)
    axes = ins[2].reshape(-1) if len(ins) > 2 and ins[2] is not None else np.zeros(1, np.int64)
    steps = ins[3].reshape(-1) if len(ins) > 3 and ins[3] is not None else np.ones(1, np.int64)
    if len(starts) != 1 or len(ends) != 1 or list(axes) not in ([0], [-1]) or len(steps) != 1 or steps[0] == 0:
        return None
    n = len(p.values)
    s, e = (max(min(int(x), 2**62), -(2**62)) for x in (starts[0], ends[0]))
    return _Partial(p.values[slice(*slice(s, e, int(steps[0])).indices(n))])


def _concat(vals: list[Any], a: dict[str, Any]) -> Any:
    parts = [_as_partial(v) for v in vals]
    if any(p is None or p.scalar for p in parts) or a.get("axis", 0) not in (0, -1):
        return None
    return _Partial([x for p in parts for x in p.values])  # type: ignore[union-attr]


def _unsqueeze(v: Any, axes: Any) -> Any:
    p = _as_partial(v)
    if p is None or not p.scalar or axes is None or [int(x) for x in np.reshape(axes, -1)] not in ([0], [-1]):
        return None
    return _Partial(p.values)


def _squeeze(v: Any, axes: Any) -> Any:
    p = _as_partial(v)
    if (
        p is None
        or p.scalar
        or len(p.values) != 1
        or (axes is not None and [int(x) for x in np.reshape(axes, -1)] not in ([0], [-1]))
    ):
        return None
    return _Partial(p.values, True)


def _numeric(op: str, ins: list[Any], a: dict[str, Any]) -> Any:
    """Fully known inputs: the result with ONNX's dtype rules, for the ops shape code uses."""
    import onnx.helper

    if not ins or not all(isinstance(x, np.ndarray) for x in ins):
        return None
    x = ins[0]
    if op == "Cast":
        return x.astype(onnx.helper.tensor_dtype_to_np_dtype(a["to"])) if x.dtype.kind in "iuf" else None
    if op in ("Add", "Sub", "Mul", "Div") and len(ins) == 2 and x.dtype == ins[1].dtype and x.dtype.kind in "iuf":
        y = ins[1]
        if op == "Div" and x.dtype.kind in "iu":
            if (y == 0).any() or (x < 0).any() or (y < 0).any():
                return None
            return (x // y).astype(x.dtype)
        if op == "Div" and (y == 0).any():
            return None
        return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](x, y).astype(x.dtype)
    if op == "Mod" and len(ins) == 2 and x.dtype == ins[1].dtype and x.dtype.kind in "iu" and not (ins[1] == 0).any():
        return (np.fmod if a.get("fmod", 0) else np.mod)(x, ins[1]).astype(x.dtype)
    if op == "Reshape" and len(ins) == 2 and ins[1].dtype in _SHAPE_DTYPES and x.size <= _MAX_FOLDED:
        dims = [int(d) for d in ins[1].reshape(-1)]
        if not a.get("allowzero", 0):
            dims = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(dims)]
        return x.reshape(dims)
    if op == "Sqrt" and x.dtype.kind == "f" and (x >= 0).all():
        return np.sqrt(x).astype(x.dtype)
    if op == "Identity":
        return x
    return None


def _evaluate(node: Any, vals: list[Any], types: dict[str, Any]) -> Any:
    op, a = node.op_type, _attrs(node)
    full = [v.full() if isinstance(v, _Partial) else v for v in vals]
    if op == "Shape":
        return _shape_of(node, a, types)
    if op == "Gather" and len(vals) == 2:
        return _gather(vals[0], full[1], a)
    if op == "Slice" and len(vals) >= 3:
        return _slice(vals[0], full[1:], a)
    if op == "Concat":
        return _concat(vals, a)
    if op == "Unsqueeze":
        return _unsqueeze(vals[0], full[1] if len(vals) > 1 else a.get("axes"))
    if op == "Squeeze":
        return _squeeze(vals[0], full[1] if len(vals) > 1 else a.get("axes"))
    if op == "Cast" and isinstance(vals[0], _Partial) and a.get("to") == 7:
        return vals[0]
    if op in _ARITHMETIC and any(isinstance(v, _Partial) and f is None for v, f in zip(vals, full)):
        return _unknown_like(vals)
    out = _numeric(op, full, a)
    return None if out is None else np.asarray(out)


_ARITHMETIC = ("Add", "Sub", "Mul", "Div", "Mod")


def _unknown_like(vals: list[Any]) -> _Partial | None:
    """An elementwise int result of a partly known shape value: unknown everywhere (its length kept)."""
    parts = [_as_partial(v) for v in vals]
    if any(p is None for p in parts):
        return None
    lengths = {len(p.values) for p in parts if not p.scalar}  # type: ignore[union-attr]
    if len(lengths) > 1:
        return None
    if not lengths:
        return _Partial([None], True)
    return _Partial([None] * lengths.pop())


def _reshape_target(v: Any, allowzero: bool) -> np.ndarray | None:
    """A Reshape's shape made constant: known as is, or with its one unknown entry as -1."""
    p = _as_partial(v)
    if p is None or p.scalar:
        return None
    unknown = [i for i, x in enumerate(p.values) if x is None]
    if not unknown:
        return np.array(p.values, np.int64)
    known = [x for x in p.values if x is not None]
    if len(unknown) != 1 or -1 in known or 0 in known:
        return None
    return np.array([-1 if x is None else x for x in p.values], np.int64)


def fold_shapes(model: Any, types: dict[str, Any]) -> Any:
    """A copy of ``model`` with its shape arithmetic computed at import: nodes whose outputs only
    depend on initializers, constants and the static dims of ``types`` (onnx's shape inference)
    become initializers, a ``Reshape`` whose target has one dim from a symbolic one (the batch)
    gets a constant target with ``-1`` there, and nodes nothing reads any more are dropped
    (``model`` itself when nothing folds, or when the graph has subgraphs)."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in g.node for a in n.attribute):
        return model
    inputs = {v.name for v in g.input}
    params = {t.name: t for t in g.initializer}
    known: dict[str, Any] = {
        t.name: numpy_helper.to_array(t)
        for t in g.initializer
        if t.name not in inputs and int(np.prod(t.dims)) <= _MAX_FOLDED
    }
    new_inits: dict[str, np.ndarray] = {}
    folded: set[int] = set()  # node indices
    reshape_targets: dict[int, str] = {}
    for k, node in enumerate(g.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Constant":
            a = _attrs(node)
            if "value" in a:
                known[node.output[0]] = numpy_helper.to_array(a["value"])
            continue
        if node.op_type == "Identity" and node.input[0] in params and node.input[0] not in inputs:
            new_inits[node.output[0]] = numpy_helper.to_array(params[node.input[0]])  # a parameter under a 2nd name
            folded.add(k)
            continue
        vals = [known.get(n) if n else None for n in node.input]
        if (
            node.op_type == "Reshape"
            and len(vals) == 2
            and vals[1] is not None
            and not isinstance(vals[1], np.ndarray)
            and vals[1].full() is None
        ):
            target = _reshape_target(vals[1], bool(_attrs(node).get("allowzero", 0)))
            if target is not None:
                name = f"{node.output[0]}__shape"
                new_inits[name] = target
                reshape_targets[k] = name
            continue
        if len(node.output) != 1 or (node.op_type != "Shape" and all(v is None for v in vals)):
            continue
        try:
            out = _evaluate(node, vals, types)
        except (ValueError, TypeError, IndexError, KeyError):
            out = None
        if out is None:
            continue
        known[node.output[0]] = out
        full = out.full() if isinstance(out, _Partial) else out
        if full is not None and full.size <= _MAX_FOLDED:
            new_inits[node.output[0]] = full
            folded.add(k)
    if not folded and not reshape_targets:
        return model
    return _rebuild(model, folded, reshape_targets, new_inits)


def _rebuild(model: Any, folded: set[int], reshape_targets: dict[int, str], new_inits: dict[str, np.ndarray]) -> Any:
    import onnx
    from onnx import numpy_helper

    new = onnx.ModelProto()
    new.CopyFrom(model)
    ng = new.graph
    nodes = []
    for k, node in enumerate(ng.node):
        if k in folded:
            continue
        if k in reshape_targets:
            node.input[1] = reshape_targets[k]
        nodes.append(node)
    outputs = {v.name for v in ng.output}
    nodes = _drop_unread(nodes, outputs)
    read = Counter(n for node in nodes for n in node.input) + Counter(outputs)
    del ng.node[:]
    ng.node.extend(nodes)
    existing = {t.name for t in ng.initializer}
    ng.initializer.extend(numpy_helper.from_array(v, k) for k, v in new_inits.items() if read[k] and k not in existing)
    graph_inputs = {v.name for v in ng.input}
    keep_inits = [t for t in ng.initializer if read[t.name] or t.name in graph_inputs]
    del ng.initializer[:]
    ng.initializer.extend(keep_inits)
    return new


# -- fusions of translated ops ------------------------------------------------------------------


def fuse_matmul_add(ops: list[Any], params: dict[str, tuple[tuple[int, ...], Any]], keep: set[str]) -> list[Any]:
    """``ONNXMatMul(x, W)`` read only by an Add (``ONNXBinary`` or ``Add``) of a bias ``b``, ``W`` [K, N] and ``b`` [N]
    initializers of one float dtype (``params``: name -> (shape, dtype)), becomes one
    ``ONNXMatMulAdd(x, W, b)`` (a Linear layer: numpy's matmul and broadcasting give the same
    result), which also takes a ``Relu`` that alone reads the sum (``activation="Relu"``, in
    place). The fused op takes the place of the last op it absorbs. ``keep``: values the graph
    outputs, never fused away."""
    from asyncnet.core.defs import OperatorDef

    readers: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for n in set(op.inputs):
            readers.setdefault(n, []).append(i)
    fused: dict[int, Any] = {}
    dropped: set[int] = set()
    for i, op in enumerate(ops):
        if op.type != "ONNXMatMul" or len(op.inputs) != 2 or op.outputs[0] in keep:
            continue
        w = params.get(op.inputs[1])
        users = readers.get(op.outputs[0], [])
        if w is None or len(w[0]) != 2 or len(users) != 1 or users[0] <= i:
            continue
        add = ops[users[0]]
        if not _is_add(add):
            continue
        other = add.inputs[1] if add.inputs[0] == op.outputs[0] else add.inputs[0]
        b = params.get(other)
        if other == op.outputs[0] or b is None or b[0] != (w[0][1],) or b[1] != w[1]:
            continue
        outputs, args = list(add.outputs), {}
        relu = readers.get(add.outputs[0], [])
        if add.outputs[0] not in keep and len(relu) == 1 and relu[0] > users[0] and _is_relu(ops[relu[0]]):
            outputs, args = list(ops[relu[0]].outputs), {"activation": "Relu"}
            dropped.add(users[0])
            fused_at = relu[0]
        else:
            fused_at = users[0]
        fused[fused_at] = OperatorDef("ONNXMatMulAdd", [op.inputs[0], op.inputs[1], other], outputs, args, name=op.name)
        dropped.add(i)
    if not fused:
        return ops
    return [fused.get(i, op) for i, op in enumerate(ops) if i not in dropped]


def _is_relu(op: Any) -> bool:
    return op.type == "Relu" and len(op.inputs) == 1 and len(op.outputs) == 1


def fuse_conv(ops: list[Any], shape: Any, keep: set[str]) -> list[Any]:
    """Each ``ONNXConv`` whose output alone feeds a ``Relu`` or ``ONNXClip`` takes that activation;
    one whose output alone feeds an Add (``ONNXBinary``) of a value ``Z`` of the same inferred
    shape (``shape(name)``, symbolic dims compared by name) takes ``Z`` as its residual, then the
    Add's own lone Relu or Clip. The fused op replaces the last op it absorbs (``Z`` may be
    computed after the convolution). ``keep``: values the graph outputs, never fused away.

        >>> from asyncnet.core.defs import OperatorDef as D
        >>> ops = [D("ONNXConv", ["x", "w"], ["c"], {"kernels": [1, 1], "bias": False}), D("Relu", ["c"], ["y"])]
        >>> [(op.type, op.outputs, op.args["activation"]) for op in fuse_conv(ops, lambda n: None, set())]
        [('ONNXConv', ['y'], 'Relu')]
    """
    import dataclasses

    readers: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for n in op.inputs:
            readers.setdefault(n, []).append(i)

    taken: set[int] = set()  # ops absorbed into a fused op, or holding one
    gone: set[int] = set()  # the positions a fused op left

    def lone_reader(name: str, after: int) -> int | None:
        users = readers.get(name, [])
        ok = name not in keep and len(users) == 1 and users[0] > after and users[0] not in taken
        return users[0] if ok else None

    out = list(ops)
    for i, op in enumerate(ops):
        if op.type != "ONNXConv" or op.args.get("activation") or op.args.get("residual") or i in taken:
            continue
        fused, at = op, i
        j = lone_reader(op.outputs[0], i)
        if j is not None and _is_add(ops[j]) and ops[j].inputs[0] != ops[j].inputs[1]:
            add = ops[j]
            z = add.inputs[1] if add.inputs[0] == op.outputs[0] else add.inputs[0]
            s = shape(op.outputs[0])
            if s is not None and shape(z) == s and shape(add.outputs[0]) == s:
                fused = dataclasses.replace(
                    fused, inputs=[*op.inputs, z], outputs=list(add.outputs), args={**op.args, "residual": True}
                )
                gone.add(at)
                taken.update((at, j))
                at, j = j, lone_reader(add.outputs[0], j)
        act = _activation(ops[j]) if j is not None else None
        if act is not None:
            fused = dataclasses.replace(fused, outputs=list(ops[j].outputs), args={**fused.args, **act})
            gone.add(at)
            taken.update((at, j))
            at = j
        if fused is not op:
            out[at] = fused
    return [op for i, op in enumerate(out) if i not in gone]


def _activation(op: Any) -> dict[str, Any] | None:
    """The ONNXConv arguments of a Relu or ONNXClip op, else None."""
    if op.type == "Relu" and len(op.inputs) == 1:
        return {"activation": "Relu"}
    if op.type == "ONNXClip" and len(op.inputs) == 1:
        bounds = {k: op.args[k] for k in ("min", "max") if op.args.get(k) is not None}
        return {"activation": "Clip", **bounds}
    return None


def _is_add(op: Any) -> bool:
    """An elementwise Add with numpy's broadcasting (ONNXBinary's, or asyncnet's Add without legacy broadcast)."""
    if len(op.inputs) != 2:
        return False
    if op.type == "ONNXBinary":
        return op.args.get("fn") == "Add"
    return op.type == "Add" and not op.args.get("broadcast", False)


def _drop_unread(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """``nodes`` without those whose outputs nothing reads (repeated until none is left)."""
    while True:
        read = Counter(n for node in nodes for n in node.input) + Counter(outputs)
        keep = [n for n in nodes if any(read[o] for o in n.output if o) or not any(n.output)]
        if len(keep) == len(nodes):
            return nodes
        nodes = keep


def drop_zero_states(model: Any) -> Any:
    """A copy of ``model`` where an LSTM's or GRU's initial states that a ``ConstantOfShape`` of 0
    makes are left out (ONNX's default initial state is zeros), and the shape arithmetic only they
    read dropped: what ``torch.onnx.export`` writes for ``nn.LSTM`` called without states. A state
    is left out only with every later state input (positions would shift otherwise)."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    producer = {o: node for node in g.node for o in node.output}
    graph_inputs = {v.name for v in g.input}

    def zero(name: str) -> bool:
        p = producer.get(name)
        if p is None or name in graph_inputs or p.op_type != "ConstantOfShape" or p.domain not in ("", "ai.onnx"):
            return False
        value = next((a.t for a in p.attribute if a.name == "value"), None)
        return value is None or not numpy_helper.to_array(value).any()

    edits: dict[int, list[str]] = {}
    for k, node in enumerate(g.node):
        if node.op_type not in ("LSTM", "GRU") or node.domain not in ("", "ai.onnx"):
            continue
        ins = list(node.input)
        last = 7 if node.op_type == "LSTM" else 6  # initial_h [, initial_c]
        changed = False
        for i in range(min(len(ins), last) - 1, 4, -1):
            if not ins[i]:
                continue
            if not zero(ins[i]):
                break
            ins[i], changed = "", True
        if changed:
            while ins and not ins[-1]:
                ins.pop()
            edits[k] = ins
    if not edits:
        return model
    new = onnx.ModelProto()
    new.CopyFrom(model)
    for k, ins in edits.items():
        del new.graph.node[k].input[:]
        new.graph.node[k].input.extend(ins)
    nodes = _drop_unread(list(new.graph.node), {v.name for v in new.graph.output})
    kept = [onnx.NodeProto() for _ in nodes]
    for a, b in zip(kept, nodes):
        a.CopyFrom(b)
    del new.graph.node[:]
    new.graph.node.extend(kept)
    return new


_CONTROL = ("ONNXIf", "ONNXLoop", "ONNXScan")  # ops whose bodies read values of the graph around them


def torch_gate_order(ops: list[Any], init_ops: list[Any], keep: set[str]) -> tuple[list[Any], list[Any]]:
    """``ONNXLSTM`` (and ``ONNXGRU`` with ``linear_before_reset``, the form torch computes) whose W,
    R and B are initializers that only it reads get those initializers with their gate blocks in
    torch's order and ``gate_order="torch"``: torch's fused recurrence then takes them as they are,
    instead of reordering them on every run. Returns the new (ops, init_ops); nets with control
    flow (whose bodies may read the weights) are left as they are. ``keep``: the graph outputs."""
    import dataclasses

    from asyncnet.interop.onnx._model import tensor_fill
    from asyncnet.ops.onnx_ref import onnx_tensor_fill
    from asyncnet.ops.onnx_rnn import gate_permutation

    if any(op.type in _CONTROL for op in ops):
        return ops, init_ops
    reads = Counter(n for op in ops for n in op.inputs)
    fills = {op.outputs[0]: i for i, op in enumerate(init_ops) if op.type == "ONNXTensorFill"}
    init_ops, ops = list(init_ops), list(ops)
    for k, op in enumerate(ops):
        n_gates = {"ONNXLSTM": 4, "ONNXGRU": 3}.get(op.type)
        if n_gates is None or op.args.get("gate_order", "onnx") != "onnx":
            continue
        if n_gates == 3 and not op.args.get("linear_before_reset"):
            continue
        weights = op.inputs[1 : min(len(op.inputs), 4)]
        if any(n not in fills or reads[n] != 1 or n in keep for n in weights):
            continue
        hidden = op.args["hidden_size"]
        values = [onnx_tensor_fill(_FillContext(init_ops[fills[n]].args)) for n in weights]
        if any(
            v.ndim != 2 + (i < 2) or v.shape[1] != n_gates * hidden * (1 if i < 2 else 2) for i, v in enumerate(values)
        ):
            continue  # not the shapes ONNX gives W [dirs, G*H, in], R [dirs, G*H, H], B [dirs, 2*G*H]: run as is
        idx = gate_permutation(n_gates, hidden)
        perms = [idx, idx, np.concatenate([idx, n_gates * hidden + idx])]
        for n, v, p in zip(weights, values, perms):
            init_ops[fills[n]] = tensor_fill(n, v[:, p])
        ops[k] = dataclasses.replace(op, args={**op.args, "gate_order": "torch"})
    return ops, init_ops


class _FillContext:
    """The context ``onnx_tensor_fill`` reads (its args), to decode an initializer op's value."""

    def __init__(self, args: dict[str, Any]):
        self.args = args


def fuse_layout_chains(ops: list[Any], keep: set[str]) -> list[Any]:
    """Each chain of one-input layout ops (``LAYOUT_OPS`` whose constants are arguments), every
    link read only by the next, becomes one ``ONNXLayout`` op in the place of the chain's last op
    (the ops between never read the links). ``keep``: values the graph outputs, never fused away."""
    import json

    from asyncnet.core.defs import OperatorDef
    from asyncnet.ops.onnx_nn import LAYOUT_OPS

    if any(op.type in _CONTROL for op in ops):
        return ops  # their bodies may read a link
    reads = Counter(n for op in ops for n in op.inputs)

    def link(op: Any) -> bool:
        return op.type in LAYOUT_OPS and len(op.inputs) == 1 and len(op.outputs) == 1 and op.device_option is None

    producer = {op.outputs[0]: i for i, op in enumerate(ops) if link(op)}
    chains: dict[int, list[int]] = {}  # index of a chain's last op -> the indices of its ops, in order
    absorbed: set[int] = set()
    for i, op in enumerate(ops):
        if not link(op):
            continue
        chain = [i]
        j = producer.get(op.inputs[0])
        while j is not None and reads[ops[j].outputs[0]] == 1 and ops[j].outputs[0] not in keep:
            chain.insert(0, j)
            j = producer.get(ops[j].inputs[0])
        if len(chain) > 1:
            for k in chain[:-1]:
                absorbed.add(k)
                chains.pop(k, None)
            chains[i] = chain
    if not chains:
        return ops
    out = []
    for i, op in enumerate(ops):
        if i in absorbed:
            continue
        if i in chains:
            steps = [json.dumps({"op": ops[k].type, **ops[k].args}) for k in chains[i]]
            first = ops[chains[i][0]]
            op = OperatorDef("ONNXLayout", list(first.inputs), list(op.outputs), {"steps": steps}, name=op.name)
        out.append(op)
    return out


# -- transformer encoder layers -----------------------------------------------------------------

#: the ops torch.onnx.export spells self-attention's splits, head reshapes and scaling with
_ATTENTION_GLUE = {"ONNXLayout", "ONNXTranspose", "ONNXReshape", "ONNXSqueeze", "ONNXUnsqueeze", "ONNXGather"}


@dataclasses.dataclass
class _Layer:
    """One matched encoder layer: the ops it replaces (indices), its input, its weights in the
    fused op's order as (initializer name, transpose it), and its arguments."""

    ops: list[int]
    x: str
    weights: list[tuple[str, bool]]
    args: dict[str, Any]


def fuse_encoder_layers(ops: list[Any], init_ops: list[Any], shape: Any, keep: set[str]) -> tuple[list[Any], list[Any]]:
    """Each post-norm transformer encoder layer with a ReLU feed-forward, in the form
    ``torch.onnx.export`` writes ``nn.TransformerEncoderLayer`` (after the other fusions: one
    in-projection ``ONNXMatMulAdd`` to ``[.., 3E]``, the heads' layout ops, two ``ONNXMatMul`` around
    one ``ONNXSoftmax``, the out-projection, Add + ``ONNXLayerNorm``, two ``ONNXMatMulAdd`` (the
    first with its Relu), Add + ``ONNXLayerNorm``), all weights initializers, becomes one
    ``ONNXEncoderLayer`` (torch's fused inference kernel) with the weights it needs transposed into
    new initializers. A match is kept only when the fused op gives the matched ops' output on a
    seeded random input (within 1e-4): a layer whose structure differs (another scale, a mask,
    another head split) keeps its ops. ``shape(name)``: a value's inferred shape; ``keep``: the
    graph outputs. Returns the new (ops, init_ops)."""
    from asyncnet.ops.onnx_ref import onnx_tensor_fill

    if any(op.type in _CONTROL for op in ops):
        return ops, init_ops
    fills = {op.outputs[0]: i for i, op in enumerate(init_ops) if op.type == "ONNXTensorFill"}
    cache: dict[str, np.ndarray] = {}

    def value(name: str) -> np.ndarray | None:
        if name not in fills:
            return None
        if name not in cache:
            cache[name] = onnx_tensor_fill(_FillContext(init_ops[fills[name]].args))
        return cache[name]

    graph = _OpGraph(ops, keep)
    layers = [m for i, op in enumerate(ops) if (m := _match_layer(graph, i, value, shape)) is not None]
    layers = [m for m in layers if _same_output(ops, m, value, shape)]
    if not layers:
        return ops, init_ops
    return _rewrite(ops, init_ops, layers, value, keep)


class _OpGraph:
    """Who produces and who reads each value of a list of ops."""

    def __init__(self, ops: list[Any], keep: set[str]):
        self.ops, self.keep = ops, keep
        self.producer = {o: i for i, op in enumerate(ops) for o in op.outputs}
        self.readers: dict[str, set[int]] = {}
        for i, op in enumerate(ops):
            for n in op.inputs:
                self.readers.setdefault(n, set()).add(i)

    def made_by(self, name: str, *types: str) -> int | None:
        """The index of the op that makes ``name`` when its type is one of ``types``."""
        i = self.producer.get(name)
        return i if i is not None and self.ops[i].type in types else None


def _match_layer(g: _OpGraph, i: int, value: Any, shape: Any) -> _Layer | None:
    """The encoder layer whose last op (the second layer norm) is ``ops[i]``, else None."""
    ln2 = g.ops[i]
    if ln2.type != "ONNXLayerNorm" or len(ln2.inputs) != 3 or ln2.args.get("axis", -1) not in (-1, 2):
        return None
    add2 = g.made_by(ln2.inputs[0], "ONNXBinary", "Add")
    if add2 is None or not _is_add(g.ops[add2]):
        return None
    for h1, f2 in (g.ops[add2].inputs, g.ops[add2].inputs[::-1]):
        ffn = _match_ffn(g, h1, f2)
        if ffn is None:
            continue
        ln1 = g.ops[ffn[0]]
        add1 = g.made_by(ln1.inputs[0], "ONNXBinary", "Add")
        if add1 is None or not _is_add(g.ops[add1]) or ln1.args.get("epsilon") != ln2.args.get("epsilon"):
            continue
        for x, a in (g.ops[add1].inputs, g.ops[add1].inputs[::-1]):
            attention = _match_attention(g, x, a, value, shape)
            if attention is None:
                continue
            region, weights, args = attention
            ops = sorted({*region, add1, *ffn, add2, i})
            if not _closed(g, ops, i):
                continue
            f1, f2op = g.ops[ffn[1]], g.ops[ffn[2]]
            weights += [
                (ln1.inputs[1], False),
                (ln1.inputs[2], False),
                (f1.inputs[1], True),
                (f1.inputs[2], False),
                (f2op.inputs[1], True),
                (f2op.inputs[2], False),
                (ln2.inputs[1], False),
                (ln2.inputs[2], False),
            ]
            if any(value(n) is None for n, _ in weights):
                continue
            return _Layer(ops, x, weights, {**args, "epsilon": ln2.args.get("epsilon", 1e-5)})
    return None


def _match_ffn(g: _OpGraph, h1: str, f2: str) -> tuple[int, int, int] | None:
    """(first layer norm, first Linear with its Relu, second Linear) of ``f2 = Linear(relu(Linear(h1)))``."""
    second = g.made_by(f2, "ONNXMatMulAdd")
    if second is None or g.ops[second].args.get("activation"):
        return None
    first = g.made_by(g.ops[second].inputs[0], "ONNXMatMulAdd")
    if first is None or g.ops[first].args.get("activation") != "Relu" or g.ops[first].inputs[0] != h1:
        return None
    ln1 = g.made_by(h1, "ONNXLayerNorm")
    if ln1 is None or len(g.ops[ln1].inputs) != 3 or g.ops[ln1].args.get("axis", -1) not in (-1, 2):
        return None
    return ln1, first, second


def _match_attention(
    g: _OpGraph, x: str, a: str, value: Any, shape: Any
) -> tuple[list[int], list[tuple[str, bool]], dict[str, Any]] | None:
    """The self-attention ops from ``x`` to ``a`` (indices), its four weights and the op's arguments."""
    region, todo = set(), [a]
    while todo:
        name = todo.pop()
        if name == x or value(name) is not None:
            continue
        k = g.producer.get(name)
        if k is None or len(region) > 64:
            return None
        if k in region:
            continue
        region.add(k)
        todo += g.ops[k].inputs
    kinds = Counter(g.ops[k].type for k in region)
    if kinds["ONNXSoftmax"] != 1 or kinds["ONNXMatMul"] != 2 or kinds["ONNXMatMulAdd"] + kinds["FC"] != 2:
        return None
    s = shape(x)
    if s is None or len(s) != 3 or not isinstance(s[2], int):
        return None
    e = s[2]
    in_proj = out_proj = None
    for k in region:
        op = g.ops[k]
        if op.type in ("ONNXMatMulAdd", "FC"):
            w = value(op.inputs[1])
            if w is None or op.args.get("activation") or len(op.inputs) != 3 or value(op.inputs[2]) is None:
                return None
            if op.type == "ONNXMatMulAdd" and w.shape == (e, 3 * e):
                in_proj = k
            elif w.shape == (e, e):
                out_proj = k
        elif op.type == "ONNXBinary":
            if op.args.get("fn") not in ("Mul", "Div") or not any(value(n) is not None for n in op.inputs):
                return None
        elif op.type not in _ATTENTION_GLUE | {"ONNXSoftmax", "ONNXMatMul"}:
            return None
    if in_proj is None or out_proj is None:
        return None
    src = g.ops[in_proj].inputs[0]
    t = g.made_by(src, "ONNXTranspose")
    batch_first = t is not None and g.ops[t].inputs[0] == x and list(g.ops[t].args.get("perm", [])) == [1, 0, 2]
    if not batch_first and src != x:
        return None
    mm = min((k for k in region if g.ops[k].type == "ONNXMatMul"), key=lambda k: k)
    q = shape(g.ops[mm].inputs[0])
    if q is None or not q or not isinstance(q[-1], int) or q[-1] < 1 or e % q[-1]:
        return None
    out_op = g.ops[out_proj]
    weights = [
        (g.ops[in_proj].inputs[1], True),
        (g.ops[in_proj].inputs[2], False),
        (out_op.inputs[1], out_op.type == "ONNXMatMulAdd"),
        (out_op.inputs[2], False),
    ]
    return sorted(region), weights, {"num_heads": e // q[-1], "batch_first": batch_first}


def _closed(g: _OpGraph, ops: list[int], last: int) -> bool:
    """Nothing outside ``ops`` reads a value they make, but the last op's output."""
    inside = set(ops)
    for k in ops:
        for o in g.ops[k].outputs:
            if k != last and (o in g.keep or not g.readers.get(o, set()) <= inside):
                return False
    return True


def _layer_weights(m: _Layer, value: Any) -> list[np.ndarray]:
    return [np.ascontiguousarray(value(n).T) if t else value(n) for n, t in m.weights]


def _same_output(ops: list[Any], m: _Layer, value: Any, shape: Any) -> bool:
    """The fused op gives the matched ops' output on a seeded random input (within 1e-4), run on
    one intra-op thread (a claim on the thread budget while it runs: the libraries' default teams
    of spinning threads cost 100x on a busy machine)."""
    import asyncnet as an
    from asyncnet.core.defs import NetDef, OperatorDef
    from asyncnet.tensor.threads import claim_threads

    dims = [d if isinstance(d, int) and d > 0 else k + 2 for k, d in enumerate(shape(m.x))]
    ws = an.Workspace()
    claim = claim_threads(threads=1)
    try:
        x = np.random.default_rng(0).standard_normal(dims).astype(value(m.weights[0][0]).dtype)
        ws.feed(m.x, x)
        for op in (ops[k] for k in m.ops):
            for n in op.inputs:
                v = value(n)
                if v is not None and n not in ws:
                    ws.feed(n, v)
        out = ops[m.ops[-1]].outputs[0]
        ws.run_net_once(NetDef("encoder_check", ops=[ops[k] for k in m.ops]))
        want = ws.fetch(out)
        names = [f"__w{k}" for k in range(12)]
        for n, w in zip(names, _layer_weights(m, value)):
            ws.feed(n, w)
        ws.run_operator_once(OperatorDef("ONNXEncoderLayer", [m.x, *names], ["__y"], m.args))
        got = ws.fetch("__y")
    except Exception:  # noqa: BLE001 - a layer the fused op cannot run keeps its ops
        return False
    finally:
        claim.release()
        ws.close()
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))


def _rewrite(
    ops: list[Any], init_ops: list[Any], layers: list[_Layer], value: Any, keep: set[str]
) -> tuple[list[Any], list[Any]]:
    """``ops`` with each layer's ops replaced by its ``ONNXEncoderLayer`` (at its last op), and the
    transposed weights added to ``init_ops`` (the initializers nothing reads any more dropped)."""
    from asyncnet.core.defs import OperatorDef
    from asyncnet.interop.onnx._model import tensor_fill

    fused: dict[int, Any] = {}
    gone: set[int] = set()
    new_inits: dict[str, Any] = {}
    for m in layers:
        last = ops[m.ops[-1]]
        names = []
        for (n, t), w in zip(m.weights, _layer_weights(m, value)):
            if t:
                n = f"{n}__transposed"
                new_inits.setdefault(n, tensor_fill(n, w))
            names.append(n)
        fused[m.ops[-1]] = OperatorDef("ONNXEncoderLayer", [m.x, *names], list(last.outputs), m.args, name=last.name)
        gone.update(m.ops[:-1])
    out = [fused.get(i, op) for i, op in enumerate(ops) if i not in gone]
    read = {n for op in out for n in op.inputs} | keep
    unread = {n for i in gone for n in ops[i].inputs} - read
    return out, [op for op in init_ops if op.outputs[0] not in unread] + list(new_inits.values())


# -- the last step of a recurrence --------------------------------------------------------------

#: ONNXLayout steps that take the last step of a one-direction ``Y [seq, 1, batch, H]`` as
#: ``[batch, H]``: torch's ``out[:, -1]`` of a batch-first LSTM, and ``out[-1]`` of a sequence-first one
_LAST_STEP = (
    [
        {"op": "ONNXSqueeze", "axes": [1]},
        {"op": "ONNXTranspose", "perm": [1, 0, 2]},
        {"op": "ONNXGather", "axis": 1, "index": -1},
    ],
    [{"op": "ONNXSqueeze", "axes": [1]}, {"op": "ONNXGather", "axis": 0, "index": -1}],
)


def last_step_from_state(ops: list[Any], shape: Any, keep: set[str]) -> list[Any]:
    """A forward ``ONNXLSTM``/``ONNXGRU`` (layout 0) whose ``Y`` only feeds ``ONNXLayout`` ops taking
    its last step as ``[batch, H]`` (``_LAST_STEP``), with a static sequence length of at least 1
    (``shape(name)``: the inferred shape), stops producing ``Y`` (and an unread ``Y_c``): those
    ops read ``Y_h``'s one direction instead, which holds the same values. ``keep``: the graph
    outputs."""
    import json

    reads: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for n in op.inputs:
            reads.setdefault(n, []).append(i)
    out = list(ops)
    for i, op in enumerate(ops):
        if op.type not in ("ONNXLSTM", "ONNXGRU") or op.args.get("direction", "forward") != "forward":
            continue
        produce = list(op.args.get("produce", [1, 1]))
        if op.args.get("layout", 0) != 0 or not produce[0] or op.outputs[0] in keep:
            continue
        seq = (shape(op.inputs[0]) or (None,))[0]
        users = reads.get(op.outputs[0], [])
        if not isinstance(seq, int) or seq < 1 or not users:
            continue
        if not all(ops[k].type == "ONNXLayout" and _steps(ops[k]) in _LAST_STEP for k in users):
            continue
        names = dict(zip([k for k, p in enumerate(produce) if p], op.outputs))
        if len(produce) < 2:
            produce.append(0)
        y_h = names.get(1, f"{op.outputs[0]}__state")
        produce[0], produce[1] = 0, 1
        if len(produce) > 2 and produce[2] and names[2] not in keep and not reads.get(names[2]):
            produce[2] = 0
        outputs = [{1: y_h}.get(k, names.get(k)) for k, p in enumerate(produce) if p]
        out[i] = dataclasses.replace(op, outputs=outputs, args={**op.args, "produce": produce})
        for k in users:
            step = json.dumps({"op": "ONNXSqueeze", "axes": [0]})
            out[k] = dataclasses.replace(ops[k], inputs=[y_h], args={**ops[k].args, "steps": [step]})
    return out


def _steps(op: Any) -> list[dict[str, Any]]:
    import json

    return [json.loads(s) for s in op.args.get("steps", [])]


def fuse_concat_relu(ops: list[Any], keep: set[str]) -> list[Any]:
    """A ``Relu`` that alone reads an ``ONNXConcat`` of ``ONNXConv`` outputs without an activation,
    each read only by the Concat (an Inception block's end), moves into the convolutions
    (``activation="Relu"``: relu of a concatenation is the concatenation of the relus), so it runs
    in place in each branch; the Concat then writes the Relu's output. ``keep``: the graph outputs.

        >>> from asyncnet.core.defs import OperatorDef as D
        >>> conv = lambda x, y: D("ONNXConv", [x, "w"], [y], {"kernels": [1, 1], "bias": False})
        >>> ops = [conv("x", "a"), conv("x", "b"), D("ONNXConcat", ["a", "b"], ["c"], {"axis": 1}), D("Relu", ["c"], ["y"])]
        >>> [(op.type, op.outputs, op.args.get("activation")) for op in fuse_concat_relu(ops, set())]
        [('ONNXConv', ['a'], 'Relu'), ('ONNXConv', ['b'], 'Relu'), ('ONNXConcat', ['y'], None)]
    """
    reads = Counter(n for op in ops for n in op.inputs)
    producer = {o: i for i, op in enumerate(ops) for o in op.outputs}
    out, gone = list(ops), set()
    for i, op in enumerate(ops):
        if not _is_relu(op) or op.inputs[0] in keep or reads[op.inputs[0]] != 1:
            continue
        k = producer.get(op.inputs[0])
        if k is None or ops[k].type != "ONNXConcat":
            continue
        convs = [producer.get(n) for n in ops[k].inputs]
        if len(set(ops[k].inputs)) != len(convs) or not all(
            j is not None
            and out[j].type == "ONNXConv"
            and not out[j].args.get("activation")
            and reads[out[j].outputs[0]] == 1
            and out[j].outputs[0] not in keep
            for j in convs
        ):
            continue
        for j in convs:
            out[j] = dataclasses.replace(out[j], args={**out[j].args, "activation": "Relu"})
        out[k] = dataclasses.replace(ops[k], outputs=list(op.outputs))
        gone.add(i)
    return [op for i, op in enumerate(out) if i not in gone]
