"""Benchmark: all-reduce of float32 gradients, asyncnet's backends against torch gloo, in one run.

For each size (1M and 10M float32) and worker count (2 and 4), the time of one mean all-reduce:

- ``limit``: the machine's memory bound. An in-place all-reduce of ``n`` buffers reads and writes
  each once: ``2 x n x bytes`` moved, at the copy bandwidth numpy measures here (``np.copyto`` of
  a 64 MiB buffer, larger than the caches, one thread; best of several);
- ``threads``: :class:`~asyncnet.sync.ThreadedGradientSync` through ``run_parallel_workers``;
- ``procs``: :class:`~asyncnet.sync.ProcessGradientSync`, gradients in private memory (copied
  into shared memory and back every round);
- ``procs-shm``: the same with gradients allocated in the shared arena (``shared_empty``), no copy;
- ``gloo``: ``torch.distributed.all_reduce`` (SUM, then divide) with the gloo backend on
  127.0.0.1, the same number of spawned processes.

Targets: threads >= 60% of the limit, threads >= 3x gloo, processes >= 2x gloo.

``--latency`` measures the other end: the time of one round for small gradients (10k float32,
about the default model's 9,610), where the cost is the barrier, not the memory: 2 and 4
workers, threads, processes and gloo, in microseconds, best of several batches of rounds, with
the load average beside it. Targets: processes <= 1.5x threads and <= 0.1x gloo.

    python -m benchmarks allreduce [--quick] [--latency] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from benchmarks._ranks import free_port

__all__ = ["main"]


def _timed_rounds(sync: Any, grads: np.ndarray, reps: int, batches: int = 2) -> float:
    """Seconds per round on this worker (after a warm-up round), best of ``batches`` batches."""
    sync.sync_gradients(grads)
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(reps):
            sync.sync_gradients(grads)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _sync_worker(sync: Any, size: int, reps: int, arena: bool = False, batches: int = 2) -> float:
    if arena:
        g = sync.shared_empty(size, np.float32)
        g[:] = sync.worker_id
    else:
        g = np.full(size, float(sync.worker_id), np.float32)
    return _timed_rounds(sync, g, reps, batches)


def _gloo_worker(rank: int, world: int, port: int, size: int, reps: int, queue: Any, batches: int = 2) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        t = torch.full((size,), float(rank))

        class _Sync:
            def sync_gradients(self, x: Any) -> None:
                dist.all_reduce(x)
                x.div_(world)

        dist.barrier()
        queue.put((rank, _timed_rounds(_Sync(), t, reps, batches)))
    finally:
        dist.destroy_process_group()


def measure_bandwidth(reps: int, size: int = 16 * 2**20) -> float:
    """Copy bandwidth in bytes/s (read + write) of ``np.copyto`` on ``size`` float32, best of ``reps``."""
    a = np.ones(size, np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best


def measure_sync(backend: str, workers: int, size: int, reps: int, arena: bool = False, batches: int = 2) -> float:
    from asyncnet.sync import run_parallel_workers

    fn = functools.partial(_sync_worker, size=size, reps=reps, arena=arena, batches=batches)
    return max(run_parallel_workers(workers, fn, backend=backend, timeout=120))


def measure_gloo(workers: int, size: int, reps: int, batches: int = 2) -> float | None:
    try:
        import torch.distributed as dist  # noqa: F401
    except ImportError:
        return None
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [
        ctx.Process(target=_gloo_worker, args=(r, workers, port, size, reps, queue, batches)) for r in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        if p.is_alive():
            p.kill()
            p.join()
    times = []
    while not queue.empty():
        times.append(queue.get()[1])
    if len(times) != workers:
        return None
    return max(times)


def run(sizes: list[int], worker_counts: list[int], reps: int, gloo: bool) -> list[dict[str, Any]]:
    rows = []
    bandwidth = measure_bandwidth(max(5, reps))
    for size in sizes:
        for n in worker_counts:
            row: dict[str, Any] = {"size": size, "workers": n, "bytes": size * 4}
            row["limit_ms"] = 2 * n * size * 4 / bandwidth * 1e3
            row["bandwidth_gbs"] = bandwidth / 1e9
            row["threads_ms"] = measure_sync("threads", n, size, reps) * 1e3
            row["procs_ms"] = measure_sync("processes", n, size, reps) * 1e3
            row["procs_shm_ms"] = measure_sync("processes", n, size, reps, arena=True) * 1e3
            g = measure_gloo(n, size, reps) if gloo else None
            row["gloo_ms"] = None if g is None else g * 1e3
            row["threads_pct_of_limit"] = 100 * row["limit_ms"] / row["threads_ms"]
            if g is not None:
                row["threads_vs_gloo"] = row["gloo_ms"] / row["threads_ms"]
                row["procs_vs_gloo"] = row["gloo_ms"] / row["procs_ms"]
                row["procs_shm_vs_gloo"] = row["gloo_ms"] / row["procs_shm_ms"]
            rows.append(row)
    return rows


def cell(v: Any, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'size':>6} {'n':>2} {'limit ms':>9} {'threads ms':>11} {'% limit':>8} {'procs ms':>9} "
        f"{'procs-shm ms':>13} {'gloo ms':>8} {'thr/gloo':>9} {'procs/gloo':>11} {'shm/gloo':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        size = f"{r['size'] / 1e6:g}M"
        lines.append(
            f"{size:>6} {r['workers']:>2} {r['limit_ms']:>9.2f} {r['threads_ms']:>11.2f} "
            f"{r['threads_pct_of_limit']:>7.0f}% {r['procs_ms']:>9.2f} {r['procs_shm_ms']:>13.2f} "
            f"{cell(r['gloo_ms'], '8.2f'):>8} {cell(r.get('threads_vs_gloo'), '8.1f') + 'x':>9} "
            f"{cell(r.get('procs_vs_gloo'), '10.1f') + 'x':>11} {cell(r.get('procs_shm_vs_gloo'), '8.1f') + 'x':>9}"
        )
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> dict[str, bool | None]:
    """The issue's targets, checked on every row (None where gloo could not be measured)."""
    have_gloo = all(r.get("threads_vs_gloo") is not None for r in rows)
    return {
        "threads >= 60% of limit": all(r["threads_pct_of_limit"] >= 60 for r in rows),
        "threads >= 3x gloo": all(r["threads_vs_gloo"] >= 3 for r in rows) if have_gloo else None,
        "processes (copy) >= 2x gloo": all(r["procs_vs_gloo"] >= 2 for r in rows) if have_gloo else None,
        "processes (shm arena) >= 2x gloo": all(r["procs_shm_vs_gloo"] >= 2 for r in rows) if have_gloo else None,
    }


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def run_latency(size: int, worker_counts: list[int], reps: int, batches: int, gloo: bool) -> list[dict[str, Any]]:
    """Microseconds per round of ``size`` float32, for each worker count: threads, processes, gloo."""
    rows = []
    for n in worker_counts:
        row: dict[str, Any] = {"size": size, "workers": n, "load_before": _load()}
        row["threads_us"] = measure_sync("threads", n, size, reps, batches=batches) * 1e6
        row["procs_us"] = measure_sync("processes", n, size, reps, batches=batches) * 1e6
        g = measure_gloo(n, size, max(1, reps // 10), batches) if gloo else None
        row["gloo_us"] = None if g is None else g * 1e6
        row["procs_vs_threads"] = row["procs_us"] / row["threads_us"]
        row["procs_vs_gloo"] = None if g is None else row["procs_us"] / row["gloo_us"]
        row["load_after"] = _load()
        rows.append(row)
    return rows


def latency_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'floats':>7} {'n':>2} {'threads us':>11} {'procs us':>9} {'gloo us':>8} {'procs/threads':>14} "
        f"{'procs/gloo':>11}  load average (1/5/15 min) before -> after"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['size']:>7} {r['workers']:>2} {r['threads_us']:>11.1f} {r['procs_us']:>9.1f} "
            f"{cell(r['gloo_us'], '8.1f'):>8} {r['procs_vs_threads']:>13.2f}x "
            f"{cell(r['procs_vs_gloo'], '10.3f') + 'x':>11}  {r['load_before']} -> {r['load_after']}"
        )
    return "\n".join(lines)


def latency_targets(rows: list[dict[str, Any]]) -> dict[str, bool | None]:
    have_gloo = all(r["procs_vs_gloo"] is not None for r in rows)
    return {
        "processes <= 1.5x threads": all(r["procs_vs_threads"] <= 1.5 for r in rows),
        "processes <= 0.1x gloo": all(r["procs_vs_gloo"] <= 0.1 for r in rows) if have_gloo else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks allreduce", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small size, 2 workers, no gloo: a smoke run")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-gloo", action="store_true", help="skip the torch gloo peer")
    parser.add_argument(
        "--latency", action="store_true", help="round latency of 10k floats (2 and 4 workers) instead of bandwidth"
    )
    args = parser.parse_args(argv)
    if args.latency:
        return _main_latency(args)
    if args.quick:
        sizes, counts, reps, gloo = [100_000], [2], 3, False
    else:
        sizes, counts, reps, gloo = [1_000_000, 10_000_000], [2, 4], 10, not args.no_gloo
    started = time.perf_counter()
    rows = run(sizes, counts, reps, gloo)
    result = {
        "benchmark": "allreduce",
        "dtype": "float32",
        "cpus": os.cpu_count(),
        "rows": rows,
        "targets": targets(rows),
        "seconds": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        bw = rows[0]["bandwidth_gbs"] if rows else 0.0
        print(
            f"all-reduce (mean) of float32 gradients, {os.cpu_count()} CPUs, copy bandwidth {bw:.1f} GB/s "
            f"(read + write); ms per round, best of 2 x {reps}"
        )
        print(table(rows))
        _print_targets(result["targets"])
    return 0


def _main_latency(args: argparse.Namespace) -> int:
    counts, reps, batches = ([2], 200, 2) if args.quick else ([2, 4], 200, 30)  # short batches: best of a noisy machine
    gloo = not (args.quick or args.no_gloo)
    started = time.perf_counter()
    rows = run_latency(10_000, counts, reps, batches, gloo)
    result = {
        "benchmark": "allreduce-latency",
        "dtype": "float32",
        "cpus": os.cpu_count(),
        "rows": rows,
        "targets": latency_targets(rows),
        "seconds": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"all-reduce (mean) round latency, {os.cpu_count()} CPUs; microseconds per round, best of "
        f"{batches} x {reps} rounds (gloo: x {max(1, reps // 10)})"
    )
    print(latency_table(rows))
    _print_targets(result["targets"])
    return 0


def _print_targets(targets: dict[str, bool | None]) -> None:
    for name, ok in targets.items():
        print(f"  {name}: {'n/a' if ok is None else ('met' if ok else 'NOT met')}")
