"""ONNX inference: asyncnet (simple and async_scheduling executors, numpy and torch tensors) against
onnxruntime (1 and 2 intra-op threads) and torch eager (1 and 2 threads) on models exported with
``torch.onnx.export`` from PyTorch models built here with random weights.

For each model: the import time, batch-1 latency (ms) and batch-32 throughput (samples/s), medians
over interleaved rounds of samples of about 30 ms each (each round runs every peer once; the 2-thread peers in rounds of their
own, after the others, asyncnet's simple reps prepared with ``intra_op_threads=2`` among them),
and the load average before and after. Every label says its threads (see ``_peers``);
the ratios compare asyncnet's 1-thread configurations with the 1-thread peers, and any of its
configurations with the 2-thread peers.

    python -m benchmarks onnx_inference [--quick] [--json] [--cpu] [--model NAME ...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _models() -> dict[str, tuple[Callable[[], Any], Callable[[int], np.ndarray]]]:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(),
                nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
                nn.BatchNorm2d(c_out),
            )
            self.skip = (
                nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                if stride != 1 or c_in != c_out
                else nn.Identity()
            )

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.relu(self.body(x) + self.skip(x))

    def resnet() -> nn.Module:  # ResNet-18's layout at 1/4 width
        layers: list[nn.Module] = [
            nn.Conv2d(3, 16, 7, 2, 3, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        c = 16
        for c_out, stride in ((16, 1), (32, 2), (64, 2), (128, 2)):
            layers += [Block(c, c_out, stride), Block(c_out, c_out, 1)]
            c = c_out
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))

    class Inception(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.b1 = nn.Conv2d(c, 16, 1)
            self.b2 = nn.Sequential(nn.Conv2d(c, 16, 1), nn.ReLU(), nn.Conv2d(16, 24, 3, padding=1))
            self.b3 = nn.Sequential(nn.Conv2d(c, 8, 1), nn.ReLU(), nn.Conv2d(8, 12, 5, padding=2))
            self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c, 12, 1))

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.relu(torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1))

    def inception() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1),
            nn.ReLU(),
            Inception(32),
            Inception(64),
            nn.MaxPool2d(2),
            Inception(64),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )

    def mobilenet() -> nn.Module:
        def dw(c_in: int, c_out: int, s: int) -> nn.Module:
            return nn.Sequential(
                nn.Conv2d(c_in, c_in, 3, s, 1, groups=c_in, bias=False),
                nn.BatchNorm2d(c_in),
                nn.ReLU6(),
                nn.Conv2d(c_in, c_out, 1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU6(),
            )

        return nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1),
            nn.ReLU6(),
            dw(32, 64, 1),
            dw(64, 128, 2),
            dw(128, 128, 1),
            dw(128, 256, 2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(256, 10),
        )

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.head = nn.Linear(64, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.head(self.enc(x).mean(dim=1))

    class LSTMClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(32, 64, batch_first=True)
            self.head = nn.Linear(64, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            out, _ = self.lstm(x)
            return self.head(out[:, -1])

    g = np.random.default_rng(0)
    image = lambda b: g.standard_normal((b, 3, 64, 64), dtype=np.float32)
    return {
        "resnet": (resnet, image),
        "inception": (inception, image),
        "mobilenet": (mobilenet, image),
        "transformer": (Transformer, lambda b: g.standard_normal((b, 16, 64), dtype=np.float32)),
        "lstm": (LSTMClassifier, lambda b: g.standard_normal((b, 20, 32), dtype=np.float32)),
    }


def _export(model: Any, x: np.ndarray) -> bytes:
    import warnings

    import torch

    f = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice (it needs no onnxscript)
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.from_numpy(x),),
            f,
            dynamo=False,
            opset_version=17,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        )
    return f.getvalue()


def _peers(
    name: str, blob: bytes, model: Any
) -> tuple[list[Callable[[], tuple[dict[str, Callable[[np.ndarray], Any]], list[Any]]]], dict[str, float]]:
    """The peer groups, each a function that builds its peers (label -> run(x)) and the reps to
    close after its rounds, and the import times (s). Each label says its threads: "1t" one
    intra-op (BLAS and torch) thread, "2t" two, "2w x 1t" two executor workers of one thread each.
    A rep holds its thread claim until closed, and claims combine (the smallest explicit count
    wins), so the 2-thread reps are prepared once the 1-thread ones are closed."""
    import onnxruntime as ort
    import torch

    from asyncnet.interop.onnx import backend

    loads: dict[str, float] = {}

    def ort_peer(threads: int) -> Callable[[np.ndarray], Any]:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        return lambda x: sess.run(None, {"x": x})

    def eager_peer(threads: int) -> Callable[[np.ndarray], Any]:
        def eager(x: np.ndarray) -> Any:
            torch.set_num_threads(threads)
            with torch.inference_mode():
                return model(torch.from_numpy(x))

        return eager

    def group(threads: int) -> tuple[dict[str, Callable[[np.ndarray], Any]], list[Any]]:
        peers: dict[str, Callable[[np.ndarray], Any]] = {}
        reps = []
        configs = [("simple", None, f"{threads}t")]
        if threads == 1:
            configs.append(("async_scheduling", 2, "2w x 1t"))
        for net_type, workers, label in configs:
            for tensors in ("numpy", "torch"):
                t0 = time.perf_counter()
                rep = backend.prepare(
                    blob, net_type=net_type, num_workers=workers, tensors=tensors, intra_op_threads=threads
                )
                loads.setdefault(f"asyncnet {net_type} {tensors}", time.perf_counter() - t0)
                peers[f"asyncnet {net_type} {tensors} {label}"] = lambda x, rep=rep: rep.run([x])
                reps.append(rep)
        peers[f"onnxruntime {threads}t"] = ort_peer(threads)
        peers[f"torch eager {threads}t"] = eager_peer(threads)
        return peers, reps

    return [lambda: group(1), lambda: group(2)], loads


def _threads_now() -> dict[str, int]:
    """The BLAS and torch intra-op thread counts in effect."""
    import threadpoolctl
    import torch

    blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    return {"blas": max(blas, default=0), "torch": torch.get_num_threads()}


_CLOCK = [time.perf_counter]  # time.process_time with --cpu


def _time(fn: Callable[[np.ndarray], Any], x: np.ndarray, reps: int) -> float:
    clock = _CLOCK[0]
    t0 = clock()
    for _ in range(reps):
        fn(x)
    return (clock() - t0) / reps


def _runs_for(fn: Callable[[np.ndarray], Any], x: np.ndarray, sample_s: float) -> int:
    """Runs per sample so that a sample lasts about ``sample_s`` (from one timed run, 1 to 1000):
    on a busy machine a sample of one short run is often the one a preemption lands in."""
    return max(1, min(1000, round(sample_s / max(_time(fn, x, 1), 1e-6))))


def bench_model(name: str, rounds: int, sample_s: float) -> dict[str, Any]:
    import torch

    make, data = _models()[name]
    torch.manual_seed(0)
    model = make().eval()
    blob = _export(model, data(2))
    groups, loads = _peers(name, blob, model)
    out: dict[str, Any] = {"model": name, "import_s": loads, "latency_ms": {}, "throughput": {}, "threads": {}}
    xs = {batch: data(batch) for batch in (1, 32)}
    samples: dict[int, dict[str, list[float]]] = {b: {} for b in xs}
    for build in groups:  # the 1-thread peers, then the 2-thread ones: spinning OpenMP threads of a
        peers, reps = build()  # 2-thread peer slowed whichever peer ran next (up to 3x)
        for batch, x in xs.items():
            runs = {}
            for p in peers:
                peers[p](x)  # warm up
                runs[p] = _runs_for(peers[p], x, sample_s)
                samples[batch][p] = []
                if p.startswith("asyncnet"):
                    out["threads"][p] = _threads_now()
            for _ in range(rounds):
                for p in peers:  # interleaved: every peer of the group once per round
                    samples[batch][p].append(_time(peers[p], x, runs[p]))
        for rep in reps:
            rep.close()
    for batch, key in ((1, "latency_ms"), (32, "throughput")):
        for p, s in samples[batch].items():
            med = statistics.median(s)
            out[key][p] = med * 1e3 if batch == 1 else batch / med
    torch.set_num_threads(os.cpu_count() or 1)
    return out


def _best(d: dict[str, float], names: list[str], lower: bool) -> tuple[str, float]:
    items = [(k, d[k]) for k in names]
    return (min if lower else max)(items, key=lambda kv: kv[1])


def report(r: dict[str, Any]) -> list[str]:
    lines = [f"{r['model']}: import {min(r['import_s'].values()):.3f}-{max(r['import_s'].values()):.3f} s"]
    threads = r.get("threads", {})
    for key, unit, lower in (("latency_ms", "ms (batch 1)", True), ("throughput", "samples/s (batch 32)", False)):
        d = r[key]
        for p, v in sorted(d.items()):
            t = threads.get(p)
            note = f" [blas {t['blas']}, torch {t['torch']}]" if t else ""
            lines.append(f"  {key:11s} {p:38s} {v:10.2f} {unit}{note}")
        for lib in ("numpy", "torch"):
            parallel = d[f"asyncnet async_scheduling {lib} 2w x 1t"]
            for simple_name in (f"asyncnet simple {lib} 1t", f"asyncnet simple {lib} 2t"):
                simple = d[simple_name]
                lines.append(
                    f"  {key:11s} async_scheduling (2w x 1t) vs {simple_name[9:]}: "
                    f"{(simple / parallel) if lower else (parallel / simple):.2f}x"
                )
        one = [p for p in d if p.startswith("asyncnet simple") and p.endswith(" 1t")]
        both = [p for p in d if p.startswith("asyncnet")]
        for peer, mine in (
            ("onnxruntime 1t", one),
            ("torch eager 1t", one),
            ("onnxruntime 2t", both),
            ("torch eager 2t", both),
        ):
            best_name, best = _best(d, mine, lower)
            ratio = (d[peer] / best) if lower else (best / d[peer])
            lines.append(f"  {key:11s} asyncnet best ({best_name[9:]}) vs {peer}: {ratio:.2f}x")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="asyncnet vs onnxruntime vs torch eager on exported ONNX models")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--model", action="append", help="only these models (repeatable)")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="CPU time of the process instead of wall clock (steadier on a busy machine; a "
        "2-thread peer or worker pool then counts the time of both its threads)",
    )
    ns = parser.parse_args(argv)
    _CLOCK[0] = time.process_time if ns.cpu else time.perf_counter
    rounds, sample_s = (3, 0.005) if ns.quick else (7, 0.03)
    names = ns.model or list(_models())
    load_before = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
    results = [bench_model(n, rounds, sample_s) for n in names]
    load_after = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
    if ns.json:
        print(json.dumps({"load_before": load_before, "load_after": load_after, "results": results}, indent=2))
        return 0
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}; {os.cpu_count()} cores")
    for r in results:
        print("\n".join(report(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
