"""Executor benchmark: ``python -m benchmarks executor [--json] [--quick]``.

Three measurements, each against peers run in the same process:

(a) chain: per-op time on a 10,000-op linear chain of cheap ops (in-place Scale of a 4-float
    array), "simple" vs "async_scheduling" (caller's thread, and handed to a pool worker).
    Target: async at most 1.3x simple.
(b) fan-out: per-task overhead on a wide fan-out of cheap independent ops (each scales the same
    input into its own output), async (2 workers) vs Dask's threaded scheduler
    (``dask.threaded.get`` on the same graph) vs a ``concurrent.futures`` pool. Overhead is the
    time per task minus the bare kernel call. Target: async at least 20x lower than Dask.
(c) branches: 8 independent branches of ~5 ms MatMul kernels (they release the GIL) with
    single-threaded BLAS, async with 2 workers vs simple. Target: speedup at least 1.8x. BLAS is
    limited with threadpoolctl when installed, else the part runs in a subprocess started with
    OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1.

Every figure is the best of several repeats (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks import child_env

__all__ = ["main"]

BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _best(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_chain(n_ops: int, repeats: int) -> dict[str, Any]:
    """(a) Per-op seconds on a linear chain: simple, async (caller runs it), async (pool worker)."""
    import asyncnet as an

    out: dict[str, Any] = {"ops": n_ops}
    with an.Workspace() as ws:
        ws.feed("x", np.ones(4))
        for kind in ("simple", "async_scheduling"):
            net = an.Net(f"chain_{kind}", type=kind, num_workers=2)
            for _ in range(n_ops):
                net.Scale("x", "x", scale=1.0)
            ws.create_net(net)
        ws.run_net("chain_simple")
        ws.run_net("chain_async_scheduling")
        out["simple_us"] = _best(lambda: ws.run_net("chain_simple"), repeats) / n_ops * 1e6
        out["async_us"] = _best(lambda: ws.run_net("chain_async_scheduling"), repeats) / n_ops * 1e6
        out["async_pool_us"] = _best(lambda: ws.run_net("chain_async_scheduling", timeout=600), repeats) / n_ops * 1e6
    out["ratio"] = out["async_us"] / out["simple_us"]
    out["ratio_pool"] = out["async_pool_us"] / out["simple_us"]
    return out


def _kernel(x: np.ndarray) -> np.ndarray:
    return x * 1.0


def bench_fanout(n_tasks: int, repeats: int, workers: int = 2) -> dict[str, Any]:
    """(b) Per-task seconds and overhead on ``n_tasks`` independent cheap tasks."""
    import asyncnet as an

    x = np.ones(4)
    raw = _best(lambda: [_kernel(x) for _ in range(n_tasks)], repeats) / n_tasks
    res: dict[str, Any] = {"tasks": n_tasks, "workers": workers, "kernel_us": raw * 1e6}
    with an.Workspace() as ws:
        ws.feed("x", x)
        for kind in ("simple", "async_scheduling"):
            net = an.Net(f"fan_{kind}", type=kind, num_workers=workers)
            for i in range(n_tasks):
                net.Scale("x", f"y{i}", scale=1.0)
            ws.create_net(net)
            ws.run_net(f"fan_{kind}")
        res["simple_us"] = _best(lambda: ws.run_net("fan_simple"), repeats) / n_tasks * 1e6
        res["async_us"] = _best(lambda: ws.run_net("fan_async_scheduling"), repeats) / n_tasks * 1e6
        res["async_handle_us"] = (
            _best(lambda: ws.run_net_async("fan_async_scheduling").wait(600), repeats) / n_tasks * 1e6
        )
    try:
        import dask.threaded

        dsk: dict[str, Any] = {"x": x}
        dsk.update({f"y{i}": (_kernel, "x") for i in range(n_tasks)})
        keys = [f"y{i}" for i in range(n_tasks)]
        with cf.ThreadPoolExecutor(workers) as dpool:  # our pool, so no thread outlives the run
            dask.threaded.get(dsk, keys, pool=dpool, num_workers=workers)
            res["dask_us"] = (
                _best(lambda: dask.threaded.get(dsk, keys, pool=dpool, num_workers=workers), max(1, repeats // 2))
                / n_tasks
                * 1e6
            )
    except ImportError:
        res["dask_us"] = None
    with cf.ThreadPoolExecutor(workers) as pool:

        def run_pool() -> None:
            futs = [pool.submit(_kernel, x) for _ in range(n_tasks)]
            for f in futs:
                f.result()

        run_pool()
        res["futures_us"] = _best(run_pool, repeats) / n_tasks * 1e6
    for k in ("simple", "async", "async_handle", "dask", "futures"):
        v = res[f"{k}_us"]
        res[f"{k}_overhead_us"] = None if v is None else max(v - res["kernel_us"], 1e-3)
    if res["dask_overhead_us"] is not None:
        res["dask_over_async"] = res["dask_overhead_us"] / res["async_overhead_us"]
    res["futures_over_async"] = res["futures_overhead_us"] / res["async_overhead_us"]
    return res


def _calibrate(target_s: float) -> int:
    n = 128
    while n < 2048:
        a = np.ones((n, n))
        t = _best(lambda a=a: a @ a, 3)
        if t >= target_s:
            return n
        n = int(n * max(1.05, min(2.0, (target_s / t) ** (1 / 3))))
    return n


def bench_branches(
    n_branches: int, kernel_ms: float, repeats: int, workers: int = 2, blas: str = "single-threaded"
) -> dict[str, Any]:
    """(c) ``n_branches`` independent MatMul branches: simple vs async with ``workers`` workers."""
    n = _calibrate(kernel_ms / 1e3)
    a = np.random.default_rng(0).standard_normal((n, n)) / n
    res: dict[str, Any] = {"branches": n_branches, "workers": workers, "matrix": n}
    res["kernel_ms"] = _best(lambda: a @ a, 5) * 1e3
    res["simple_ms"], res["async_ms"] = _branch_ms(a, n_branches, repeats, workers)
    res["speedup"] = res["simple_ms"] / res["async_ms"]
    res["blas"] = blas
    res.update(_branches_torch(a, n_branches, repeats, workers))
    return res


def _branch_ms(a: Any, n_branches: int, repeats: int, workers: int) -> tuple[float, float]:
    """Best ms of a net of ``n_branches`` independent ``a @ a`` on the simple and the async executor."""
    import asyncnet as an

    with an.Workspace() as ws:
        ws.feed("a", a)
        for kind in ("simple", "async_scheduling"):
            net = an.Net(f"br_{kind}", type=kind, num_workers=workers)
            for i in range(n_branches):
                net.MatMul(["a", "a"], f"m{i}")
            ws.create_net(net)
            ws.run_net(f"br_{kind}")
        return (
            _best(lambda: ws.run_net("br_simple"), repeats) * 1e3,
            _best(lambda: ws.run_net("br_async_scheduling"), repeats) * 1e3,
        )


def _branches_torch(a: np.ndarray, n_branches: int, repeats: int, workers: int) -> dict[str, Any]:
    """The same branches on torch CPU tensors, one torch thread per kernel (the peer row of torch tensors)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {}
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        simple, asynchronous = _branch_ms(torch.from_numpy(a), n_branches, repeats, workers)
    finally:
        torch.set_num_threads(before)
    return {"torch_simple_ms": simple, "torch_async_ms": asynchronous, "torch_speedup": simple / asynchronous}


def bench_dispatch(repeats: int, number: int = 20_000) -> dict[str, Any]:
    """(d) Per-call cost of finding a kernel's array namespace: asyncnet's hand-written dispatch vs
    array-api-compat's ``array_namespace`` (when installed), beside a cheap kernel (``x * 1.0``)."""
    import timeit

    from asyncnet.tensor.namespace import namespace

    x, y = np.ones(4, np.float32), np.ones(4, np.float32)
    res: dict[str, Any] = {}
    calls = {"asyncnet_us": lambda: namespace(None, x, y), "kernel_us": lambda: x * 1.0}
    try:
        from array_api_compat import array_namespace  # type: ignore[import-not-found]

        calls["array_api_compat_us"] = lambda: array_namespace(x, y)
    except ImportError:
        res["array_api_compat_us"] = None
    for name, fn in calls.items():
        res[name] = min(timeit.repeat(fn, number=number, repeat=max(1, repeats))) / number * 1e6
    return res


def _branches_single_blas(args: argparse.Namespace) -> dict[str, Any]:
    if all(os.environ.get(k) == "1" for k in BLAS_ENV[:2]):
        return bench_branches(8, 5.0, args.repeats)
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-not-found]
    except ImportError:
        env = child_env(**{k: "1" for k in BLAS_ENV})
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.executor",
            "--only",
            "branches",
            "--json",
            "--repeats",
            str(args.repeats),
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"branch benchmark subprocess failed: {out.stderr.strip()[-500:]}") from None
        return json.loads(out.stdout)["branches"]
    with threadpool_limits(1):
        return bench_branches(8, 5.0, args.repeats)


def _table(res: dict[str, Any]) -> str:
    rows = []
    if "chain" in res:
        c = res["chain"]
        rows += [
            f"(a) linear chain, {c['ops']} cheap ops (per op)",
            f"    simple                    {c['simple_us']:8.2f} us",
            f"    async (caller thread)     {c['async_us']:8.2f} us   {c['ratio']:.2f}x simple   (target <= 1.3x)",
            f"    async (pool worker)       {c['async_pool_us']:8.2f} us   {c['ratio_pool']:.2f}x simple",
        ]
    if "fanout" in res:
        f = res["fanout"]
        rows += [
            f"(b) fan-out, {f['tasks']} independent cheap tasks, {f['workers']} workers (per task; overhead = minus {f['kernel_us']:.2f} us kernel)"
        ]
        for k, label in (
            ("simple", "simple (sequential)"),
            ("async", "async run()"),
            ("async_handle", "async run_async().wait()"),
            ("futures", "concurrent.futures pool"),
            ("dask", "dask.threaded.get"),
        ):
            v = f[f"{k}_us"]
            if v is not None:
                rows.append(f"    {label:25s} {v:8.2f} us   overhead {f[f'{k}_overhead_us']:8.2f} us")
        if f.get("dask_over_async"):
            rows.append(
                f"    Dask overhead / async overhead: {f['dask_over_async']:.1f}x   (target >= 20x);"
                f" futures / async: {f['futures_over_async']:.1f}x"
            )
    if "branches" in res:
        b = res["branches"]
        rows += [
            f"(c) {b['branches']} branches of {b['kernel_ms']:.1f} ms MatMul ({b['matrix']}x{b['matrix']}), {b['blas']} BLAS",
            f"    simple                    {b['simple_ms']:8.1f} ms",
            f"    async, {b['workers']} workers          {b['async_ms']:8.1f} ms   speedup {b['speedup']:.2f}x   (target >= 1.8x)",
        ]
        if "torch_async_ms" in b:
            rows += [
                f"    torch tensors, simple     {b['torch_simple_ms']:8.1f} ms",
                f"    torch tensors, async      {b['torch_async_ms']:8.1f} ms   speedup {b['torch_speedup']:.2f}x",
            ]
    if "dispatch" in res:
        d = res["dispatch"]
        aac = d["array_api_compat_us"]
        rows += [
            "(d) finding a kernel's array namespace, two 4-float numpy arrays (per call)",
            f"    asyncnet namespace()      {d['asyncnet_us']:8.3f} us",
            f"    array_api_compat          {'not installed' if aac is None else f'{aac:8.3f} us'}",
            f"    the kernel x * 1.0        {d['kernel_us']:8.3f} us",
        ]
    if "load_average" in res:
        rows.append("load average: " + " ".join(f"{x:.2f}" for x in res["load_average"]))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks executor", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke run)")
    p.add_argument("--repeats", type=int, default=None, help="repeats per measurement (best is kept)")
    p.add_argument(
        "--only", choices=["chain", "fanout", "branches", "dispatch"], action="append", help="run only these parts"
    )
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 7
    parts = args.only or ["chain", "fanout", "branches", "dispatch"]
    res: dict[str, Any] = {"load_average": list(os.getloadavg())}
    if "chain" in parts:
        res["chain"] = bench_chain(1000 if args.quick else 10_000, args.repeats)
    if "fanout" in parts:
        res["fanout"] = bench_fanout(200 if args.quick else 2000, args.repeats)
    if "branches" in parts:
        if args.only == ["branches"]:
            res["branches"] = bench_branches(8, 1.0 if args.quick else 5.0, args.repeats)
        elif args.quick:
            res["branches"] = bench_branches(8, 1.0, args.repeats, blas="default (quick run)")
        else:
            res["branches"] = _branches_single_blas(args)
    if "dispatch" in parts:
        res["dispatch"] = bench_dispatch(args.repeats, 2000 if args.quick else 20_000)
    print(json.dumps(res, indent=2) if args.json else _table(res))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
