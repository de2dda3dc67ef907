"""Layer benchmark: one forward + backward step of each new op family, asyncnet vs PyTorch eager.

    python -m benchmarks layers [--json] [--quick] [--repeat N] [--cpu-time] [--only TEXT]

Each case builds the layer and a mean loss in a net, appends its gradient ops
(``add_gradient_ops``) and runs the net (simple executor); the peer is the same layer in torch
eager, forward + ``backward()``, on the same float32 inputs. Both run in one process with
single-threaded BLAS (the benchmark re-runs itself in a child with OMP/OPENBLAS/MKL_NUM_THREADS=1
and calls ``torch.set_num_threads(1)``), so the ratio compares kernels, not thread pools. The
figure is the best of ``--repeat`` rounds that interleave the two (and the median of the rounds' ratios);
the load average is printed beside it. ``--cpu-time`` times with the process's CPU time instead of
the wall clock (steadier on a shared machine: time spent waiting for a core is not counted), and
``--only`` keeps the cases whose name contains a text. Figures are measured, never asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._single import single_threaded_main

__all__ = ["main", "run", "CASES"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks layers", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quick", action="store_true", help="a fast smoke run (small shapes, few steps)")
    p.add_argument("--repeat", type=int, default=None, help="rounds per case; the fastest is kept (default 5, quick 1)")
    p.add_argument("--cpu-time", action="store_true", help="time with the process's CPU time, not the wall clock")
    p.add_argument("--only", default="", help="run only the cases whose name contains this text")
    return p.parse_args(argv)


# -- the cases: (feeds, asyncnet forward builder, torch forward, differentiated inputs) -------------
Case = tuple[dict[str, np.ndarray], Callable[[Any], str], Callable[..., Any], list[str]]


def _conv(n: int, c: int, m: int, hw: int) -> Callable[[np.random.Generator], Case]:
    def make(rng: np.random.Generator) -> Case:
        import torch.nn.functional as F

        feeds = {"x": _f32(rng, n, c, hw, hw), "w": _f32(rng, m, c, 3, 3), "b": _f32(rng, m)}
        return (
            feeds,
            lambda net: net.AveragedLoss(net.Conv(["x", "w", "b"], "y", pad=1), "loss"),
            lambda x, w, b: F.conv2d(x, w, b, padding=1).mean(),
            ["x", "w", "b"],
        )

    return make


def _pool(op: str, n: int, c: int, hw: int) -> Callable[[np.random.Generator], Case]:
    def make(rng: np.random.Generator) -> Case:
        import torch.nn.functional as F

        tf = F.max_pool2d if op == "MaxPool" else F.avg_pool2d
        return (
            {"x": _f32(rng, n, c, hw, hw)},
            lambda net: net.AveragedLoss(getattr(net, op)("x", "y", kernel=2, stride=2), "loss"),
            lambda x: tf(x, 2, 2).mean(),
            ["x"],
        )

    return make


def _spatial_bn(n: int, c: int, hw: int) -> Callable[[np.random.Generator], Case]:
    def make(rng: np.random.Generator) -> Case:
        import torch.nn.functional as F

        feeds = {
            "x": _f32(rng, n, c, hw, hw),
            "s": np.ones(c, np.float32),
            "b": np.zeros(c, np.float32),
            "rm": np.zeros(c, np.float32),
            "rv": np.ones(c, np.float32),
        }

        def build(net: Any) -> str:
            net.SpatialBN(["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"])
            return net.AveragedLoss("y", "loss")

        return (
            feeds,
            build,
            lambda x, s, b, rm, rv: F.batch_norm(x, rm, rv, s, b, training=True).mean(),
            ["x", "s", "b"],
        )

    return make


def _sls(rows: int, dim: int, bags: int, per_bag: int) -> Callable[[np.random.Generator], Case]:
    def make(rng: np.random.Generator) -> Case:
        import torch
        import torch.nn.functional as F

        feeds = {
            "t": _f32(rng, rows, dim),
            "i": rng.integers(0, rows, bags * per_bag),
            "l": np.full(bags, per_bag, np.int32),
        }
        offsets = torch.arange(0, bags * per_bag, per_bag)
        return (
            feeds,
            lambda net: net.AveragedLoss(net.SparseLengthsSum(["t", "i", "l"], "y"), "loss"),
            lambda t, i, l: F.embedding_bag(i, t, offsets, mode="sum").mean(),
            ["t"],
        )

    return make


def _lstm(t: int, n: int, i: int, h: int) -> Callable[[np.random.Generator], Case]:
    names = ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"]

    def make(rng: np.random.Generator) -> Case:
        import torch

        shapes = [(t, n, i), (n, h), (n, h), (4 * h, i), (4 * h, h), (4 * h,), (4 * h,)]
        feeds = {k: _f32(rng, *s) * np.float32(0.3) for k, s in zip(names, shapes)}
        mod = torch.nn.LSTM(i, h)

        def tf(x: Any, h0: Any, c0: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any) -> Any:
            params = {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh, "bias_ih_l0": b_ih, "bias_hh_l0": b_hh}
            return torch.func.functional_call(mod, params, (x, (h0[None], c0[None])))[0].mean()

        return (
            feeds,
            lambda net: net.AveragedLoss(net.LSTM(names, ["y", "hT", "cT", "cache"])[0], "loss"),
            tf,
            names[3:],
        )

    return make


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


CASES: dict[str, tuple[Callable[[np.random.Generator], Case], Callable[[np.random.Generator], Case]]] = {
    # name: (full size, --quick size)
    "Conv 64x1x8x8 -> 16, 3x3 pad 1": (_conv(64, 1, 16, 8), _conv(8, 1, 4, 8)),
    "Conv 64x16x4x4 -> 32, 3x3 pad 1": (_conv(64, 16, 32, 4), _conv(8, 4, 8, 4)),
    "MaxPool 64x16x8x8, 2x2 stride 2": (_pool("MaxPool", 64, 16, 8), _pool("MaxPool", 8, 4, 8)),
    "AveragePool 64x16x8x8, 2x2 stride 2": (_pool("AveragePool", 64, 16, 8), _pool("AveragePool", 8, 4, 8)),
    "SpatialBN 64x16x8x8": (_spatial_bn(64, 16, 8), _spatial_bn(8, 4, 8)),
    "SparseLengthsSum 100000x32, 512 bags of 20": (_sls(100_000, 32, 512, 20), _sls(1000, 8, 16, 4)),
    "LSTM T=8 N=64 I=8 H=64": (_lstm(8, 64, 8, 64), _lstm(4, 8, 4, 8)),
}


# -- timing ----------------------------------------------------------------------------------------
def _rounds(
    steps: list[Callable[[], Any]], iters: int, repeat: int, clock: Callable[[], float] = time.perf_counter
) -> list[list[float]]:
    """Seconds per step of each of ``steps`` in ``repeat`` rounds that interleave them (a noisy
    spell on a shared machine then hits every step, not one), timed by ``clock``."""
    for step in steps:
        step()  # warm-up: first-call costs (imports, allocations) are not the steady state
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(repeat):
        for k, step in enumerate(steps):
            t0 = clock()
            for _ in range(iters):
                step()
            times[k].append((clock() - t0) / iters)
    return times


def _asyncnet_step(feeds: dict[str, np.ndarray], build: Callable[[Any], str], wrt: list[str]) -> Callable[[], None]:
    import asyncnet as an
    from asyncnet.autodiff import add_gradient_ops

    net = an.Net("bench_layer")
    add_gradient_ops(net, build(net), wrt=wrt)
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v.copy())
    ws.create_net(net)
    return lambda: ws.run_net("bench_layer")


def _torch_step(feeds: dict[str, np.ndarray], fn: Callable[..., Any], wrt: list[str]) -> Callable[[], None]:
    import torch

    t = {k: torch.from_numpy(v.copy()).requires_grad_(k in wrt) for k, v in feeds.items()}

    def step() -> None:
        for k in wrt:
            t[k].grad = None
        fn(**t).backward()

    return step


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    repeat = args.repeat or (1 if args.quick else 5)
    iters = 3 if args.quick else 30
    clock = time.process_time if args.cpu_time else time.perf_counter
    rows = []
    for name, sizes in CASES.items():
        if args.only not in name:
            continue
        feeds, build, tfn, wrt = sizes[1 if args.quick else 0](np.random.default_rng(0))
        steps = [_asyncnet_step(feeds, build, wrt), _torch_step(feeds, tfn, wrt)]
        ours, theirs = _rounds(steps, iters, repeat, clock)
        rows.append(
            {
                "case": name,
                "asyncnet_ms": min(ours) * 1e3,
                "torch_ms": min(theirs) * 1e3,
                "speed_vs_torch": min(theirs) / min(ours),
                "speed_vs_torch_median": statistics.median(t / o for o, t in zip(ours, theirs)),
            }
        )
    return {
        "rows": rows,
        "quick": bool(args.quick),
        "repeat": repeat,
        "iters": iters,
        "clock": "cpu" if args.cpu_time else "wall",
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "load_average": list(os.getloadavg()),
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'forward + backward, float32':44s} {'asyncnet ms':>11s} {'torch ms':>9s} {'speed vs torch':>14s} "
        f"{'median of rounds':>16s}"
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['case']:44s} {r['asyncnet_ms']:11.3f} {r['torch_ms']:9.3f} {r['speed_vs_torch']:13.2f}x "
            f"{r['speed_vs_torch_median']:15.2f}x"
        )
    la = ", ".join(f"{x:.2f}" for x in result["load_average"])
    clock = "CPU time" if result.get("clock") == "cpu" else "wall clock"
    lines.append(
        f"single-threaded BLAS; {clock}; best of {result['repeat']} interleaved rounds of {result['iters']} steps "
        f"(and the median of the rounds' ratios); load average {la}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return single_threaded_main("benchmarks.layers", argv, _parse, run, table)


if __name__ == "__main__":
    sys.exit(main())
