"""Net-size benchmark: ``python -m benchmarks netsize [--json] [--quick] [--sizes N ...]``.

How ``Workspace.create_net`` (validation, operators, dependency graph, chains, pools) scales
with the number of ops, for two shapes of net built with :class:`~asyncnet.Net`:

- chain: ``n`` in-place ``Scale`` ops on one blob (one long chain, every op one parent);
- branchy: blocks of 4 ``Scale`` branches from ``x`` joined by a ``Sum`` back into ``x``
  (every fifth op has four parents, so the transitive reduction searches).

Each (shape, size) runs in a fresh subprocess so its peak memory (``ru_maxrss``) is its own:
``added`` is the peak during ``create_net`` minus the peak before it (the built ``Net``),
``total`` the process peak. The peer is the graph alone: built as ``create_net`` builds it
("graph") and with a naive transitive reduction ("old graph": one ancestor bitset per
op, memory quadratic in a chain's length), the latter up to ``--old-max`` ops. Targets: creation <= 10 us per op and
added memory <= 1 GB at 1,000,000 ops.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from benchmarks import child_env

__all__ = ["main", "chain_net", "branchy_net", "measure"]

SHAPES = ("chain", "branchy")


def chain_net(n: int) -> Any:
    """A :class:`~asyncnet.Net` of ``n`` in-place Scale ops on blob ``x``."""
    import asyncnet as an

    net = an.Net(f"chain{n}", type="async_scheduling", num_workers=1)
    for _ in range(n):
        net.Scale("x", "x", scale=1.0)
    return net


def branchy_net(n: int) -> Any:
    """A Net of ``n // 5`` blocks: four Scale branches of ``x`` summed back into ``x``."""
    import asyncnet as an

    net = an.Net(f"branchy{n}", type="async_scheduling", num_workers=1)
    ys = [f"y{i}" for i in range(4)]
    for _ in range(max(1, n // 5)):
        for y in ys:
            net.Scale("x", y, scale=0.25)
        net.Sum(ys, "x")
    return net


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _old_reduction(parents: list[list[int]]) -> list[list[int]]:
    ancestors: list[int] = []
    out: list[list[int]] = []
    for ps in parents:
        covered, kept = 0, []
        for p in sorted(set(ps), reverse=True):
            if not (covered >> p) & 1:
                kept.append(p)
                covered |= ancestors[p] | (1 << p)
        ancestors.append(covered)
        out.append(kept)
    return out


def measure(n: int, shape: str, what: str = "create_net") -> dict[str, Any]:
    """Build the net, then create it (``what="create_net"``) or build only its graph, the new
    way (``"graph"``) or with one ancestor bitset per op (``"old graph"``); meaningful in a fresh process
    only (peak memory is the process's)."""
    import gc

    import asyncnet as an
    import asyncnet.exec.graph as graph_mod

    net = (chain_net if shape == "chain" else branchy_net)(n)
    n_ops = len(net.ops)
    gc.collect()
    before = _maxrss_mb()
    t = time.perf_counter()
    chains = None
    if what != "create_net":
        gc.disable()
        io = [(op.inputs, op.outputs, op.control_inputs) for op in net.ops]
        if what == "old graph":
            graph_mod.transitive_reduction = _old_reduction  # this child process only
        chains = len(graph_mod.build_graph(io).chains)
        gc.enable()
    else:
        ws = an.Workspace()
        instance = ws.create_net(net)
        chains = instance.num_chains
    seconds = time.perf_counter() - t
    peak = _maxrss_mb()
    return {
        "shape": shape,
        "ops": n_ops,
        "what": what,
        "seconds": seconds,
        "us_per_op": seconds / n_ops * 1e6,
        "added_mb": peak - before,
        "total_mb": peak,
        "chains": chains,
    }


def _run_child(n: int, shape: str, what: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.netsize", "--child", str(n), shape, what]
    out = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"net-size subprocess ({shape}, {n} ops) failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def _table(rows: list[dict[str, Any]], load: tuple[float, float, float]) -> str:
    lines = [
        f"create_net scaling (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; each row a fresh process)",
        f"{'shape':8s} {'ops':>9s} {'what':12s} {'us/op':>8s} {'added MB':>9s} {'total MB':>9s}",
    ]
    for r in rows:
        lines.append(
            f"{r['shape']:8s} {r['ops']:9d} {r['what']:12s} {r['us_per_op']:8.2f} {r['added_mb']:9.0f} {r['total_mb']:9.0f}"
        )
    lines.append(
        "targets at 1e6 ops (chain): create_net <= 10 us/op, added <= 1024 MB; "
        "'graph' and 'old graph' build only the graph (hazards, reduction, chains / one ancestor bitset per op)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks netsize", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quick", action="store_true", help="sizes 1e3 and 1e4 only (a smoke run)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="op counts (default 1e3 1e4 1e5 1e6)")
    p.add_argument("--old-max", type=int, default=50_000, help="largest size the old-graph peer runs at")
    p.add_argument("--child", nargs=3, metavar=("N", "SHAPE", "WHAT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(int(args.child[0]), args.child[1], args.child[2])))
        return 0
    sizes = args.sizes or ([1000, 10_000] if args.quick else [1000, 10_000, 100_000, 1_000_000])
    rows = []
    for shape in SHAPES:
        for n in sizes:
            rows.append(_run_child(n, shape, "create_net"))
            rows.append(_run_child(n, shape, "graph"))
            if n <= args.old_max:
                rows.append(_run_child(n, shape, "old graph"))
    load = os.getloadavg()
    print(json.dumps({"load_average": load, "rows": rows}, indent=2) if args.json else _table(rows, load))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
