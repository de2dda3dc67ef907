"""Caffe2's ``net_drawer``: a pydot graph of a net's operators and blobs.

It needs the ``pydot`` package (and graphviz to render); without pydot the functions raise an
ImportError that says so. asyncnet's own drawing, ``asyncnet graph NET.pb -o net.svg``, needs
neither.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GetOperatorMapForPlan", "GetPydotGraph", "GetPydotGraphMinimal"]

OP_STYLE = {"shape": "box", "color": "#0F9D58", "style": "filled", "fontcolor": "#FFFFFF"}
BLOB_STYLE = {"shape": "octagon"}


def _pydot() -> Any:
    try:
        import pydot
    except ImportError:
        raise ImportError(
            "caffe2.python.net_drawer needs pydot (pip install pydot) and graphviz to render; "
            "`asyncnet graph NET.pb -o net.svg` draws a net without them"
        ) from None
    return pydot


def _ops(operators_or_net: Any) -> list[Any]:
    if hasattr(operators_or_net, "Proto"):
        return list(operators_or_net.Proto().op)
    if hasattr(operators_or_net, "op"):
        return list(operators_or_net.op)
    return list(operators_or_net)


def GetPydotGraph(
    operators_or_net: Any,
    name: str | None = None,
    rankdir: str = "LR",
    op_node_producer: Any = None,
    blob_node_producer: Any = None,
) -> Any:
    """Every op (a box) and blob (an octagon), edges from blobs to the ops reading them and on to their outputs."""
    pydot = _pydot()
    graph = pydot.Dot(name or "net", rankdir=rankdir)
    blobs: dict[str, Any] = {}

    def blob_node(b: str) -> Any:
        if b not in blobs:
            blobs[b] = pydot.Node(f"{b}_{len(blobs)}", label=b, **BLOB_STYLE)
            graph.add_node(blobs[b])
        return blobs[b]

    for i, op in enumerate(_ops(operators_or_net)):
        node = pydot.Node(f"op{i}", label=f"{op.name}\n{op.type}" if op.name else op.type, **OP_STYLE)
        graph.add_node(node)
        for b in op.input:
            graph.add_edge(pydot.Edge(blob_node(b), node))
        for b in op.output:
            blobs.pop(b, None)
            graph.add_edge(pydot.Edge(node, blob_node(b)))
    return graph


def GetPydotGraphMinimal(
    operators_or_net: Any, name: str | None = None, rankdir: str = "LR", minimal_dependency: bool = False
) -> Any:
    """Ops only, an edge where one op reads what another wrote."""
    pydot = _pydot()
    graph = pydot.Dot(name or "net", rankdir=rankdir)
    writer: dict[str, Any] = {}
    for i, op in enumerate(_ops(operators_or_net)):
        node = pydot.Node(f"op{i}", label=op.type, **OP_STYLE)
        graph.add_node(node)
        for src in {writer[b] for b in op.input if b in writer}:
            graph.add_edge(pydot.Edge(src, node))
        for b in op.output:
            writer[b] = node
    return graph


def GetOperatorMapForPlan(plan_def: Any) -> dict[str, list[Any]]:
    """{net name: its ops} of a PlanDef."""
    return {net.name: list(net.op) for net in plan_def.network}
