"""Cost-model validation: ``python -m benchmarks scaling [--json] [--quick] [--ranks 1 2 4]``;
``--hybrid`` validates the hybrid-parallel dlrm's model (all-to-all) on 1 and 2 ranks instead.

Measures the wide MLP (64-1024-1024-10, ``--batch`` 512 per rank, SGD) trained on 1, 2 and 4
gloo ranks on 127.0.0.1 (one BLAS thread each, async_scheduling nets), with and without
overlap, and compares each median step time with what :mod:`asyncnet.simulate` predicts from
inputs measured in the same run: the compute of one step (forward, backward, update: the
1-rank run's forward, gradient and train nets without sync) and the network's latency and
bandwidth (2 ranks, ring, p = 2: a 4-byte all-reduce right after a barrier gives the latency;
the same and a 4 MiB one, each issued after a 512 x 1024 x 1024 GEMM on every rank as a step's
all-reduce follows its backward pass, give the wake-up each all-reduce pays once and the
bandwidth: on this VM an all-reduce after compute, with gloo's threads asleep and idle vCPUs
halted, takes 1-4 ms more than right after a barrier; ``--warm-network`` probes without the
GEMM), and the CPU time those take
from their rank (process CPU time, gloo's threads included: ``cpu_per_message``,
``cpu_per_byte``), which competes with the compute when the ranks fill the cores. The machine's cores bound
the ranks' compute (4 ranks on 2 cores run at half speed). A second prediction counts the
cores other jobs take from the ranks: its compute is the process CPU time of the R-rank run's
nets without sync (what a rank's compute costs, whatever the load), and its cores are those
the R ranks got while computing, ``R x compute CPU / compute wall`` (at most the machine's),
so the model predicts the slowdown, the communication, its CPU cost and the overlap from
them. Target: every prediction within 25% of the measurement. The nets (and probes) take turns each round, a barrier starting each
on every rank together; medians of rank 0.

The measurements are :mod:`asyncnet.simulate.measure`'s, which also gives
:command:`asyncnet simulate` its measured inputs (``--profile``, ``--measure-network``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from asyncnet.simulate.measure import cores_got, network_from, run_ranks, workload_from
from asyncnet.simulate.model import step_seconds

__all__ = ["main", "validate"]


def validate(ranks: list[int], batch: int, bucket_mb: float, steps: int, after_compute: bool = True) -> dict[str, Any]:
    runs = {r: run_ranks(r, "all" if r == 2 else "steps", batch, bucket_mb, steps, after_compute) for r in ranks}
    one = runs.get(1) or run_ranks(1, "steps", batch, bucket_mb, steps)
    two = runs.get(2) or run_ranks(2, "network", batch, bucket_mb, steps, after_compute)
    work, net = workload_from(one, batch, bucket_mb), network_from(two)
    cores = os.cpu_count() or 1
    rows = []
    for r, m in runs.items():
        here, got = workload_from(m, batch, bucket_mb, "_cpu"), cores_got(m, r, cores)  # as the r-rank run had them
        for overlap, key in ((False, "no_overlap_s"), (True, "overlap_s")):
            pred = step_seconds(work, r, net, overlap=overlap, cores_per_host=cores, ranks_per_host=r)
            pred_here = step_seconds(here, r, net, overlap=overlap, cores_per_host=got, ranks_per_host=r)  # type: ignore[arg-type]
            rows.append(
                {
                    "ranks": r,
                    "overlap": overlap,
                    "measured_s": m[key],
                    "predicted_s": pred,
                    "error": pred / m[key] - 1,
                    "predicted_here_s": pred_here,
                    "error_here": pred_here / m[key] - 1,
                    "cores_got": got,
                    "compute_cpu_s": here.compute,
                }
            )
    return {
        "workload": work.__dict__,
        "network": net.__dict__,
        "network_after_compute": after_compute,
        "cores": cores,
        "rows": rows,
        "load_average": os.getloadavg(),
    }


def _table(res: dict[str, Any]) -> str:
    w, n, la = res["workload"], res["network"], res["load_average"]
    lines = [
        f"inputs: forward {w['forward'] * 1e3:.2f} ms, backward {w['backward'] * 1e3:.2f} ms, update "
        f"{w['update'] * 1e3:.2f} ms, {w['grad_bytes'] / 2**20:.2f} MiB of gradients in buckets of "
        f"{w['bucket_bytes'] / 2**20:g} MiB; gloo 127.0.0.1 ({'after compute' if res.get('network_after_compute', True) else 'warm'}): wake-up {n.get('wakeup', 0.0) * 1e6:.0f} us, latency {n['latency'] * 1e6:.0f} us, bandwidth "
        f"{n['bandwidth'] / 1e9:.2f} GB/s, CPU {n['cpu_per_message'] * 1e6:.0f} us per message + "
        f"{n['cpu_per_byte'] * 2**20 * 1e3:.2f} ms per MiB; {res['cores']} cores; load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}",
        f"{'ranks':>5s} {'overlap':>7s} {'measured ms':>11s} {'predicted ms':>12s} {'error':>7s} "
        f"{'predicted (cores got) ms':>24s} {'error':>7s} {'cores got':>9s}",
    ]
    for r in res["rows"]:
        lines.append(
            f"{r['ranks']:5d} {('yes' if r['overlap'] else 'no'):>7s} {r['measured_s'] * 1e3:11.2f} "
            f"{r['predicted_s'] * 1e3:12.2f} {r['error'] * 100:+6.1f}% {r['predicted_here_s'] * 1e3:24.2f} "
            f"{r['error_here'] * 100:+6.1f}% {r['cores_got']:9.2f}"
        )
    lines.append(
        "target: every |error| <= 25%. 'predicted': compute from the 1-rank run, slowed when ranks "
        "outnumber the machine's cores; 'cores got': the R-rank run's compute CPU time, on the cores its "
        "ranks got (other jobs took the rest), the model predicting slowdown, communication and its CPU cost"
    )
    return "\n".join(lines)


HYBRID_LARGE = (
    "random:tables=" + "-".join(["100000"] * 8) + ",dense=13,batches=4,batch=512,indices=20",
    {"dim": 64, "bottom": [512, 256], "top": [512, 256]},
)
HYBRID_SMALL = ("random:tables=200-200-200-200,dense=4,batches=4,batch=64", {"dim": 8, "bottom": [16], "top": [16]})


def _hybrid_table(res: dict[str, Any]) -> str:
    w, n, la = res["workload"], res["network"], res["load_average"]
    lines = [
        f"inputs: lookup {w['lookup'] * 1e3:.2f} ms, dense {w['dense'] * 1e3:.2f} ms, update {w['update'] * 1e3:.2f} ms "
        f"(one process, global batch {w['batch']}), {w['tables']} tables of width {w['dim']}, "
        f"{w['grad_bytes'] / 2**20:.2f} MiB all-reduced, {w['call'] * 1e3:.2f} ms per collective call; gloo "
        f"({'after compute' if res['network_after_compute'] else 'warm'}): wake-up {n['wakeup'] * 1e6:.0f} us, "
        f"latency {n['latency'] * 1e6:.0f} us, bandwidth {n['bandwidth'] / 1e9:.2f} GB/s; {res['cores']} cores; "
        f"load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}",
        f"{'ranks':>5s} {'measured ms':>11s} {'predicted ms':>12s} {'error':>7s} {'predicted (cores got) ms':>24s} "
        f"{'error':>7s}",
    ]
    for r in res["rows"]:
        lines.append(
            f"{r['ranks']:5d} {r['measured_s'] * 1e3:11.2f} {r['predicted_s'] * 1e3:12.2f} {r['error'] * 100:+6.1f}% "
            f"{r['predicted_here_s'] * 1e3:24.2f} {r['error_here'] * 100:+6.1f}%"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quick", action="store_true", help="batch 64, 3 steps, ranks 1 and 2 (a smoke run)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4], help="rank counts to measure")
    p.add_argument("--batch", type=int, default=512, help="examples per rank and step")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="bucket size of the overlapped net (MiB)")
    p.add_argument("--steps", type=int, default=15, help="measured steps per net (the median is kept)")
    p.add_argument(
        "--warm-network",
        action="store_true",
        help="probe the network right after a barrier (faster than any step's all-reduce here)",
    )
    p.add_argument(
        "--hybrid",
        action="store_true",
        help="the hybrid-parallel dlrm (8 tables of 100,000 x 64, batch 512; --quick: a small one) on 1 and 2 "
        "ranks against the all-to-all model",
    )
    args = p.parse_args(argv)
    if args.hybrid:
        from asyncnet.simulate.measure import validate_hybrid

        spec, dims = HYBRID_SMALL if args.quick else HYBRID_LARGE
        batch = 64 if args.quick else 512
        res = validate_hybrid(spec, batch, 3 if args.quick else args.steps, dims, after_compute=not args.warm_network)
        print(json.dumps(res, indent=2) if args.json else _hybrid_table(res))
        return 0
    if args.quick:
        args.batch, args.steps, args.ranks = 64, 3, [1, 2]
    res = validate(args.ranks, args.batch, args.bucket_mb, args.steps, after_compute=not args.warm_network)
    print(json.dumps(res, indent=2) if args.json else _table(res))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
