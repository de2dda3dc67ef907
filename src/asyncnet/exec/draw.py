"""Pictures of a net's dependency graph with its chains marked: .dot text, .svg and .png.

Each chain gets a colour of its own (:func:`chain_colours`: no two chains share one) and a
frame. Two engines draw .svg and .png:

- ``"dot"``: graphviz's ``dot`` program, when installed, lays out :func:`to_dot`'s text
  (each chain of two or more ops a cluster) and routes edges around the boxes;
- ``"builtin"``: matplotlib on a layered layout computed here: an op's layer is its longest
  path from a root, each chain keeps one column, and edges run orthogonally through the free
  gaps between layers and lanes between columns (:func:`route`), so no edge crosses a box.

``engine="auto"`` (the default) takes dot when it is on PATH::

    >>> import asyncnet as an
    >>> net = an.Net("n"); _ = net.Relu("x", "y"); _ = net.Tanh("y", "z")
    >>> print(to_dot(net.to_def()).splitlines()[0])
    digraph "n" {
"""

from __future__ import annotations

import colorsys
import os
import shutil
import subprocess
from typing import Any

from asyncnet._atomicio import atomic_write
from asyncnet.core.defs import NetDef
from asyncnet.errors import ExecutionError
from asyncnet.exec.graph import Graph, graph_of_net

__all__ = ["layout", "route", "to_dot", "draw", "save_graph", "chain_colours", "dot_program", "ENGINES"]

ENGINES = ("auto", "dot", "builtin")
DOT_TIMEOUT = 120.0  # seconds graphviz may take to lay out one net
_PALETTE = [
    "#8dd3c7",
    "#ffffb3",
    "#bebada",
    "#fb8072",
    "#80b1d3",
    "#fdb462",
    "#b3de69",
    "#fccde5",
    "#d9d9d9",
    "#bc80bd",
    "#ccebc5",
    "#ffed6f",
]
_BOX_W, _BOX_H = 0.8, 0.5  # builtin layout: a box in a unit cell, leaving lanes and gaps free


def chain_colours(n: int) -> list[str]:
    """``n`` distinct fill colours: a 12-colour qualitative palette, then golden-angle hues.

    >>> len(set(chain_colours(100)))
    100
    """
    colours = _PALETTE[:n]
    seen = set(colours)
    k = 0
    while len(colours) < n:
        hue = (k * 0.618033988749895) % 1.0
        light, sat = (0.80, 0.55), (0.70, 0.45)
        r, g, b = colorsys.hls_to_rgb(hue, light[k % 2], sat[(k // 2) % 2])
        colour = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
        if colour not in seen:
            seen.add(colour)
            colours.append(colour)
        k += 1
    return colours


def dot_program() -> str | None:
    """The path of graphviz's ``dot``, or None when it is not installed."""
    return shutil.which("dot")


def _label(net_def: NetDef, i: int) -> str:
    op = net_def.ops[i]
    return f"#{i} {op.type}" + (f"\n{op.name}" if op.name else "")


def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(net_def: NetDef, graph: Graph | None = None) -> str:
    """Graphviz text: one cluster per chain of two or more ops, edges labelled by nothing."""
    g = graph or graph_of_net(net_def)
    lines = [f"digraph {_dot_quote(net_def.name)} {{", "  rankdir=TB;", '  node [shape=box, style="rounded,filled"];']
    colours = chain_colours(len(g.chains))
    for c, chain in enumerate(g.chains):
        colour = colours[c]
        indent = "  "
        if len(chain) > 1:
            lines.append(f"  subgraph cluster_chain{c} {{")
            lines.append(f'    label={_dot_quote(f"chain {c}")}; style=rounded; color="#555555";')
            indent = "    "
        for i in chain:
            lines.append(f'{indent}op{i} [label={_dot_quote(_label(net_def, i))}, fillcolor="{colour}"];')
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


def route(pos: dict[int, tuple[float, float]], p: int, c: int, lane_shift: float = 0.0) -> list[tuple[float, float]]:
    """The builtin drawing's polyline for edge ``p -> c``: down out of the parent's box, along
    the free gap below its layer, down a free lane between columns, along the gap above the
    child's layer, into the child's box. Boxes fill at most ``0.8 x 0.5`` of a unit cell
    around integer points, so gaps (``y + 0.5``) and lanes (``x + 0.5``) cross none."""
    (x0, y0), (x1, y1) = pos[p], pos[c]
    top, bottom = y0 + _BOX_H / 2, y1 - _BOX_H / 2
    if x0 == x1 and y1 - y0 == 1:
        return [(x0, top), (x1, bottom)]
    below, above = y0 + 0.5 + lane_shift, y1 - 0.5 + lane_shift
    if y1 - y0 == 1:
        return [(x0, top), (x0, below), (x1, below), (x1, bottom)]
    lane = (x0 + 0.5 if x1 >= x0 else x0 - 0.5) + lane_shift
    return [(x0, top), (x0, below), (lane, below), (lane, above), (x1, above), (x1, bottom)]


def draw(net_def: NetDef, graph: Graph | None = None) -> Any:
    """A matplotlib Figure of the graph (made without pyplot, so it is safe off the main thread)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path

    g = graph or graph_of_net(net_def)
    pos = layout(g)
    n_cols = int(max((x for x, _ in pos.values()), default=0)) + 1
    n_rows = int(max((y for _, y in pos.values()), default=0)) + 1
    fig = Figure(figsize=(min(2.2 * n_cols + 1, 60), min(0.9 * n_rows + 1, 120)))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.7, n_cols - 0.3)
    ax.set_ylim(n_rows - 0.4, -1.0)
    ax.axis("off")
    ax.text(
        (n_cols - 1) / 2,
        -0.75,
        f"{net_def.name}: {g.num_ops} ops, {len(g.chains)} chains (dashed frames)",
        ha="center",
        va="center",
        fontsize=9,
    )
    w, h = _BOX_W, _BOX_H
    colours = chain_colours(len(g.chains))
    for c, chain in enumerate(g.chains):
        if len(chain) > 1:
            x, y0 = pos[chain[0]]
            y1 = pos[chain[-1]][1]
            ax.add_patch(
                FancyBboxPatch(
                    (x - w / 2 - 0.04, y0 - h / 2 - 0.08),
                    w + 0.08,
                    y1 - y0 + h + 0.16,
                    boxstyle="round,pad=0.02",
                    fill=False,
                    ec="#555555",
                    lw=1.2,
                    ls="--",
                )
            )
        for i in chain:
            x, y = pos[i]
            ax.add_patch(
                FancyBboxPatch(
                    (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=colours[c], ec="#333333", lw=0.8
                )
            )
            ax.text(x, y, _label(net_def, i), ha="center", va="center", fontsize=7)
    for k, (p, c) in enumerate(g.edges()):
        points = route(pos, p, c, lane_shift=((k % 5) - 2) * 0.015)  # parallel edges stay apart
        path = Path(points, [Path.MOVETO] + [Path.LINETO] * (len(points) - 1))
        ax.add_patch(FancyArrowPatch(path=path, arrowstyle="-|>", mutation_scale=8, lw=0.8, color="#444444"))
    return fig


def save_graph(net_def: NetDef, path: str | os.PathLike[str], engine: str = "auto") -> str:
    """Write the picture to ``path``; the format comes from the suffix (.dot, .svg or .png).

    ``engine`` is ``"auto"`` (dot when installed, else builtin), ``"dot"`` or ``"builtin"``;
    returns the engine used (``"text"`` for .dot files). The file is written crash-safe.
    """
    suffix = os.fspath(path).rsplit(".", 1)[-1].lower() if "." in os.fspath(path) else ""
    if suffix not in ("dot", "gv", "svg", "png"):
        raise ValueError(f"expected an output file ending in .dot, .svg or .png, got {os.fspath(path)!r}")
    if engine not in ENGINES:
        raise ValueError(f"expected engine one of {list(ENGINES)}, got {engine!r}")
    if suffix in ("dot", "gv"):
        atomic_write(path, lambda f: f.write(to_dot(net_def).encode("utf-8")))
        return "text"
    dot = dot_program()
    if engine == "dot" and dot is None:
        raise ExecutionError(
            "engine 'dot' needs graphviz's dot program on PATH (install graphviz, or use engine 'builtin')"
        )
    if engine != "builtin" and dot is not None:
        image = _run_dot(dot, to_dot(net_def), suffix)
        atomic_write(path, lambda f: f.write(image))
        return "dot"
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = draw(net_def)
    FigureCanvasAgg(fig)
    atomic_write(path, lambda f: fig.savefig(f, format=suffix, dpi=110))
    return "builtin"


def _run_dot(dot: str, text: str, fmt: str) -> bytes:
    """``dot -T<fmt>`` on ``text``: the image bytes, or ExecutionError with dot's own message."""
    try:
        res = subprocess.run(
            [dot, f"-T{fmt}"], input=text.encode("utf-8"), capture_output=True, timeout=DOT_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise ExecutionError(f"graphviz dot took more than {DOT_TIMEOUT:g} s; use engine 'builtin'") from None
    except OSError as e:
        raise ExecutionError(f"cannot run graphviz dot ({dot}): {e.strerror or e}") from None
    if res.returncode != 0 or not res.stdout:
        msg = res.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ExecutionError(f"graphviz dot failed (exit {res.returncode}): {msg[0] if msg else 'no output'}")
    return res.stdout
