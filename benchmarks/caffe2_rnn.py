"""Caffe2's ``rnn_cell.LSTM`` (a ``RecurrentNetwork`` stepping a step net) against asyncnet's
whole-sequence ``LSTM`` operator and ``torch.nn.LSTM`` (one thread): one forward + backward pass of one
LSTM layer over a sequence, char_rnn's sizes by default (T=25, batch 1, 30 inputs, 64 units).

Each peer computes the outputs and the gradients of its weights, input and initial states
for the loss mean(h_all * r), on one thread (numpy's BLAS limited with threadpoolctl, torch's
intra-op threads set to 1). Rounds alternate between the three (so that load on the machine
hits all alike); the median time per pass, the ratios and the load average are printed, or a
JSON object with ``--json``::

    python -m benchmarks caffe2_rnn --seq 25 --batch 1 --dim-in 30 --hidden 64 --iters 50 --rounds 7

``--quick`` (a smoke run, what ``python -m benchmarks all --quick`` uses): 5 passes per round, 3 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _data(t: int, n: int, d: int, h: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((t, n, d)).astype(np.float32),
        "h0": np.zeros((1, n, h), np.float32),
        "c0": np.zeros((1, n, h), np.float32),
        "r": rng.uniform(0.5, 1.5, (t, n, h)).astype(np.float32),
        "lengths": np.full(n, t, np.int32),
        "w_ih": (rng.standard_normal((4 * h, d)) * 0.1).astype(np.float32),
        "w_hh": (rng.standard_normal((4 * h, h)) * 0.1).astype(np.float32),
        "b_ih": np.zeros(4 * h, np.float32),
        "b_hh": np.zeros(4 * h, np.float32),
    }


def caffe2_recurrent_network(data: dict[str, np.ndarray], d: int, h: int) -> Callable[[], None]:
    """rnn_cell.LSTM through RecurrentNetwork, run with caffe2.python.workspace.RunNet."""
    from caffe2.python import model_helper, rnn_cell, workspace

    workspace.SwitchWorkspace("caffe2_rnn_bench", True)
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="caffe2_rnn_bench")
    h_all, *_ = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), d, h, scope="lstm")
    m.AddGradientOperators([m.net.AveragedLoss(m.net.Mul([h_all, "r"], "hr"), "loss")])
    workspace.RunNetOnce(m.param_init_net)
    names = {"w_ih": "lstm/i2h_w", "b_ih": "lstm/i2h_b", "w_hh": "lstm/gates_t_w", "b_hh": "lstm/gates_t_b"}
    for k, v in data.items():
        workspace.FeedBlob(names.get(k, k), v)
    workspace.CreateNet(m.net, overwrite=True)
    name = m.net.Name()
    return lambda: workspace.RunNet(name)


def asyncnet_lstm_op(data: dict[str, np.ndarray], d: int, h: int) -> Callable[[], None]:
    """asyncnet's whole-sequence LSTM op (torch's gate order) and its gradient."""
    import asyncnet as an
    from asyncnet.autodiff import add_gradient_ops

    ws = an.Workspace()
    for k, v in data.items():
        ws.feed(k, v if k not in ("h0", "c0") else v[0])
    net = an.Net("asyncnet_lstm_bench")
    net.LSTM(["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"], ["h_all", "h_last", "c_last", "cache"])
    net.Mul(["h_all", "r"], "hr")
    net.AveragedLoss("hr", "loss")
    add_gradient_ops(net, "loss", wrt=["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"])
    ws.create_net(net)
    return lambda: ws.run_net("asyncnet_lstm_bench")


def torch_lstm(data: dict[str, np.ndarray], d: int, h: int) -> Callable[[], None]:
    """torch.nn.LSTM forward and autograd backward, on one intra-op thread."""
    import torch

    lstm = torch.nn.LSTM(d, h)
    with torch.no_grad():
        for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
            getattr(lstm, f"{'weight' if name[0] == 'w' else 'bias'}_{name[2:]}_l0").copy_(torch.from_numpy(data[name]))
    x = torch.from_numpy(data["x"]).requires_grad_()
    h0 = torch.from_numpy(data["h0"]).requires_grad_()
    c0 = torch.from_numpy(data["c0"]).requires_grad_()
    r = torch.from_numpy(data["r"])

    def step() -> None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the others (2 threads spin against a loaded machine: 100x slower)
        try:
            lstm.zero_grad()
            out, _ = lstm(x, (h0, c0))
            (out * r).mean().backward()
        finally:
            torch.set_num_threads(threads)

    return step


PEERS = {
    "caffe2 RecurrentNetwork": caffe2_recurrent_network,
    "asyncnet LSTM op": asyncnet_lstm_op,
    "torch.nn.LSTM 1t": torch_lstm,
}


def measure(t: int, n: int, d: int, h: int, iters: int, rounds: int) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # numpy's BLAS on one thread too: more spin against a loaded machine
        return _measure(t, n, d, h, iters, rounds)


def _measure(t: int, n: int, d: int, h: int, iters: int, rounds: int) -> dict[str, Any]:
    data = _data(t, n, d, h)
    runs = {}
    for name, make in PEERS.items():
        try:
            runs[name] = make(data, d, h)
        except ImportError:
            continue
        runs[name]()  # warm up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            for _ in range(iters):
                run()
            times[name].append((time.perf_counter() - t0) / iters)
    medians = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    base = medians["caffe2 RecurrentNetwork"]
    from caffe2.python import workspace

    workspace.ResetWorkspace()
    workspace.SwitchWorkspace("default")
    return {
        "seq": t,
        "batch": n,
        "dim_in": d,
        "hidden": h,
        "iters": iters,
        "rounds": rounds,
        "ms_per_pass": medians,
        "ratio_to_recurrent_network": {name: base / m for name, m in medians.items()},
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=25, help="timesteps (default 25)")
    p.add_argument("--batch", type=int, default=1, help="sequences per batch (default 1)")
    p.add_argument("--dim-in", type=int, default=30, help="input features (default 30)")
    p.add_argument("--hidden", type=int, default=64, help="LSTM units (default 64)")
    p.add_argument("--iters", type=int, default=50, help="passes per round (default 50)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a smoke run: 5 passes per round, 3 rounds")
    a = p.parse_args(argv)
    if a.quick:
        a.iters, a.rounds = 5, 3
    r = measure(a.seq, a.batch, a.dim_in, a.hidden, a.iters, a.rounds)
    if a.json:
        print(json.dumps(r))
        return 0
    print(
        f"one LSTM layer, forward + backward: T={a.seq}, batch {a.batch}, {a.dim_in} inputs, {a.hidden} units; "
        f"{a.rounds} rounds x {a.iters} passes, medians"
    )
    for name, ms in r["ms_per_pass"].items():
        ratio = r["ratio_to_recurrent_network"][name]
        print(f"  {name:24s}: {ms:8.3f} ms/pass  ({ratio:5.2f}x RecurrentNetwork's speed)")
    print(f"  load average            : {' '.join(f'{x:.2f}' for x in r['loadavg'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
