"""DLRM training steps and its sparse ops: asyncnet against a PyTorch eager peer.

``python -m benchmarks dlrm [--quick] [--sizes zoo,large] [--threads 1,2] [--steps N] [--reps N] [--scaling] [--json]``

``--scaling``: what the second thread gives, all peers interleaved step by step: asyncnet numpy
``straight`` with 1 thread against ``async_scheduling`` with 2 workers (with its big products
split onto an idle worker, see :mod:`asyncnet.tensor.parallel`, and without) and with 1 worker
(which the helping caller makes two threads running ops), ``straight`` with 2 threads a kernel
(BLAS and torch), and the reference with 1 and 2 intra-op threads; prints asyncnet's 2-thread step against its own 1-thread step and against
the reference's 2-thread step.

``--quick`` (a smoke run, what ``python -m benchmarks all --quick`` uses): the zoo size only, 3
steps, 2 repetitions of the per-op measurement on the zoo size's tables.

The peer computes what facebookresearch/dlrm's ``DLRM_Net`` and its training-loop body compute
(written here: ``nn.EmbeddingBag(mode="sum", sparse=True)`` tables, ReLU MLPs, the dot
interaction without self terms, a sigmoid then ``BCELoss``, ``zero_grad``, ``backward``, SGD
``step``), on the same batches. asyncnet runs the zoo :func:`~asyncnet.model.zoo.dlrm.dlrm`
train net (SGD, sparse table updates) with numpy arrays and with torch tensors, on the
``straight`` executor with one thread and ``async_scheduling`` with ``t`` threads (``t - 1``
pool workers and the caller, as ``asyncnet train`` maps them), and, with ``t > 1``, on
``straight`` with ``t`` threads a kernel. Equal threads: the peer gets
``torch.set_num_threads(t)``, asyncnet ``t`` threads running ops. Peers are interleaved step by step; medians; the load average is printed.

``ops``: the large size's embedding lookup (8 tables of 100,000 x 64, batch 512, 20 ids per
bag) and its update (SparseSGDFusedWithSparseLengthsSumGradient, the SGD rows straight from the
pooled gradient, as the train net runs it) per op, against the peer's ``EmbeddingBag`` forward
and its backward plus sparse SGD step. Wall time and the process's CPU time (steadier on a
shared machine) for both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SIZES = {
    "zoo": {"num_dense": 8, "tables": (100, 100, 100), "dim": 8, "bottom": (16,), "top": (16,), "batch": 128, "ids": 3},
    "large": {
        "num_dense": 13,
        "tables": (100_000,) * 8,
        "dim": 64,
        "bottom": (512, 256),
        "top": (512, 256),
        "batch": 512,
        "ids": 20,
    },
}


@dataclass
class Batch:
    feeds: dict[str, np.ndarray]
    offsets: list[np.ndarray]


def batches(size: dict[str, Any], n: int, seed: int = 0) -> list[Batch]:
    """``n`` batches of dense features, 1..ids ids per bag (exactly ``ids`` on the large size), clicks."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = size["batch"]
        feeds = {
            "dense": rng.random((b, size["num_dense"]), dtype=np.float32),
            "click": (rng.random((b, 1)) < 0.3).astype(np.float32),
        }
        offsets = []
        for k, rows in enumerate(size["tables"]):
            lengths = (np.full(b, size["ids"]) if size["ids"] >= 20 else rng.integers(1, size["ids"] + 1, b)).astype(
                np.int32
            )
            feeds[f"lengths{k}"] = lengths
            feeds[f"ids{k}"] = rng.integers(0, rows, int(lengths.sum()))
            offsets.append(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
        out.append(Batch(feeds, offsets))
    return out


# -- the PyTorch eager peer -----------------------------------------------------------------------
def torch_peer(size: dict[str, Any], params: dict[str, np.ndarray], lr: float) -> Callable[[Batch], float]:
    """One training step of a DLRM_Net-like module built from ``params`` (asyncnet's names)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bot = self._mlp("bot")
            self.top = self._mlp("top")
            self.emb = torch.nn.ModuleList()
            for k in range(len(size["tables"])):
                e = torch.nn.EmbeddingBag(*params[f"emb{k}_table"].shape, mode="sum", sparse=True)
                e.weight.data = torch.tensor(params[f"emb{k}_table"])
                self.emb.append(e)
            f = len(size["tables"]) + 1
            self.li = torch.tensor([i for i in range(f) for j in range(i)])
            self.lj = torch.tensor([j for i in range(f) for j in range(i)])

        def _mlp(self, prefix: str) -> Any:
            layers: list[Any] = []
            i = 1
            while f"{prefix}{i}_w" in params:
                w = params[f"{prefix}{i}_w"]
                lin = torch.nn.Linear(w.shape[1], w.shape[0])
                lin.weight.data, lin.bias.data = torch.tensor(w), torch.tensor(params[f"{prefix}{i}_b"])
                layers.append(lin)
                last = f"{prefix}{i + 1}_w" not in params
                layers.append(torch.nn.Sigmoid() if last and prefix == "top" else torch.nn.ReLU())
                i += 1
            return torch.nn.Sequential(*layers)

        def forward(self, dense: Any, offsets: list[Any], ids: list[Any]) -> Any:
            x = self.bot(dense)
            ly = [e(i, o) for e, i, o in zip(self.emb, ids, offsets)]
            t = torch.cat([x, *ly], dim=1).view(x.shape[0], -1, x.shape[1])
            z = torch.bmm(t, t.transpose(1, 2))
            return self.top(torch.cat([x, z[:, self.li, self.lj]], dim=1))

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    loss_fn = torch.nn.BCELoss()

    def step(b: Batch) -> float:
        ids = [torch.from_numpy(b.feeds[f"ids{k}"]) for k in range(len(size["tables"]))]
        offsets = [torch.from_numpy(o) for o in b.offsets]
        opt.zero_grad()
        p = net(torch.from_numpy(b.feeds["dense"]), offsets, ids)
        loss = loss_fn(p, torch.from_numpy(b.feeds["click"]))
        loss.backward()
        opt.step()
        return loss.item()

    return step


# -- asyncnet ---------------------------------------------------------------------------------------
def asyncnet_peer(
    size: dict[str, Any], lr: float, net_type: str, workers: int, tensor: str
) -> tuple[Any, dict[str, np.ndarray]]:
    """(step function, initial parameters) of the zoo dlrm's SGD train net."""
    import asyncnet as an
    from asyncnet.model.zoo.dlrm import dlrm

    m = dlrm(
        num_dense=size["num_dense"],
        table_sizes=size["tables"],
        dim=size["dim"],
        bottom=size["bottom"],
        top=size["top"],
        net_type=net_type,
        num_workers=workers,
    )
    net = m.train_net(optimizer="sgd", lr=lr)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    params = {p: np.array(ws.fetch(p)) for p in m.params}
    conv = _to_torch if tensor == "torch" else (lambda a: a)
    if tensor == "torch":
        for name in [*m.params, *m.optimizer_state, "one"]:
            ws.feed(name, conv(np.array(ws.fetch(name))))
    created = [False]

    def step(b: Batch) -> float:
        for k, v in b.feeds.items():
            ws.feed(k, conv(v))
        if not created[0]:
            ws.create_net(net)
            created[0] = True
        ws.run_net("train")
        return float(ws.fetch("loss"))

    step.workspace = ws  # type: ignore[attr-defined]  # for a profiled step (--scaling)
    return step, params


def _to_torch(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def train_steps(size_name: str, threads: int, steps: int, warmup: int = 3) -> dict[str, Any]:
    """Median seconds per step of each peer (interleaved step by step) and samples/s."""
    import torch
    from threadpoolctl import ThreadpoolController

    from asyncnet.train.program import executor_workers

    size = SIZES[size_name]
    lr = 0.01
    data = batches(size, steps + warmup)

    net_type = "straight" if threads == 1 else "async_scheduling"
    workers = executor_workers(net_type, threads)  # async_scheduling: the caller is one of the threads
    peers: dict[str, Any] = {}
    params = None
    for tensor in ("numpy", "torch"):
        step, params = asyncnet_peer(size, lr, net_type, workers, tensor)
        peers[f"asyncnet {net_type} {tensor}"] = (step, 1)
    peers["pytorch eager (DLRM_Net)"] = (torch_peer(size, params, lr), threads)
    if threads > 1:  # the other way to spend the threads: one executor thread, multithreaded kernels
        # last in each round: OpenBLAS's threads spin a while after a call, so the peer run just
        # after this one (an asyncnet peer, never the reference) pays for that spinning
        peers[f"asyncnet straight numpy, {threads} threads a kernel"] = (
            asyncnet_peer(size, lr, "straight", 1, "numpy")[0],
            threads,
        )
    times: dict[str, list[float]] = {name: [] for name in peers}
    cpu: dict[str, list[float]] = {name: [] for name in peers}
    blas = ThreadpoolController()
    for i, b in enumerate(data):
        for name, (step, intra) in peers.items():
            torch.set_num_threads(intra)
            # numpy's BLAS threads as torch's, except for the reference, which calls no numpy BLAS
            # (2 idle OpenBLAS threads spinning beside torch's 2 doubled its step)
            with blas.limit(limits=1 if name.startswith("pytorch") else intra):
                t0, c0 = time.perf_counter(), time.process_time()
                step(b)
                if i >= warmup:
                    times[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
    ref = statistics.median(times["pytorch eager (DLRM_Net)"])
    ref_cpu = statistics.median(cpu["pytorch eager (DLRM_Net)"])
    return {
        name: {
            "ms_per_step": 1e3 * statistics.median(t),
            "samples_per_s": size["batch"] / statistics.median(t),
            "vs_reference": ref / statistics.median(t),
            "cpu_ms_per_step": 1e3 * statistics.median(cpu[name]),
            "cpu_vs_reference": ref_cpu / statistics.median(cpu[name]),
        }
        for name, t in times.items()
    }


def thread_scaling(size_name: str, steps: int, warmup: int = 3) -> dict[str, Any]:
    """What two threads give, every peer interleaved step by step on the same batches: asyncnet
    numpy straight with 1 thread, async_scheduling with 2 workers (its big products split onto
    an idle worker, and the same net with the split off) and with 1 worker + the caller,
    straight with 2 threads a kernel, the peer with 1 and with 2 intra-op threads.
    Median ms per step, the ratios the targets name, and the split counts."""
    import torch
    from threadpoolctl import ThreadpoolController, threadpool_limits

    from asyncnet.tensor import parallel

    size = SIZES[size_name]
    lr = 0.01
    data = batches(size, steps + warmup)
    one, params = asyncnet_peer(size, lr, "straight", 1, "numpy")
    two, _ = asyncnet_peer(size, lr, "async_scheduling", 2, "numpy")
    nosplit, _ = asyncnet_peer(size, lr, "async_scheduling", 2, "numpy")
    caller, _ = asyncnet_peer(size, lr, "async_scheduling", 1, "numpy")  # 1 pool thread + the caller
    wide, _ = asyncnet_peer(size, lr, "straight", 1, "numpy")  # 1 executor thread, 2 threads a kernel
    ref1, ref2 = torch_peer(size, params, lr), torch_peer(size, params, lr)
    on = parallel.SPLIT_MIN_MACS
    enabled, parallel.ENABLED = parallel.ENABLED, True  # the split is off by default: measured here
    peers = {
        "asyncnet 1t straight": (one, 1, on),
        "asyncnet 2t async_scheduling": (two, 1, on),
        "asyncnet 2t async, no split": (nosplit, 1, 1 << 62),
        "asyncnet async 1 worker + caller": (caller, 1, on),
        "reference 1t": (ref1, 1, on),
        "reference 2t": (ref2, 2, on),
        "asyncnet straight, 2 threads a kernel": (wide, 2, on),  # last: see train_steps
    }
    times: dict[str, list[float]] = {name: [] for name in peers}
    splits = {"split": 0, "whole": 0}
    blas = ThreadpoolController()
    for i, b in enumerate(data):
        for name, (step, intra, split_min) in peers.items():
            torch.set_num_threads(intra)
            parallel.SPLIT_MIN_MACS = split_min
            before = parallel.stats()
            with blas.limit(limits=1 if name.startswith("reference") else intra):  # as in train_steps
                t0 = time.perf_counter()
                step(b)
                if i >= warmup:
                    times[name].append(time.perf_counter() - t0)
                    if name == "asyncnet 2t async_scheduling":
                        after = parallel.stats()
                        for k in splits:
                            splits[k] += after[k] - before[k]
    parallel.SPLIT_MIN_MACS = on
    parallel.ENABLED = enabled
    with threadpool_limits(1):
        torch.set_num_threads(1)
        threads_2t = _profiled_threads(two, data[:warmup])
        threads_1t = _profiled_threads(one, data[:warmup])
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    two_ms = ms["asyncnet 2t async_scheduling"]
    return {
        "ms_per_step": ms,
        "asyncnet_2t_vs_1t": ms["asyncnet 1t straight"] / two_ms,
        "asyncnet_2t_vs_reference_2t": ms["reference 2t"] / two_ms,
        "split_vs_no_split": ms["asyncnet 2t async, no split"] / two_ms,
        "one_worker_and_caller_vs_1t": ms["asyncnet 1t straight"] / ms["asyncnet async 1 worker + caller"],
        "one_worker_and_caller_vs_reference_2t": ms["reference 2t"] / ms["asyncnet async 1 worker + caller"],
        "wide_kernels_vs_reference_2t": ms["reference 2t"] / ms["asyncnet straight, 2 threads a kernel"],
        "reference_2t_vs_1t": ms["reference 1t"] / ms["reference 2t"],
        "profile_2t": threads_2t,
        "profile_1t": threads_1t,
        "splits_per_step": splits["split"] / max(1, steps),
        "unsplit_for_lack_of_a_core_per_step": splits["whole"] / max(1, steps),
    }


def _profiled_threads(step: Any, data: list[Batch]) -> dict[str, Any]:
    """One profiled step after ``data``'s: each thread's op time, the step's span (ms), and the
    sum of op times over the span (the threads running ops at once, on average)."""
    from asyncnet.exec.trace import profile

    ws = step.workspace
    for b in data[:-1]:
        step(b)
    with profile(ws.net("train")) as tl:
        step(data[-1])
    busy: dict[str, float] = {}
    for e in tl.events:
        busy[e.thread_name] = busy.get(e.thread_name, 0.0) + 1e3 * e.duration
    span = 1e3 * (max(e.end for e in tl.events) - min(e.start for e in tl.events))
    return {
        "busy_ms": busy,
        "span_ms": span,
        "ops_ms": sum(busy.values()),
        "threads_at_once": sum(busy.values()) / span,
    }


def sparse_ops(reps: int, size_name: str = "large") -> dict[str, Any]:
    """Per-op ms of one size's lookup and update, asyncnet numpy / torch against the peer: wall
    time, and the process's CPU time (one thread each; the CPU time moves less with the load of
    a shared machine)."""
    import torch

    import asyncnet as an

    torch.set_num_threads(1)
    size = SIZES[size_name]
    rng = np.random.default_rng(0)
    t, r, d, b, n = len(size["tables"]), size["tables"][0], size["dim"], size["batch"], size["ids"]
    tables = [rng.uniform(-0.003, 0.003, (r, d)).astype(np.float32) for _ in range(t)]
    ids = [rng.integers(0, r, b * n) for _ in range(t)]
    lengths = np.full(b, n, np.int32)
    dys = [rng.normal(size=(b, d)).astype(np.float32) for _ in range(t)]

    def ours(lib: str) -> tuple[Callable[[], None], Callable[[], None]]:
        conv = _to_torch if lib == "torch" else (lambda a: a.copy())
        ws = an.Workspace()
        for k in range(t):
            for name, v in ((f"t{k}", tables[k]), (f"i{k}", ids[k]), (f"l{k}", lengths), (f"dy{k}", dys[k])):
                ws.feed(name, conv(v.copy()))
        ws.feed("one", conv(np.ones(1, np.float32)))
        ws.feed("neg_lr", conv(np.full(1, -0.01, np.float32)))
        look, upd = an.Net("look", type="straight"), an.Net("upd", type="straight")
        for k in range(t):  # the update as the train net runs it: fused with the lookup's gradient
            look.SparseLengthsSum([f"t{k}", f"i{k}", f"l{k}"], f"p{k}")
            upd.SparseSGDFusedWithSparseLengthsSumGradient([f"t{k}", f"i{k}", f"dy{k}", "neg_lr", f"l{k}"], f"t{k}")
        ws.create_net(look)
        ws.create_net(upd)
        return (lambda: ws.run_net("look")), (lambda: ws.run_net("upd"))

    def reference() -> tuple[Callable[[], None], Callable[[], None]]:
        embs = [torch.nn.EmbeddingBag(r, d, mode="sum", sparse=True) for _ in range(t)]
        for e, w in zip(embs, tables):
            e.weight.data = torch.tensor(w)
        opt = torch.optim.SGD([e.weight for e in embs], lr=0.01)
        idx, offs = [torch.from_numpy(i) for i in ids], torch.arange(0, b * n, n)
        grads, state = [torch.from_numpy(g) for g in dys], {}

        def look() -> None:
            state["pooled"] = [e(i, offs) for e, i in zip(embs, idx)]

        def upd() -> None:
            opt.zero_grad()
            torch.autograd.backward(state["pooled"], grads)
            opt.step()

        return look, upd

    peers = {"pytorch EmbeddingBag": reference(), "asyncnet numpy": ours("numpy"), "asyncnet torch": ours("torch")}
    times = {(p, w): [] for p in peers for w in ("lookup", "update", "lookup cpu", "update cpu")}
    for i in range(reps + 1):
        for p, (look, upd) in peers.items():
            t0, c0 = time.perf_counter(), time.process_time()
            look()
            t1, c1 = time.perf_counter(), time.process_time()
            upd()
            t2, c2 = time.perf_counter(), time.process_time()
            if i:
                for w, dt in (
                    ("lookup", t1 - t0),
                    ("update", t2 - t1),
                    ("lookup cpu", c1 - c0),
                    ("update cpu", c2 - c1),
                ):
                    times[p, w].append(dt)
    return {f"{p} {w}": 1e3 * statistics.median(v) for (p, w), v in times.items()}


def _load() -> list[str]:
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: zoo size, 3 steps, small per-op tables")
    ap.add_argument("--sizes", default="zoo,large")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15, help="repetitions of the per-op measurement")
    ap.add_argument("--no-ops", action="store_true", help="skip the per-op lookup/update measurement")
    ap.add_argument("--no-train", action="store_true", help="skip the training steps")
    ap.add_argument(
        "--scaling",
        action="store_true",
        help="also the 2-thread gain: asyncnet 1t and 2t (split on and off) and the reference 1t and 2t, interleaved",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.steps, args.reps = "zoo", 3, 2
    report: dict[str, Any] = {"load_before": _load(), "train": {}, "ops": {}}
    for size in [] if args.no_train else args.sizes.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            res = train_steps(size, threads, args.steps)
            report["train"][f"{size} {threads} thread(s)"] = res
            if not args.json:
                for name, r in res.items():
                    print(
                        f"{size:5s} {threads}t  {name:34s} {r['ms_per_step']:8.2f} ms/step {r['samples_per_s']:10,.0f} "
                        f"samples/s  {r['vs_reference']:.2f}x the reference; CPU {r['cpu_ms_per_step']:7.2f} ms "
                        f"{r['cpu_vs_reference']:.2f}x"
                    )
    if args.scaling:
        for size in args.sizes.split(","):
            sc = report.setdefault("scaling", {})[size] = thread_scaling(size, args.steps)
            if not args.json:
                for name, ms in sc["ms_per_step"].items():
                    print(f"{size:5s} scaling  {name:32s} {ms:8.2f} ms/step")
                print(
                    f"{size:5s} scaling  asyncnet 2t vs its 1t {sc['asyncnet_2t_vs_1t']:.2f}x, vs the reference 2t "
                    f"{sc['asyncnet_2t_vs_reference_2t']:.2f}x, split vs no split {sc['split_vs_no_split']:.2f}x; "
                    f"1 worker + caller vs 1t {sc['one_worker_and_caller_vs_1t']:.2f}x, vs the reference 2t "
                    f"{sc['one_worker_and_caller_vs_reference_2t']:.2f}x; straight with 2 threads a kernel vs "
                    f"the reference 2t {sc['wide_kernels_vs_reference_2t']:.2f}x; "
                    f"reference 2t vs 1t {sc['reference_2t_vs_1t']:.2f}x; {sc['splits_per_step']:.1f} products "
                    f"split per step ({sc['unsplit_for_lack_of_a_core_per_step']:.1f} not, no core free)"
                )
                for label, pr in (("1t", sc["profile_1t"]), ("2t", sc["profile_2t"])):
                    per = ", ".join(f"{k} {v:.1f}" for k, v in sorted(pr["busy_ms"].items()))
                    print(
                        f"{size:5s} scaling  profiled {label} step: span {pr['span_ms']:.1f} ms, ops {pr['ops_ms']:.1f} ms "
                        f"({pr['threads_at_once']:.2f} threads at once; {per})"
                    )
    if not args.no_ops:
        report["ops"] = sparse_ops(args.reps, "zoo" if args.quick else "large")
        if not args.json:
            for name, ms in report["ops"].items():
                print(f"ops   {name:36s} {ms:8.2f} ms")
    report["load_after"] = _load()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"load average before {' '.join(report['load_before'])}, after {' '.join(report['load_after'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
