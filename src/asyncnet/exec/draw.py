"""Pictures of a net's dependency graph with its chains marked: .dot text, .svg and .png.

The pictures are drawn with matplotlib on a layered layout computed here (no graphviz
binary): an op's layer is its longest path from a root, and each chain keeps one column, so a
chain is a vertical run of boxes framed together and filled with the chain's colour::

    >>> import asyncnet as an
    >>> net = an.Net("n"); _ = net.Relu("x", "y"); _ = net.Tanh("y", "z")
    >>> print(to_dot(net.to_def()).splitlines()[0])
    digraph "n" {
"""

from __future__ import annotations

import os
from typing import Any

from asyncnet.core.defs import NetDef
from asyncnet.exec.graph import Graph, graph_of_net

__all__ = ["layout", "to_dot", "draw", "save_graph"]

_PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
            "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"]


def _label(net_def: NetDef, i: int) -> str:
    op = net_def.ops[i]
    return f"#{i} {op.type}" + (f"\n{op.name}" if op.name else "")


def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(net_def: NetDef, graph: Graph | None = None) -> str:
    """Graphviz text: one cluster per chain of two or more ops, edges labelled by nothing."""
    g = graph or graph_of_net(net_def)
    lines = [f"digraph {_dot_quote(net_def.name)} {{", "  rankdir=TB;", "  node [shape=box, style=\"rounded,filled\"];"]
    for c, chain in enumerate(g.chains):
        colour = _PALETTE[c % len(_PALETTE)]
        indent = "  "
        if len(chain) > 1:
            lines.append(f"  subgraph cluster_chain{c} {{")
            lines.append(f"    label={_dot_quote(f'chain {c}')}; style=rounded; color=\"#555555\";")
            indent = "    "
        for i in chain:
            lines.append(f"{indent}op{i} [label={_dot_quote(_label(net_def, i))}, fillcolor=\"{colour}\"];")
        if len(chain) > 1:
            lines.append("  }")
    for p, c in g.edges():
        lines.append(f"  op{p} -> op{c};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def layout(graph: Graph) -> dict[int, tuple[float, float]]:
    """``op -> (column, layer)``: layer = longest path from a root; one column per chain,
    placed near the mean column of its parents without overlapping another chain's layers."""
    layer = [0] * graph.num_ops
    for j, ps in enumerate(graph.parents):
        layer[j] = max((layer[p] + 1 for p in ps), default=0)
    occupied: dict[int, list[tuple[int, int]]] = {}
    column_of_chain: list[int] = [0] * len(graph.chains)
    order = sorted(range(len(graph.chains)), key=lambda c: (layer[graph.chains[c][0]], graph.chains[c][0]))
    for c in order:
        chain = graph.chains[c]
        lo, hi = layer[chain[0]], layer[chain[-1]]
        parent_cols = [column_of_chain[pc] for pc in graph.chain_parents[c]]
        want = round(sum(parent_cols) / len(parent_cols)) if parent_cols else 0
        col = _free_column(occupied, want, lo, hi)
        column_of_chain[c] = col
        occupied.setdefault(col, []).append((lo, hi))
    return {i: (float(column_of_chain[graph.chain_of[i]]), float(layer[i])) for i in range(graph.num_ops)}


def _free_column(occupied: dict[int, list[tuple[int, int]]], want: int, lo: int, hi: int) -> int:
    """The column nearest ``want`` whose chains leave layers ``lo..hi`` free."""
    d = 0
    while True:
        for col in (want + d, want - d):
            if col >= 0 and all(hi < a or lo > b for a, b in occupied.get(col, [])):
                return col
        d += 1


def draw(net_def: NetDef, graph: Graph | None = None) -> Any:
    """A matplotlib Figure of the graph (made without pyplot, so it is safe off the main thread)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    g = graph or graph_of_net(net_def)
    pos = layout(g)
    n_cols = int(max((x for x, _ in pos.values()), default=0)) + 1
    n_rows = int(max((y for _, y in pos.values()), default=0)) + 1
    fig = Figure(figsize=(min(2.2 * n_cols + 1, 60), min(0.9 * n_rows + 1, 120)))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.7, n_cols - 0.3)
    ax.set_ylim(n_rows - 0.4, -1.0)
    ax.axis("off")
    ax.text((n_cols - 1) / 2, -0.75, f"{net_def.name}: {g.num_ops} ops, {len(g.chains)} chains (dashed frames)",
            ha="center", va="center", fontsize=9)
    w, h = 0.8, 0.5
    for c, chain in enumerate(g.chains):
        colour = _PALETTE[c % len(_PALETTE)]
        if len(chain) > 1:
            x, y0 = pos[chain[0]]
            y1 = pos[chain[-1]][1]
            ax.add_patch(FancyBboxPatch((x - w / 2 - 0.06, y0 - h / 2 - 0.1), w + 0.12, y1 - y0 + h + 0.2,
                                        boxstyle="round,pad=0.02", fill=False, ec="#555555", lw=1.2, ls="--"))
        for i in chain:
            x, y = pos[i]
            ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=colour, ec="#333333", lw=0.8))
            ax.text(x, y, _label(net_def, i), ha="center", va="center", fontsize=7)
    for p, c in g.edges():
        (x0, y0), (x1, y1) = pos[p], pos[c]
        ax.add_patch(FancyArrowPatch((x0, y0 + h / 2), (x1, y1 - h / 2), arrowstyle="-|>", mutation_scale=8,
                                     lw=0.8, color="#444444", connectionstyle="arc3,rad=0.0" if x0 == x1 else "arc3,rad=0.1"))
    return fig


def save_graph(net_def: NetDef, path: str | os.PathLike[str]) -> str:
    """Write the picture to ``path``; the format comes from the suffix (.dot, .svg or .png)."""
    suffix = os.fspath(path).rsplit(".", 1)[-1].lower() if "." in os.fspath(path) else ""
    if suffix not in ("dot", "gv", "svg", "png"):
        raise ValueError(f"expected an output file ending in .dot, .svg or .png, got {os.fspath(path)!r}")
    if suffix in ("dot", "gv"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(to_dot(net_def))
        return suffix
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = draw(net_def)
    FigureCanvasAgg(fig)
    fig.savefig(path, format=suffix, dpi=110)
    return suffix
