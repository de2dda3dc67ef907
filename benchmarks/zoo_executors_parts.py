"""Where a zoo train step's time goes, per tensor library: feed, run and fetch, and the shadow's share.

    python -m benchmarks zoo_executors_parts [--model mlp] [--net straight,simple] [--rounds 9] [--steps 40]
                                             [--parallel] [--json]

Each (tensor library, net type) gets one worker (:func:`benchmarks._zoo_worker.zoo_worker`);
each round runs ``--steps`` steps on every worker in turn and times, on this thread's CPU clock
(robust to other processes' load; every part runs on this thread), the batch feeds, the train
net's ``run()`` and the loss and accuracy reads; the table gives each part's median microseconds
per step over the rounds after a warm-up round. ``--parallel``: async_scheduling's parallel
runs on torch tensors with the shadow (:mod:`asyncnet.tensor.shadow`) against the op-by-op
routed kernels, interleaved, on the process's CPU clock (the pool thread's time included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any


def parts(model: str, nets: list[str], rounds: int, steps: int) -> list[dict[str, Any]]:
    """Median microseconds per step of feed, run and fetch for each (tensor, net type)."""
    from benchmarks._zoo_worker import zoo_worker

    workers = {(t, nt): zoo_worker(model, t, nt, steps)[:2] for t in ("numpy", "torch") for nt in nets}
    times: dict[tuple[str, str], list[tuple[float, float, float]]] = {k: [] for k in workers}
    clock = time.thread_time
    try:
        for r in range(rounds + 1):
            for key, (w, batches) in workers.items():
                tf = tr = tg = 0.0
                for xb, yb in batches:
                    t0 = clock()
                    for name, value in w._feeds(xb, yb).items():
                        w.ws.feed(name, w._to_tensor(value))
                    t1 = clock()
                    w.train_net.run()
                    t2 = clock()
                    float(w.ws.fetch(w._loss))
                    w._accuracy(yb)
                    tg += clock() - t2
                    tf, tr = tf + t1 - t0, tr + t2 - t1
                if r:
                    times[key].append((tf / len(batches), tr / len(batches), tg / len(batches)))
    finally:
        for w, _ in workers.values():
            w.close()
    rows = []
    for (t, nt), v in times.items():
        feed, run, fetch = (statistics.median(x[i] for x in v) * 1e6 for i in range(3))
        rows.append({"model": model, "tensor": t, "net_type": nt, "feed_us": feed, "run_us": run, "fetch_us": fetch})
    return rows


def parallel_shadow(model: str, rounds: int, steps: int) -> dict[str, Any]:
    """Median process-CPU microseconds of async_scheduling's parallel runs on torch tensors, with
    the shadow and op by op (interleaved rounds)."""
    from asyncnet.exec import scheduling
    from asyncnet.tensor import shadow
    from benchmarks._zoo_worker import zoo_worker

    w, batches, _ = zoo_worker(model, "torch", "async_scheduling", steps)
    res: dict[bool, list[float]] = {True: [], False: []}
    old = shadow.ENABLED
    try:
        for r in range(rounds + 1):
            for on in (True, False):
                shadow.ENABLED = on
                took = 0.0
                for xb, yb in batches:
                    for name, value in w._feeds(xb, yb).items():
                        w.ws.feed(name, w._to_tensor(value))
                    t0 = time.process_time()
                    scheduling.run_helped(w.train_net)
                    took += time.process_time() - t0
                if r:
                    res[on].append(took / len(batches) * 1e6)
    finally:
        shadow.ENABLED = old
        w.close()
    on, off = statistics.median(res[True]), statistics.median(res[False])
    return {"model": model, "shadow_us": on, "op_by_op_us": off, "speedup": off / on}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp")
    p.add_argument("--net", default="straight,simple")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--parallel", action="store_true", help="async_scheduling's parallel runs: shadow vs op by op")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds and steps")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from benchmarks._single import rerun_single_threaded

    status = rerun_single_threaded("benchmarks.zoo_executors_parts", argv)
    if status is not None:
        return status
    if args.quick:
        args.rounds, args.steps = min(args.rounds, 1), min(args.steps, 5)
    import torch

    torch.set_num_threads(1)
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    out: dict[str, Any] = {"load_average": load}
    for m in args.model.split(","):
        out.setdefault("parts", []).extend(parts(m, args.net.split(","), args.rounds, args.steps))
        if args.parallel:
            out.setdefault("parallel", []).append(parallel_shadow(m, args.rounds, args.steps))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"us per step (median of {args.rounds} rounds of {args.steps} steps, thread CPU clock); load {load}")
    for r in out["parts"]:
        total = r["feed_us"] + r["run_us"] + r["fetch_us"]
        print(
            f"{r['model']:<6}{r['tensor']:<7}{r['net_type']:<18}feed {r['feed_us']:7.1f}  run {r['run_us']:8.1f}"
            f"  fetch {r['fetch_us']:6.1f}  total {total:8.1f}"
        )
    for r in out.get("parallel", []):
        print(
            f"{r['model']:<6}async_scheduling parallel on torch: shadow {r['shadow_us']:.1f} us, "
            f"op by op {r['op_by_op_us']:.1f} us ({r['speedup']:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
