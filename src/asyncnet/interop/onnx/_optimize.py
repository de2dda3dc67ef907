"""Import-time rewrites of an ONNX graph that keep its outputs (up to float rounding).

``fold_batch_norm``: a ``Conv`` whose only consumer is an inference ``BatchNormalization``, with
the filter, bias and the normalization's four vectors all initializers, becomes one ``Conv`` with
``W' = W * k`` and ``b' = (b - mean) * k + B``, ``k = scale / sqrt(var + epsilon)`` (computed in
float64, stored in the filter's dtype): what ResNet and MobileNet exports are full of.
"""

from __future__ import annotations

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
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or len([o for o in bn.output if o]) != 1:
            continue
        if any(a.name == "training_mode" and a.i for a in bn.attribute):
            continue
        conv = producer.get(bn.input[0])
        if (conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or uses[conv.output[0]] != 1
                or conv.output[0] in graph_outputs or not all(n in inits for n in bn.input[1:5])
                or conv.input[1] not in inits or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits)):
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
        b = (numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 and conv.input[2]
             else np.zeros(w.shape[0], w.dtype))
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
    keep = [t for t in ng.initializer if still[t.name] or t.name in {v.name for v in ng.input} or t.name in graph_outputs]
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
