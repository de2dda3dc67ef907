"""The zoo's train nets on each executor at equal work: simple, async_scheduling, straight, on numpy and torch.

    python -m benchmarks zoo_executors [--model mlp,cnn,lstm,dlrm] [--tensor numpy,torch]
                                       [--net simple,async_scheduling,straight] [--rounds 7] [--steps 40] [--json]

For each model one worker (the trainers' :class:`WorkerNets`: the same batch feeds, the step's
loss and accuracy read) is built per (tensor library, net type), all from the same seed; each
round runs ``--steps`` training steps on every one of them in turn (interleaved, so a noisy
spell hits them all), and the table gives the median samples/s over the rounds after a
warm-up round and the ratio to the first net type. One BLAS and one torch thread per kernel;
async_scheduling has the trainers' 2 executor threads (a pool thread plus the caller).
Targets: async_scheduling >= 0.95x simple on every model and library; torch within 10% of numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

#: --clock cpu: the process's CPU time (time.process_time) instead of the wall clock; on a shared
#: machine it leaves out the time other processes take the cores, but it adds every thread's time
CLOCK_HELP = "wall: time.perf_counter; cpu: the process's CPU time (robust to other load; sums threads)"


def _workers(models: list[str], tensors: list[str], nets: list[str], steps: int) -> dict[tuple[str, str, str], Any]:
    from benchmarks._zoo_worker import zoo_worker

    out = {}
    for m in models:
        for t in tensors:
            for nt in nets:
                w, batches, _ = zoo_worker(m, t, nt, steps)
                out[(m, t, nt)] = (w, batches)
    return out


def measure(
    models: list[str], tensors: list[str], nets: list[str], rounds: int, steps: int, clock: Any = time.perf_counter
) -> list[dict[str, Any]]:
    """Median samples/s of every (model, tensor, net type) over interleaved rounds, timed by ``clock``."""
    workers = _workers(models, tensors, nets, steps)
    speed: dict[tuple[str, str, str], list[float]] = {k: [] for k in workers}
    modes: dict[tuple[str, str, str], list[str]] = {k: [] for k in workers}
    try:
        for r in range(rounds + 1):  # round 0 warms up (and lets async_scheduling decide in line or not)
            for key, (w, batches) in workers.items():
                start = clock()
                for xb, yb in batches:
                    w.step(xb, yb)
                if r:
                    speed[key].append(sum(len(y) for _, y in batches) / (clock() - start))
                    modes[key].append(_policy(w.train_net).get("policy", ""))
    finally:
        for w, _ in workers.values():
            w.close()
    rows = []
    for (m, t, nt), v in speed.items():
        base = statistics.median(speed[(m, t, nets[0])])
        rows.append(
            {
                **_policy(workers[(m, t, nt)][0].train_net),
                "model": m,
                "tensor": t,
                "net_type": nt,
                "samples_per_sec": statistics.median(v),
                "vs_first": statistics.median(v) / base,
                "runs": [round(x) for x in v],
                "modes": modes[(m, t, nt)],
            }
        )
    return rows


def _policy(net: Any) -> dict[str, Any]:
    """The in-line policy's state at the end of an async_scheduling net's runs: its mode, the
    trials it ran and each mode's figure (us) in the last one; empty for other executors."""
    policy = getattr(net, "policy", None)
    if policy is None:
        return {}
    figures = {("inline" if k else "parallel"): round(v * 1e6, 1) for k, v in policy.figures.items()}
    return {"policy": policy.mode, "trials": policy.trials, "figures_us": figures}


def _print_rounds(rows: list[dict[str, Any]]) -> None:
    """One line per (model, tensor, net type): its samples/s in each round, with the async
    policy's mode after the round where there is one (i: inline, p: parallel, t: trial, w: warm-up)."""
    for r in rows:
        cells = [f"{x:>9,}{(m[:1] if m else ' ')}" for x, m in zip(r["runs"], r["modes"])]
        print(f"  {r['model']}/{r['tensor']}/{r['net_type']:<17}" + "".join(cells))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp,cnn,lstm,dlrm")
    p.add_argument("--tensor", default="numpy,torch")
    p.add_argument("--net", default="simple,async_scheduling,straight")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json", action="store_true")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help=CLOCK_HELP)
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds and steps")
    p.add_argument(
        "--per-round", action="store_true", help="also each round's samples/s, and the async policy's mode after it"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from benchmarks._single import rerun_single_threaded

    status = rerun_single_threaded("benchmarks.zoo_executors", argv)  # one BLAS thread: a child with the variables set
    if status is not None:
        return status
    if args.quick:
        args.rounds = min(args.rounds, 1)
        args.steps = min(args.steps, 5)
    import torch

    torch.set_num_threads(1)
    nets = args.net.split(",")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = measure(args.model.split(","), args.tensor.split(","), nets, args.rounds, args.steps, clock)
    load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
    if args.json:
        print(json.dumps({"load_average": load, "clock": args.clock, "rows": rows}, indent=2))
        return 0
    print(
        f"zoo train nets, median samples/s of {args.rounds} interleaved rounds of {args.steps} steps; "
        f"ratio to {nets[0]}; {args.clock} clock; load {load}"
    )
    print(f"{'model':<6}{'tensor':<7}" + "".join(f"{n:>26}" for n in nets))
    for m in dict.fromkeys(r["model"] for r in rows):
        for t in dict.fromkeys(r["tensor"] for r in rows):
            cells = [next(r for r in rows if r["model"] == m and r["tensor"] == t and r["net_type"] == n) for n in nets]
            print(f"{m:<6}{t:<7}" + "".join(f"{c['samples_per_sec']:>18,.0f} ({c['vs_first']:.2f}x)" for c in cells))
    if args.per_round:
        _print_rounds(rows)
    for r in rows:
        if "policy" in r:
            figures = ", ".join(f"{k} {v:,.0f} us" for k, v in r["figures_us"].items()) or "none"
            print(
                f"{r['model']}/{r['tensor']} async_scheduling: {r['policy']} ({r['trials']} trial(s); figures {figures})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
