"""Two threads on the DLRM's sparse ops: each op run on two tables at once against one after the other.

    python -m benchmarks sparse_threads [--rounds 5] [--steps 20] [--rows 100000] [--quick]

For each op (the lookup SparseLengthsSum, the updates SparseAdagrad, ScatterWeightedSum and
SparseSGDFusedWithSparseLengthsSumGradient, the dense FC as a control), two straight nets on two tables of ``rows`` x 64 float32 (a batch of 512
bags of 20 ids) run ``steps`` times one after the other, then the same on two threads at once,
in interleaved rounds, single-threaded BLAS. The ratio of the two times is the speedup two
threads get on that op: about 2x for an op that releases the GIL and has the memory to itself,
1x or below for one that holds the GIL between short numpy calls. Prints the median per op and
the load average.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

BATCH, IDS, WIDTH = 512, 20, 64


def _feed(ws, t: int, rows: int, rng: np.random.Generator) -> None:
    ws.feed(f"w{t}", rng.normal(size=(rows, WIDTH)).astype(np.float32))
    ws.feed(f"m{t}", np.zeros((rows, WIDTH), np.float32))
    ws.feed(f"ids{t}", rng.integers(0, rows, size=BATCH * IDS).astype(np.int64))
    ws.feed(f"len{t}", np.full(BATCH, IDS, np.int32))
    ws.feed(f"g{t}", rng.normal(size=(BATCH * IDS, WIDTH)).astype(np.float32))
    ws.feed(f"dy{t}", rng.normal(size=(BATCH, WIDTH)).astype(np.float32))
    ws.feed(f"x{t}", rng.normal(size=(BATCH, 512)).astype(np.float32))
    ws.feed(f"fw{t}", rng.normal(size=(256, 512)).astype(np.float32))
    ws.feed(f"fb{t}", np.zeros(256, np.float32))


def _net(an, op: str, t: int):
    net = an.Net(f"{op}{t}", type="straight")
    if op == "SparseLengthsSum":
        net.SparseLengthsSum([f"w{t}", f"ids{t}", f"len{t}"], f"y{t}")
    elif op == "SparseAdagrad":
        net.SparseAdagrad([f"w{t}", f"m{t}", f"ids{t}", f"g{t}", "lr"], [f"w{t}", f"m{t}"], epsilon=1e-8)
    elif op == "ScatterWeightedSum":
        net.ScatterWeightedSum([f"w{t}", "one", f"ids{t}", f"g{t}", "neg_lr"], f"w{t}")
    elif op == "SparseSGDFused":  # the DLRM train net's table update, straight from the pooled gradient
        net.SparseSGDFusedWithSparseLengthsSumGradient([f"w{t}", f"ids{t}", f"dy{t}", "neg_lr", f"len{t}"], f"w{t}")
    else:
        net.FC([f"x{t}", f"fw{t}", f"fb{t}"], f"h{t}")
    return net


def _loop(net, steps: int) -> None:
    for _ in range(steps):
        net.run()


def _serial(nets: list, steps: int) -> None:
    for net in nets:
        _loop(net, steps)


def _parallel(nets: list, steps: int) -> None:
    threads = [threading.Thread(target=_loop, args=(net, steps)) for net in nets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--quick", action="store_true", help="a smoke run: small tables, 1 round of 2 steps")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from benchmarks._single import rerun_single_threaded

    status = rerun_single_threaded("benchmarks.sparse_threads", argv)
    if status is not None:
        return status
    if args.quick:
        args.rounds, args.steps, args.rows = 1, 2, 1000
    import asyncnet as an
    from asyncnet.tensor.threads import claim_threads

    rng = np.random.default_rng(0)
    load_before = " ".join(open("/proc/loadavg").read().split()[:3])
    with claim_threads(workers=2), an.Workspace() as ws:
        ws.feed("lr", np.array([0.01], np.float32))
        ws.feed("one", np.array([1.0], np.float32))
        ws.feed("neg_lr", np.array([-0.01], np.float32))
        for t in range(2):
            _feed(ws, t, args.rows, rng)
        for op in ("SparseLengthsSum", "SparseAdagrad", "ScatterWeightedSum", "SparseSGDFused", "FC"):
            nets = [ws.create_net(_net(an, op, t)) for t in range(2)]
            _serial(nets, args.steps)
            serial, parallel = [], []
            for _ in range(args.rounds):  # interleaved
                serial.append(_timed(lambda n=nets: _serial(n, args.steps)))
                parallel.append(_timed(lambda n=nets: _parallel(n, args.steps)))
            ratios = [s / p for s, p in zip(serial, parallel)]
            per_op = 1e3 * statistics.median(serial) / (2 * args.steps)
            print(
                f"{op:<20} {per_op:6.2f} ms an op; two tables on two threads at once: "
                f"{statistics.median(ratios):.2f}x one after the other"
            )
    print(f"load average before {load_before}, after {' '.join(open('/proc/loadavg').read().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
