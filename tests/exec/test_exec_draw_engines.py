"""Graph pictures: distinct colours per chain, graphviz dot when installed, and edges that never
cross an unrelated box (checked geometrically for both engines)."""

import re
import subprocess

import exec_test_ops  # noqa: F401  (registers ExecTestWork)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.cli.main import main as cli_main
from asyncnet.errors import ExecutionError
from asyncnet.exec import draw
from asyncnet.exec.graph import graph_of_net

pytestmark = pytest.mark.timeout(120)

needs_dot = pytest.mark.skipif(draw.dot_program() is None, reason="graphviz's dot is not installed")


def train_net_28():
    from asyncnet.train import MLP

    nd = MLP(64, hidden=(32, 32, 32)).train_net().to_def()
    assert len(nd.ops) == 28  # the net of the issue: 28 ops
    return nd


@st.composite
def random_nets(draw_, max_ops=18):
    """Random DAG nets: each op reads 1-3 earlier blobs and writes 1-2 (sometimes an old one)."""
    n = draw_(st.integers(2, max_ops))
    net = an.Net("rand", type="async_scheduling")
    blobs = ["x"]
    for i in range(n):
        ins = draw_(st.lists(st.sampled_from(blobs), min_size=1, max_size=3, unique=True))
        outs = [f"b{i}"] if draw_(st.integers(0, 4)) else [f"b{i}", draw_(st.sampled_from(blobs))]
        outs = list(dict.fromkeys(outs))
        net.ExecTestWork(ins, outs)
        blobs += [o for o in outs if o not in blobs]
    return net.to_def()


def test_chain_colours_are_distinct():
    for n in (1, 12, 13, 40, 300):
        colours = draw.chain_colours(n)
        assert len(colours) == n == len(set(colours))
        assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours)


def test_dot_text_one_colour_per_chain_and_clusters():
    nd = train_net_28()
    g = graph_of_net(nd)
    text = draw.to_dot(nd, g)
    fill = dict(re.findall(r"(op\d+) \[label=.*?fillcolor=\"(#[0-9a-f]{6})\"", text))
    assert len(fill) == g.num_ops
    per_chain = [{fill[f"op{i}"] for i in chain} for chain in g.chains]
    assert all(len(c) == 1 for c in per_chain)
    assert len({next(iter(c)) for c in per_chain}) == len(g.chains) > 12  # beyond the palette
    assert text.count("subgraph cluster_chain") == sum(len(c) > 1 for c in g.chains)


def _segment_hits_box(a, b, box, eps=1e-9):
    """Whether the axis-aligned segment a-b enters the open rectangle box = (cx, cy, w, h)."""
    cx, cy, w, h = box
    (xa, ya), (xb, yb) = a, b
    lo_x, hi_x, lo_y, hi_y = min(xa, xb), max(xa, xb), min(ya, yb), max(ya, yb)
    return lo_x < cx + w / 2 - eps and hi_x > cx - w / 2 + eps and lo_y < cy + h / 2 - eps and hi_y > cy - h / 2 + eps


def builtin_crossings(nd):
    g = graph_of_net(nd)
    pos = draw.layout(g)
    boxes = {i: (x, y, draw._BOX_W + 0.04, draw._BOX_H + 0.04) for i, (x, y) in pos.items()}  # with the rounding pad
    bad = []
    for k, (p, c) in enumerate(g.edges()):
        points = draw.route(pos, p, c, lane_shift=((k % 5) - 2) * 0.015)
        for a, b in zip(points, points[1:]):
            assert a[0] == b[0] or a[1] == b[1], "routes are orthogonal"
            bad += [(p, c, i) for i, box in boxes.items() if i not in (p, c) and _segment_hits_box(a, b, box)]
        assert points[0][1] == pos[p][1] + draw._BOX_H / 2 and points[-1] == (pos[c][0], pos[c][1] - draw._BOX_H / 2)
    return bad


def test_builtin_edges_never_cross_a_box_on_the_28_op_train_net():
    assert builtin_crossings(train_net_28()) == []


@settings(max_examples=40)
@given(nd=random_nets())
def test_builtin_edges_never_cross_a_box(nd):
    assert builtin_crossings(nd) == []


def dot_crossings(nd):
    plain = subprocess.run(
        [draw.dot_program(), "-Tplain"], input=draw.to_dot(nd), capture_output=True, text=True, timeout=60, check=True
    ).stdout
    nodes, edges = {}, []
    for line in plain.splitlines():
        f = line.split()
        if f[0] == "node":
            nodes[f[1]] = tuple(map(float, f[2:6]))
        elif f[0] == "edge":
            n = int(f[3])
            edges.append((f[1], f[2], np.array(list(map(float, f[4 : 4 + 2 * n]))).reshape(n, 2)))
    t = np.linspace(0, 1, 50)[:, None]
    bad = []
    for a, b, pts in edges:
        curve = np.concatenate(
            [
                (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t**2 * p2 + t**3 * p3
                for p0, p1, p2, p3 in (pts[k : k + 4] for k in range(0, len(pts) - 3, 3))
            ]
        )
        for name, (x, y, w, h) in nodes.items():
            inside = (np.abs(curve[:, 0] - x) < w / 2 - 0.02) & (np.abs(curve[:, 1] - y) < h / 2 - 0.02)
            if name not in (a, b) and inside.any():
                bad.append((a, b, name))
    assert len(nodes) == len(nd.ops)
    return bad


@needs_dot
def test_dot_edges_never_cross_a_box_on_the_28_op_train_net():
    assert dot_crossings(train_net_28()) == []


@needs_dot
@settings(max_examples=15)
@given(nd=random_nets(max_ops=14))
def test_dot_edges_never_cross_a_box(nd):
    assert dot_crossings(nd) == []


@needs_dot
@pytest.mark.parametrize("suffix, magic", [("svg", b"<svg"), ("png", b"\x89PNG")])
def test_save_graph_with_dot(tmp_path, suffix, magic):
    path = tmp_path / f"g.{suffix}"
    assert draw.save_graph(train_net_28(), path, engine="dot") == "dot"
    assert magic in path.read_bytes()[:400]
    assert draw.save_graph(train_net_28(), path, engine="auto") == "dot"


def test_without_dot_auto_falls_back_and_dot_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(draw, "dot_program", lambda: None)
    assert draw.save_graph(train_net_28(), tmp_path / "g.png") == "builtin"
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ExecutionError, match="needs graphviz's dot program on PATH"):
        draw.save_graph(train_net_28(), tmp_path / "h.svg", engine="dot")
    assert not (tmp_path / "h.svg").exists()
    with pytest.raises(ValueError, match="engine"):
        draw.save_graph(train_net_28(), tmp_path / "h.svg", engine="neato")


def test_a_failing_dot_is_one_error(tmp_path, monkeypatch):
    monkeypatch.setattr(draw, "dot_program", lambda: "/bin/false")
    with pytest.raises(ExecutionError, match="graphviz dot failed"):
        draw.save_graph(train_net_28(), tmp_path / "g.svg", engine="auto")
    assert list(tmp_path.iterdir()) == []


def test_graph_command_engines(tmp_path, capsys, monkeypatch):
    p = tmp_path / "net.json"
    p.write_text(train_net_28().to_json())
    assert cli_main(["graph", str(p), "-o", str(tmp_path / "b.svg"), "--engine", "builtin"]) == 0
    assert "drawn by the builtin layout" in capsys.readouterr().out
    monkeypatch.setattr(draw, "dot_program", lambda: None)
    assert cli_main(["graph", str(p), "-o", str(tmp_path / "d.svg"), "--engine", "dot"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "graphviz" in err
