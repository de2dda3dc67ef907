"""What the Caffe2 compatibility layer costs at run time: one net run through
``caffe2.python.workspace.RunNet`` against the same net run through asyncnet's own
``Workspace.run_net``.

The net (an MLP of ``--layers`` FC + Relu pairs on a small batch, so that per-op overhead is
what shows) is built once with ``caffe2.python.core``; the Caffe2 side creates it with
``workspace.CreateNet`` and runs ``workspace.RunNet(name, num_iter)``; the asyncnet side creates
the converted NetDef in an ``asyncnet.Workspace`` holding the same blobs and runs
``ws.run_net(name, num_iter)``. Rounds alternate between the two (so that load on the machine
hits both alike); the medians, their ratio and the load average are printed, or a JSON object
with ``--json``::

    python -m benchmarks caffe2_overhead --layers 8 --iters 200 --rounds 7

``--quick`` (a smoke run, what ``python -m benchmarks all --quick`` uses): 20 runs per round, 3 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np


def build(layers: int, width: int, batch: int) -> tuple[Any, dict[str, np.ndarray]]:
    """The Caffe2 net and the blobs it reads."""
    from caffe2.python import core

    net = core.Net("caffe2_overhead")
    rng = np.random.default_rng(0)
    blobs = {"x": rng.standard_normal((batch, width)).astype(np.float32)}
    h = "x"
    for i in range(layers):
        blobs[f"w{i}"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        blobs[f"b{i}"] = np.zeros(width, np.float32)
        h = net.FC([h, f"w{i}", f"b{i}"], f"fc{i}")
        h = net.Relu(h, f"relu{i}")
    return net, blobs


def measure(layers: int, width: int, batch: int, iters: int, rounds: int) -> dict[str, Any]:
    import asyncnet as an
    from caffe2.python import workspace

    net, blobs = build(layers, width, batch)
    workspace.SwitchWorkspace("caffe2_overhead_bench", True)
    workspace.ResetWorkspace()
    for k, v in blobs.items():
        workspace.FeedBlob(k, v)
    workspace.CreateNet(net, overwrite=True)
    ws = an.Workspace()
    for k, v in blobs.items():
        ws.feed(k, v.copy())
    ws.create_net(net.to_asyncnet())
    name = net.Name()
    workspace.RunNet(name, 10)
    ws.run_net(name, 10)
    caffe2_times, asyncnet_times = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        workspace.RunNet(name, iters)
        caffe2_times.append((time.perf_counter() - t0) / iters)
        t0 = time.perf_counter()
        ws.run_net(name, iters)
        asyncnet_times.append((time.perf_counter() - t0) / iters)
    same = np.array_equal(workspace.FetchBlob(f"relu{layers - 1}"), ws.fetch(f"relu{layers - 1}"))
    ws.close()
    workspace.ResetWorkspace()
    workspace.SwitchWorkspace("default")
    c2, anet = statistics.median(caffe2_times), statistics.median(asyncnet_times)
    return {
        "ops": 2 * layers,
        "batch": batch,
        "width": width,
        "iters": iters,
        "rounds": rounds,
        "caffe2_runnet_us": c2 * 1e6,
        "asyncnet_run_net_us": anet * 1e6,
        "ratio": c2 / anet,
        "same_outputs": bool(same),
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8, help="FC + Relu pairs (default 8)")
    p.add_argument("--width", type=int, default=64, help="features per layer (default 64)")
    p.add_argument("--batch", type=int, default=16, help="rows per batch (default 16)")
    p.add_argument("--iters", type=int, default=200, help="net runs per round (default 200)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a smoke run: 20 runs per round, 3 rounds")
    a = p.parse_args(argv)
    if a.quick:
        a.iters, a.rounds = 20, 3
    r = measure(a.layers, a.width, a.batch, a.iters, a.rounds)
    if a.json:
        print(json.dumps(r))
        return 0
    print(
        f"net: {r['ops']} ops (FC+Relu x {a.layers}), batch {a.batch}, width {a.width}; "
        f"{a.rounds} rounds x {a.iters} runs, medians per run"
    )
    print(f"  caffe2.python.workspace.RunNet : {r['caffe2_runnet_us']:9.1f} us")
    print(f"  asyncnet Workspace.run_net     : {r['asyncnet_run_net_us']:9.1f} us")
    print(f"  ratio caffe2 / asyncnet        : {r['ratio']:9.3f}   (same outputs: {r['same_outputs']})")
    print(f"  load average                   : {' '.join(f'{x:.2f}' for x in r['loadavg'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
