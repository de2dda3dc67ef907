"""Training benchmark: samples/s and time to 95% test accuracy, local vs sync vs Hogwild.

    python -m benchmarks train [--json] [--quick] [--backend threads|processes|both]

All modes train the same MLP on the embedded digits, in one run, with single-threaded BLAS
(the benchmark re-runs itself in a child process with OMP/OPENBLAS/MKL_NUM_THREADS=1 unless
they are already 1), so "2 workers" means 2 cores' worth of kernels and nothing hides in a
BLAS thread pool. For each mode it reports:

- samples/s: training samples per second of training time (evaluation excluded), over the
  epochs after the first (which warms caches and pools up);
- epochs and seconds to 95%: the first epoch whose test accuracy reaches 95%, and the training
  seconds up to the end of that epoch;
- the final and best test accuracy.

Peers in the same run (``--no-peers`` skips them): a hand-written numpy loop (the
floor), plain PyTorch eager, and asyncnet local on torch CPU tensors, on the same MLP, data,
batches and initial weights.

The rows run the trainer as users get it: by default (no ``--net-type``) the nets run on the
straight-line executor (net type "straight": same ops, order and bits as "simple", compiled
once) wherever one executor thread has nothing to overlap (local, Hogwild, sync with one
all-reduce), else on async_scheduling; ``--net-type`` sets one type for every mode.

Targets: test accuracy >= 95% in every mode; sync with 2 workers >= 1.6x the
samples/s of local; Hogwild reaches the same accuracy; asyncnet local on numpy >= 0.75x
the numpy loop; asyncnet on torch tensors >= 1.0x torch eager. The figures are measured, never asserted
in tests (shared machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from benchmarks._single import single_threaded_main
from benchmarks._table import cell

TARGET = 0.95

# The benchmark model: wide enough that a step is kernel time, not Python time, so the data-
# parallel speed-up shows; it still reaches 95% on digits in a few epochs.
BENCH = dict(hidden=(1024, 1024), batch_size=512, lr=0.5, epochs=10)
QUICK = dict(hidden=(256,), batch_size=128, lr=0.5, epochs=3)
# The default model of ``asyncnet train`` (64-128-10, batch 32): a step is a fraction of a
# millisecond, so a sync round's fixed cost decides whether data parallelism pays.
SMALL = dict(hidden=(128,), batch_size=32, lr=0.2, epochs=10)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks train", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quick", action="store_true", help="a fast smoke run (small model, 3 epochs)")
    p.add_argument(
        "--small",
        action="store_true",
        help="the default model of asyncnet train (64-128-10, batch 32): round latency decides",
    )
    p.add_argument(
        "--backend",
        choices=("threads", "processes", "both"),
        default=None,
        help="where the 2 workers run (default threads, with --small both; both adds the process rows)",
    )
    p.add_argument("--epochs", type=int, default=None, help="epochs per mode")
    p.add_argument("--hidden", default=None, help="hidden sizes, e.g. 1024 or 512,512")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument(
        "--net-type",
        default=None,
        help="executor of every mode's nets (default: the trainers' choice, see TrainConfig.net_type)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="rounds over the modes; each mode's fastest samples/s is kept (default 3, quick 1)",
    )
    p.add_argument("--no-peers", action="store_true", help="skip the numpy loop, torch eager and torch-tensor rows")
    return p.parse_args(argv)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    s = dict(QUICK if args.quick else SMALL if args.small else BENCH)
    if args.epochs is not None:
        s["epochs"] = args.epochs
    if args.hidden is not None:
        s["hidden"] = tuple(int(h) for h in args.hidden.split(","))
    if args.batch_size is not None:
        s["batch_size"] = args.batch_size
    if args.lr is not None:
        s["lr"] = args.lr
    s["net_type"] = args.net_type
    return s


PEERS = {"numpy loop": "numpy_loop", "torch eager": "torch_eager"}


def _modes(backend: str, peers: bool = False) -> list[tuple[str, str, int, str]]:
    backends = ["threads", "processes"] if backend == "both" else [backend]
    rows = [("local", "threads", 1, "numpy")]
    for b in backends:
        rows += [("sync", b, 2, "numpy"), ("hogwild", b, 2, "numpy")]
    if peers:
        rows += [("numpy loop", "-", 1, "numpy"), ("torch eager", "-", 1, "torch"), ("local", "threads", 1, "torch")]
    return rows


def measure(mode: str, backend: str, workers: int, settings: dict[str, Any], tensor: str = "numpy") -> dict[str, Any]:
    """Train one mode and return its figures (a peer row when ``mode`` names a peer)."""
    from asyncnet.train import TrainConfig, train
    from benchmarks import _train_peers

    if mode in PEERS:
        return dict(getattr(_train_peers, PEERS[mode])(settings), epochs_to_95=None, seconds_to_95=None)
    # threads=1: single-threaded kernels as the module docstring says (the trainer would otherwise
    # share the cores out, and 2 torch threads on tiny matrices of a loaded machine cost ~100x)
    cfg = TrainConfig(
        mode=mode, backend=backend, workers=workers, seed=0, trace=False, tensor=tensor, threads=1, **settings
    )
    h = train(cfg).history
    steady = h.epochs[1:] or h.epochs
    seconds = sum(m.seconds for m in steady)
    samples = sum(m.samples for m in steady)
    return {
        "mode": mode if tensor == "numpy" else f"{mode} (torch)",
        "backend": backend if mode != "local" else "-",
        "workers": cfg.num_workers,
        "samples_per_sec": samples / seconds if seconds > 0 else 0.0,
        "epochs_to_95": h.epochs_to(TARGET),
        "seconds_to_95": h.seconds_to(TARGET),
        "final_test_accuracy": h.final.test_accuracy,
        "best_test_accuracy": h.best_test_accuracy,
        "test_accuracy_per_epoch": [round(m.test_accuracy, 4) for m in h.epochs],
        "seconds_per_epoch": [round(m.seconds, 4) for m in h.epochs],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = _settings(args)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.backend is None:
        args.backend = "both" if args.small else "threads"
    modes = _modes(args.backend, peers=not args.no_peers and _has_torch())
    runs: list[list[dict[str, Any]]] = [[] for _ in modes]
    for _ in range(max(1, args.repeat)):  # rounds interleave the modes, so a noisy spell hits all
        for i, (mode, backend, workers, tensor) in enumerate(modes):
            runs[i].append(measure(mode, backend, workers, settings, tensor))
    rows = []
    for r in runs:  # accuracy from the first run (sync and local are deterministic), speed the best
        row = dict(r[0])
        row["samples_per_sec"] = max(x["samples_per_sec"] for x in r)
        row["samples_per_sec_runs"] = [round(x["samples_per_sec"]) for x in r]
        rows.append(row)
    local = rows[0]["samples_per_sec"]
    for r in rows:
        r["speedup_vs_local"] = r["samples_per_sec"] / local if local > 0 else 0.0
    sync_rows = [r for r in rows if r["mode"] == "sync"]
    targets = {
        "accuracy_95_every_mode": all(r["best_test_accuracy"] >= TARGET for r in rows),
        "sync2_speedup_at_least_1.6": any(r["speedup_vs_local"] >= 1.6 for r in sync_rows),
        "hogwild_same_accuracy": all(r["best_test_accuracy"] >= TARGET for r in rows if r["mode"] == "hogwild"),
    }
    if args.small:  # on the default model, 2 sync processes at least as fast as one worker
        targets["sync2_processes_at_least_1.0"] = any(
            r["speedup_vs_local"] >= 1.0 for r in sync_rows if r["backend"] == "processes"
        )
    by_mode = {r["mode"]: r["samples_per_sec"] for r in rows}
    ratios = {}
    if "numpy loop" in by_mode:
        ratios["local_vs_numpy_loop"] = by_mode["local"] / by_mode["numpy loop"]
        ratios["local_torch_vs_torch_eager"] = by_mode["local (torch)"] / by_mode["torch eager"]
        targets["local_at_least_0.75x_numpy_loop"] = ratios["local_vs_numpy_loop"] >= 0.75
        targets["local_torch_at_least_1.0x_torch_eager"] = ratios["local_torch_vs_torch_eager"] >= 1.0
    return {
        "benchmark": "train",
        "dataset": "digits (1438 train / 359 test)",
        "settings": {**settings, "hidden": list(settings["hidden"])},
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
    }


def table(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"training benchmark: MLP 64-{'-'.join(map(str, s['hidden']))}-10 on {result['dataset']}, "
        f"batch {s['batch_size']}, sgd lr {s['lr']}, {s['epochs']} epochs, {s['net_type'] or 'default'} nets, "
        "single-threaded BLAS",
        f"{'mode':<8} {'backend':<10} {'workers':>7} {'samples/s':>11} {'vs local':>9} "
        f"{'epochs to 95%':>14} {'s to 95%':>9} {'final acc':>10} {'best acc':>9}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['mode']:<8} {r['backend']:<10} {r['workers']:>7} {r['samples_per_sec']:>11,.0f} "
            f"{r['speedup_vs_local']:>8.2f}x {cell(r['epochs_to_95'], 'd'):>14} "
            f"{cell(r['seconds_to_95'], '.2f'):>9} {r['final_test_accuracy']:>10.2%} {r['best_test_accuracy']:>9.2%}"
        )
    if result.get("ratios"):
        lines.append("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in result["ratios"].items()))
    lines.append("load average: " + " ".join(f"{x:.2f}" for x in result.get("load_average", [])))
    lines.append("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in result["targets"].items()))
    return "\n".join(lines)


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def main(argv: list[str] | None = None) -> int:
    return single_threaded_main("benchmarks.train", argv, _parse, run, table)


if __name__ == "__main__":
    sys.exit(main())
