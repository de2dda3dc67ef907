"""Timelines (Chrome trace), graph pictures, the trace/graph commands, the benchmark smoke run."""

import json

import numpy as np
import pytest

import asyncnet as an
from asyncnet.cli.main import main as cli_main
from asyncnet.exec.draw import layout, save_graph, to_dot
from asyncnet.exec.graph import graph_of_net
from asyncnet.exec.trace import Timeline, profile

pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("no_leaked_threads")]


def _net(net_type="async_scheduling"):
    net = an.Net("demo", type=net_type, num_workers=2)
    for i in range(4):
        net.ExecTestWork([], [f"p{i}"], name=f"p{i}", sleep=0.01)
    net.AsyncNetBarrier([f"p{i}" for i in range(4)], [f"p{i}" for i in range(4)])
    net.ExecTestWork([f"p{i}" for i in range(4)], ["y"], name="join")
    net.Relu("y", "y")
    return net


def test_chrome_trace_structure(tmp_path):
    with an.Workspace() as ws:
        inst = ws.create_net(_net())
        with profile(inst) as tl:
            ws.run_net("demo", num_iter=2, timeout=10)
        assert inst.recorder is None  # profiling off again
        assert len(tl.events) == 14
        path = tmp_path / "run.json"
        tl.write(path)
        doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    meta = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(slices) == 14
    assert {e["tid"] for e in slices} == set(meta)  # every slice is on a named thread track
    assert len(meta) >= 2 and all(name.startswith("asyncnet-cpu0") for name in meta.values())
    for e in slices:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["args"]["net"] == "demo"
    assert {e["name"] for e in slices} == {"ExecTestWork", "AsyncNetBarrier", "Relu"}
    for tid in meta:  # slices on one thread never overlap
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["tid"] == tid)
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(mine, mine[1:]))


def test_simple_net_profiles_too_and_stats():
    with an.Workspace() as ws:
        inst = ws.create_net(_net("simple"))
        tl = Timeline()
        with profile(inst, timeline=tl):
            ws.run_net("demo")
        stats = tl.op_stats()
        assert stats["ExecTestWork"]["count"] == 5
        assert stats["Relu"]["mean"] >= 0


def test_dot_and_layout():
    nd = _net().to_def()
    g = graph_of_net(nd)
    dot = to_dot(nd, g)
    assert dot.startswith('digraph "demo"') and dot.count("->") == len(g.edges())
    assert "cluster_chain" in dot  # the join + Relu chain is framed
    pos = layout(g)
    assert len(pos) == len(nd.ops)
    for p, c in g.edges():
        assert pos[p][1] < pos[c][1]  # parents above children
    cells = [(x, y) for x, y in pos.values()]
    assert len(cells) == len(set(cells))  # no two ops in one cell


@pytest.mark.parametrize("suffix", ["svg", "png", "dot"])
def test_save_graph(tmp_path, suffix):
    path = tmp_path / f"net.{suffix}"
    save_graph(_net().to_def(), path)
    data = path.read_bytes()
    assert (
        data[:4] == b"\x89PNG"
        if suffix == "png"
        else (b"<svg" in data[:400] if suffix == "svg" else data.startswith(b"digraph"))
    )
    with pytest.raises(ValueError):
        save_graph(_net().to_def(), tmp_path / "net.pdf")


def _write_net(tmp_path):
    net = an.Net("cli", type="async_scheduling", num_workers=2)
    net.Scale("x", "a", scale=2.0)
    net.Scale("x", "b", scale=3.0)
    net.AsyncNetBarrier(["a", "b"], ["a", "b"])
    net.Add(["a", "b"], "y")
    p = tmp_path / "net.json"
    p.write_text(net.to_json())
    np.save(tmp_path / "x.npy", np.ones(3))
    return p


def test_trace_command(tmp_path, capsys):
    p = _write_net(tmp_path)
    out = tmp_path / "run.json"
    assert cli_main(["trace", str(p), "-o", str(out), "--feed", f"x={tmp_path / 'x.npy'}", "--iters", "3"]) == 0
    doc = json.loads(out.read_text())
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 12
    assert "wrote" in capsys.readouterr().out


def test_graph_command(tmp_path, capsys):
    p = _write_net(tmp_path)
    for suffix in ("svg", "png", "dot"):
        assert cli_main(["graph", str(p), "-o", str(tmp_path / f"g.{suffix}")]) == 0
        assert (tmp_path / f"g.{suffix}").stat().st_size > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "{missing}", "-o", "{tmp}/r.json"],
        ["trace", "{bad}", "-o", "{tmp}/r.json"],
        ["trace", "{net}", "-o", "{tmp}/r.json"],  # x not fed: the op fails
        ["trace", "{net}", "-o", "{tmp}/r.json", "--feed", "x"],  # malformed feed
        ["trace", "{net}", "-o", "{tmp}/nodir/r.json", "--feed", "x={tmp}/x.npy"],
        ["trace", "{net}", "-o", "{tmp}/r.json", "--iters", "0"],
        ["graph", "{bad}", "-o", "{tmp}/g.svg"],
        ["graph", "{net}", "-o", "{tmp}/g.pdf"],
        ["graph", "{net}", "-o", "{tmp}/nodir/g.svg"],
    ],
)
def test_bad_input_is_one_line_error(tmp_path, capsys, argv):
    net = _write_net(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "b", "ops": [{"type": 7}]}')
    subs = {"missing": tmp_path / "missing.json", "bad": bad, "net": net, "tmp": tmp_path}
    code = cli_main([a.format(**subs) for a in argv])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("asyncnet: error:") and "Traceback" not in err
