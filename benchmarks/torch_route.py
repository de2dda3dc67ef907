"""Training steps on torch CPU tensors with and without op routing (asyncnet.tensor.route), beside numpy arrays.

    python -m benchmarks torch_route [--model mlp,cnn,lstm,dlrm] [--rounds 7] [--steps 30] [--clock wall|cpu]

One worker per library (the trainers' WorkerNets, local mode, straight executor, one BLAS and
one torch thread); each round runs ``--steps`` steps on numpy arrays, on torch tensors with
routing (each op on the library measured faster for it, the whole run on numpy views:
:mod:`asyncnet.tensor.shadow`), on torch tensors routed op by op (:data:`asyncnet.tensor.shadow.ENABLED`
off) and on torch tensors with every op on torch's own kernel (:data:`asyncnet.tensor.route.ENABLED`
off), and the model's torch twin in a PyTorch eager loop (:mod:`benchmarks.peers.torch_twins`:
the same initial weights, batches and ``torch.optim`` optimizer, one intra-op thread; a step is
the batch's feeds, the step and the loss read), interleaved; the medians of the rounds after the
first and their ratio to numpy are printed with the load. ``--clock cpu`` times the process's CPU time, which other jobs on a
shared machine do not inflate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.zoo_executors import CLOCK_HELP


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp,cnn,lstm,dlrm")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help=CLOCK_HELP)
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds and steps")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from benchmarks._single import rerun_single_threaded

    status = rerun_single_threaded("benchmarks.torch_route", argv)  # one BLAS thread: a child with the variables set
    if status is not None:
        return status
    if args.quick:
        args.rounds = min(args.rounds, 1)
        args.steps = min(args.steps, 5)
    import torch

    from asyncnet.tensor import route, shadow
    from benchmarks._zoo_worker import zoo_worker

    torch.set_num_threads(1)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for m in args.model.split(","):
        workers = {}
        for t in ("numpy", "torch"):
            workers[t], batches, bs = zoo_worker(m, t, "straight", args.steps)
        speed: dict[str, list[float]] = {
            "numpy": [],
            "torch routed": [],
            "torch op by op": [],
            "torch own kernels": [],
            "torch eager": [],
        }
        eager = eager_step(m, workers["torch"])
        try:
            for r in range(args.rounds + 1):
                for row in speed:
                    w = workers["numpy" if row == "numpy" else "torch"]
                    step = eager if row == "torch eager" else w.step
                    route.ENABLED = row != "torch own kernels"
                    shadow.ENABLED = row != "torch op by op"
                    start = clock()
                    for xb, yb in batches:
                        step(xb, yb)
                    if r:
                        speed[row].append(len(batches) * bs / (clock() - start))
        finally:
            route.ENABLED = shadow.ENABLED = True
            for w in workers.values():
                w.close()
        base = statistics.median(speed["numpy"])
        print(
            f"{m:<5} "
            + "  ".join(
                f"{k} {statistics.median(v):>9,.0f} ({statistics.median(v) / base:.2f}x)" for k, v in speed.items()
            )
            + f"  routed/eager {statistics.median(speed['torch routed']) / statistics.median(speed['torch eager']):.2f}x"
        )
    print(
        f"samples/s, medians of interleaved rounds, {args.clock} clock; load "
        + " ".join(open("/proc/loadavg").read().split()[:3])
    )
    return 0


def eager_step(model: str, worker: Any) -> Callable[[Any, Any], float]:
    """``step(xb, yb)`` of ``model``'s torch twin in eager, from ``worker``'s initial parameters,
    with the worker's optimizer and learning rate (``torch.optim``)."""
    import numpy as np
    import torch

    from asyncnet.train.data import dataset_for, load_clicks
    from benchmarks.models import _torch_optimizer
    from benchmarks.peers.torch_twins import torch_twin

    ds = load_clicks(20000, 1000) if model == "dlrm" else dataset_for(model)  # the feeds of zoo_worker's data
    net = torch_twin(model, {p: np.array(worker.ws.fetch(p, host=True), copy=True) for p in worker.model.params})
    opt = _torch_optimizer(torch, net, worker.cfg)

    def step(xb: Any, yb: Any) -> float:
        feeds = ds.feeds(xb, yb)
        opt.zero_grad(set_to_none=True)
        loss = net.loss(feeds)
        loss.backward()
        opt.step()
        return loss.item()

    return step


if __name__ == "__main__":
    sys.exit(main())
