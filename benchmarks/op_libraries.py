"""Which tensor library runs each op of the zoo's train nets faster on the CPU: numpy or torch.

    python -m benchmarks op_libraries [--model mlp,cnn,lstm,dlrm] [--rounds 7] [--reps 50] [--json]

For each zoo model the train net is built and run for a few steps on numpy arrays; then every
op is timed on those blobs and on torch CPU tensors holding the same values, each op's kernel
called directly (``Operator.run``) without any routing (:data:`asyncnet.tensor.route.ENABLED`
off), ``--reps`` calls per sample, numpy and torch alternated over ``--rounds`` rounds, and the
median kept. One BLAS and one torch intra-op thread. The table gives microseconds per call and
torch's time over numpy's: the figures behind :data:`asyncnet.tensor.route.NUMPY_WINS`.
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


def _nets(model: str) -> tuple[Any, Any]:
    """A worker's nets for ``model`` on numpy (simple executor), after three training steps, and its batch size."""
    from benchmarks._zoo_worker import zoo_worker

    w, batches, bs = zoo_worker(model, "numpy", "simple", 3)
    for xb, yb in batches:
        w.step(xb, yb)
    return w, bs


def _as_torch(blobs: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(np.array(v, copy=True)) if isinstance(v, np.ndarray) else v for k, v in blobs.items()}


def _reset(op: Any, blobs: dict[str, Any], snapshot: dict[str, Any], torch_blobs: bool) -> None:
    """The op's inputs and outputs back to the snapshot (in-place updates must not pile up)."""
    for name in (*op.inputs, *op.outputs):
        v = snapshot.get(name)
        if isinstance(v, np.ndarray):
            c = np.array(v, copy=True)
            if torch_blobs:
                import torch

                c = torch.from_numpy(c)
            blobs[name] = c


def _time(op: Any, blobs: dict[str, Any], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        op.run(blobs)
    return (time.perf_counter() - start) / reps


def measure(model: str, rounds: int, reps: int) -> list[dict[str, Any]]:
    """Per op type of ``model``'s train net: median microseconds per call on numpy and torch."""
    from asyncnet.tensor import route

    w, bs = _nets(model)
    try:
        ops = w.train_net.operators
        np_blobs = (
            {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in w.ws._blobs.items()}
            if hasattr(w.ws, "_blobs")
            else dict(w.train_net.blobs)
        )
        t_blobs = _as_torch(np_blobs)
        snapshot = {k: np.array(v, copy=True) for k, v in np_blobs.items() if isinstance(v, np.ndarray)}
        samples: dict[int, dict[str, list[float]]] = {i: {"numpy": [], "torch": []} for i in range(len(ops))}
        was, route.ENABLED = route.ENABLED, False
        try:
            for _ in range(rounds):
                for i, op in enumerate(ops):
                    fn = getattr(op.fn, "__wrapped__", op.fn)
                    saved, op.fn = op.fn, fn
                    try:
                        _reset(op, np_blobs, snapshot, False)
                        samples[i]["numpy"].append(_time(op, np_blobs, reps))
                        _reset(op, t_blobs, snapshot, True)
                        samples[i]["torch"].append(_time(op, t_blobs, reps))
                    finally:
                        op.fn = saved
        finally:
            route.ENABLED = was
    finally:
        w.close()
    by_type: dict[str, dict[str, float]] = {}
    for i, op in enumerate(ops):
        row = by_type.setdefault(op.type, {"numpy": 0.0, "torch": 0.0, "count": 0})
        row["numpy"] += statistics.median(samples[i]["numpy"]) * 1e6
        row["torch"] += statistics.median(samples[i]["torch"]) * 1e6
        row["count"] += 1
    return [
        {
            "model": model,
            "batch": bs,
            "op": t,
            "count": r["count"],
            "numpy_us": round(r["numpy"], 1),
            "torch_us": round(r["torch"], 1),
            "torch_over_numpy": round(r["torch"] / r["numpy"], 2) if r["numpy"] else None,
        }
        for t, r in sorted(by_type.items(), key=lambda kv: -kv[1]["torch"])
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp,cnn,lstm,dlrm")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds and steps")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from benchmarks._single import rerun_single_threaded

    status = rerun_single_threaded("benchmarks.op_libraries", argv)  # one BLAS thread: a child with the variables set
    if status is not None:
        return status
    if args.quick:
        args.rounds = min(args.rounds, 1)
        args.reps = min(args.reps, 3)
    import torch

    torch.set_num_threads(1)
    rows = [r for m in args.model.split(",") for r in measure(m, args.rounds, args.reps)]
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
    if args.json:
        print(json.dumps({"load_average": load, "rows": rows}, indent=2))
        return 0
    print(
        f"op libraries: median us per call, {args.rounds} rounds x {args.reps} calls, one thread; load {' '.join(load)}"
    )
    print(f"{'model':<6}{'op':<40}{'n':>3}{'numpy us':>10}{'torch us':>10}{'torch/numpy':>12}")
    for r in rows:
        ratio = "-" if r["torch_over_numpy"] is None else f"{r['torch_over_numpy']:.2f}"
        print(f"{r['model']:<6}{r['op']:<40}{r['count']:>3}{r['numpy_us']:>10.1f}{r['torch_us']:>10.1f}{ratio:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
