"""8 independent 500x500 float64 MatMuls, simple vs async_scheduling with 2 workers, single-threaded BLAS.

    python -m benchmarks branches [--rounds 15] [--size 500] [--branches 8]

Both nets are warmed up (async_scheduling measures its chains and decides in line or parallel:
here parallel), then run in interleaved rounds; the medians, their ratio and the policy chosen
are printed with the load average. Target: async_scheduling >= 1.8x simple on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--size", type=int, default=500)
    p.add_argument("--branches", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds and steps")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from benchmarks._single import rerun_single_threaded

    status = rerun_single_threaded("benchmarks.branches", argv)  # one BLAS thread: a child with the variables set
    if status is not None:
        return status
    if args.quick:
        args.rounds = min(args.rounds, 1)
        args.size = min(args.size, 200)
    import asyncnet as an

    a = np.random.default_rng(0).standard_normal((args.size, args.size)) / args.size
    with an.Workspace() as ws:
        ws.feed("a", a)
        nets = {}
        for kind in ("simple", "async_scheduling"):
            net = an.Net(f"br_{kind}", type=kind, num_workers=2)
            for i in range(args.branches):
                net.MatMul(["a", "a"], f"m{i}")
            nets[kind] = ws.create_net(net)
            for _ in range(3):
                nets[kind].run()
        times: dict[str, list[float]] = {k: [] for k in nets}
        for _ in range(args.rounds):
            for k, n in nets.items():
                start = time.perf_counter()
                n.run()
                times[k].append(time.perf_counter() - start)
        policy = nets["async_scheduling"].policy.mode
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
    print(
        f"{args.branches} x MatMul {args.size}x{args.size}: simple {med['simple']:.1f} ms, async_scheduling "
        f"{med['async_scheduling']:.1f} ms ({policy}), speedup {med['simple'] / med['async_scheduling']:.2f}x; load {load}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
