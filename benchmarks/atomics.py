"""Benchmark: fetch_add per second for asyncnet's atomics and their peers, measured in one run.

Peers, each doing ``x += 1`` atomically:

- ``AtomicInt.fetch_add`` (``threading.Lock`` inside);
- an int guarded by a ``threading.Lock`` (``with lock: n += 1``), the baseline for threads;
- ``multiprocessing.Value('q')`` with its lock, the stdlib's cross-process counter;
- ``SharedAtomicInt.fetch_add`` (robust process-shared pthread mutex in shared memory);
- the ``AtomicFetchAdd`` operator run through a net (``ws.run_net(name, num_iter=N)``).

Each runs on one thread, on two threads contending for the same counter, and (for the
cross-process kinds) in two spawned processes. Ratios are against the lock-guarded int (threads)
and ``multiprocessing.Value`` (processes).

    python -m benchmarks atomics [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["main"]


# -- the peers: each factory returns (increment function, cleanup) ------------------------------


def _atomic_int() -> tuple[Callable[[], Any], Callable[[], None]]:
    from asyncnet.atomic import AtomicInt

    a = AtomicInt(0)
    return (lambda: a.fetch_add(1)), (lambda: None)


def _locked_int() -> tuple[Callable[[], Any], Callable[[], None]]:
    lock, box = threading.Lock(), [0]

    def inc() -> None:
        with lock:
            box[0] += 1

    return inc, (lambda: None)


def _mp_value() -> tuple[Callable[[], Any], Callable[[], None]]:
    v = mp.get_context("spawn").Value("q", 0)

    def inc() -> None:
        with v.get_lock():
            v.value += 1

    return inc, (lambda: None)


def _shared_atomic_int() -> tuple[Callable[[], Any], Callable[[], None]]:
    from asyncnet.atomic import SharedAtomicInt

    a = SharedAtomicInt(0)
    return (lambda: a.fetch_add(1)), a.close


PEERS: dict[str, Callable[[], tuple[Callable[[], Any], Callable[[], None]]]] = {
    "AtomicInt": _atomic_int,
    "threading.Lock + int": _locked_int,
    "multiprocessing.Value + lock": _mp_value,
    "SharedAtomicInt": _shared_atomic_int,
}


def _loop(inc: Callable[[], Any], n: int) -> None:
    for _ in range(n):
        inc()


def _threads_rate(make: Callable[[], tuple[Callable[[], Any], Callable[[], None]]], threads: int, n: int) -> float:
    """fetch_adds per second with ``threads`` threads each doing ``n`` on one shared counter."""
    inc, cleanup = make()
    try:
        return threads * n / _run_together([lambda: _loop(inc, n)] * threads)
    finally:
        cleanup()


def _run_together(bodies: list[Callable[[], Any]]) -> float:
    """Run each body on its own thread, all released at once; seconds until the last ends."""
    start = threading.Barrier(len(bodies) + 1, timeout=60)
    workers = [threading.Thread(target=lambda b=b: (start.wait(), b())) for b in bodies]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return time.perf_counter() - t0


# -- processes ---------------------------------------------------------------------------------------


def _proc_shared_atomic(counter: Any, go: Any, times: Any, rank: int, n: int) -> None:
    while not go.load():
        time.sleep(0.0005)
    t0 = time.perf_counter()
    for _ in range(n):
        counter.fetch_add(1)
    times[rank] = time.perf_counter() - t0
    counter.close()
    go.close()


def _proc_mp_value(value: Any, go: Any, times: Any, rank: int, n: int) -> None:
    while not go.load():
        time.sleep(0.0005)
    t0 = time.perf_counter()
    lock = value.get_lock()
    for _ in range(n):
        with lock:
            value.value += 1
    times[rank] = time.perf_counter() - t0
    go.close()


def _processes_rate(kind: str, procs: int, n: int) -> tuple[float, bool]:
    """fetch_adds per second over ``procs`` spawned processes; also whether the total was exact."""
    from asyncnet.atomic import SharedAtomicBool, SharedAtomicInt

    ctx = mp.get_context("spawn")
    times = ctx.Array("d", procs, lock=False)
    with SharedAtomicBool() as go:
        if kind == "SharedAtomicInt":
            counter: Any = SharedAtomicInt(0)
            target, read = _proc_shared_atomic, counter.load
        else:
            counter = ctx.Value("q", 0)
            target, read = _proc_mp_value, (lambda: counter.value)
        try:
            ps = [ctx.Process(target=target, args=(counter, go, times, r, n)) for r in range(procs)]
            for p in ps:
                p.start()
            go.store(True)
            for p in ps:
                p.join(120)
            for p in ps:
                if p.is_alive():
                    p.kill()
                    p.join(5)
            if any(p.exitcode != 0 for p in ps):
                raise RuntimeError(f"a benchmark process failed: exit codes {[p.exitcode for p in ps]}")
            exact = read() == procs * n
            return procs * n / max(times), exact
        finally:
            if kind == "SharedAtomicInt":
                counter.close()


# -- the operator through a net -------------------------------------------------------------------


def _op_rate(threads: int, n: int) -> float:
    import asyncnet as an

    ws = an.Workspace()
    try:
        ws.feed("mutex", __import__("asyncnet.atomic", fromlist=["Mutex"]).Mutex())
        ws.feed("value", np.array(0, np.int32))
        ws.feed("one", np.array(1, np.int32))
        names = []
        for i in range(threads):
            net = an.Net(f"fetch_add_{i}")
            net.AtomicFetchAdd(["mutex", "value", "one"], ["value", f"fetched_{i}"])
            names.append(ws.create_net(net).name)
        rate = threads * n / _run_together([lambda nm=nm: ws.run_net(nm, num_iter=n) for nm in names])
        if int(ws.fetch("value")) != threads * n:
            raise RuntimeError("AtomicFetchAdd lost an update")
        return rate
    finally:
        ws.close()


# -- driver -------------------------------------------------------------------------------------------


def measure(n_thread: int, n_proc: int, n_op: int, repeats: int) -> list[dict[str, Any]]:
    """Every row: what, mode (1 thread / 2 threads / 2 processes), ops per second, ratio to baseline."""
    rows: list[dict[str, Any]] = []
    for threads in (1, 2):
        mode = f"{threads} thread{'s' if threads > 1 else ''}"
        base = None
        for name, make in PEERS.items():
            rate = max(_threads_rate(make, threads, n_thread // threads) for _ in range(repeats))
            if name == "threading.Lock + int":
                base = rate
            rows.append({"what": name, "mode": mode, "ops_per_s": rate})
        op = max(_op_rate(threads, n_op // threads) for _ in range(repeats))
        rows.append({"what": "AtomicFetchAdd op (ws.run_net)", "mode": mode, "ops_per_s": op})
        for r in rows:
            if r["mode"] == mode:
                r["ratio"] = r["ops_per_s"] / base
                r["baseline"] = "threading.Lock + int"
    base = None
    for kind in ("multiprocessing.Value + lock", "SharedAtomicInt"):
        rate, exact = _processes_rate(kind, 2, n_proc // 2)
        if not exact:
            raise RuntimeError(f"{kind} lost updates across processes")
        base = rate if base is None else base
        rows.append(
            {
                "what": kind,
                "mode": "2 processes",
                "ops_per_s": rate,
                "ratio": rate / base,
                "baseline": "multiprocessing.Value + lock",
            }
        )
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    head = f"{'what':34} {'mode':12} {'fetch_add/s':>12} {'us/op':>7} {'ratio':>6}  vs"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['what']:34} {r['mode']:12} {r['ops_per_s']:12,.0f} {1e6 / r['ops_per_s']:7.2f} "
            f"{r['ratio']:6.2f}  {r['baseline']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; ``--quick`` for a few-second smoke run, ``--json`` for machine output."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks atomics", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    if args.quick:
        rows = measure(n_thread=20_000, n_proc=20_000, n_op=4_000, repeats=1)
    else:
        rows = measure(n_thread=400_000, n_proc=400_000, n_op=50_000, repeats=3)
    if args.json:
        print(json.dumps({"benchmark": "atomics", "quick": args.quick, "rows": rows}, indent=2))
    else:
        print(_table(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
