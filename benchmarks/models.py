"""Models benchmark: every zoo model trained by asyncnet's trainers against the same model in PyTorch eager.

    python -m benchmarks models [--json] [--quick] [--model NAME] [--repeat N]

For each zoo model (mlp, cnn, lstm on the digits; dlrm on its generated click log) one run
trains, with the trainers' default optimizer and learning rate of each mode
(:data:`asyncnet.train.config.MODEL_DEFAULTS`):

- asyncnet local, sync with 2 threads and Hogwild with 2 threads, on numpy arrays and on torch
  CPU tensors (``tensor="torch"``), each on the trainer's default executor
  (:class:`~asyncnet.train.TrainConfig` ``net_type=None``);
- the model's torch twin (:mod:`benchmarks.peers.torch_twins`) in a plain PyTorch eager loop:
  the same initial weights, the same batches (:func:`asyncnet.train.data.epoch_batches`, same
  seed) and ``torch.optim`` with the local mode's optimizer and learning rate; a step is timed
  as the trainers time theirs: the batch's feeds made from its rows, the step, the loss read;
- for dlrm also asyncnet local on async_scheduling ("local async") and on the simple executor
  ("local simple"): the pair shows what running the embedding lookups beside the bottom MLP buys. The zoo's dlrm is tiny (tables
  of 100 rows of dim 8), so the pair is also measured on a large DLRM (:data:`LARGE_DLRM`:
  3 tables of 100,000 rows of dim 64, 20 ids per bag, bottom and top MLP of 512, batch 512):
  the same train net run for a fixed number of steps on each executor. On async net types dlrm
  splits its FC gradients (dX first, dW beside it; the same bits): simple runs that split net
  and its unsplit default, and the ratio is to the faster of the two (:data:`PAIR_NETS`).

Each row gives samples/s (training steps only, over the epochs after the first, the fastest of
``--repeat`` rounds that interleave the rows), the ratio to torch eager, and the epochs and
training seconds to the model's target: test accuracy 98% (cnn), 95% (lstm, mlp), test AUC
within 0.02 of the click log's optimum (dlrm). BLAS runs single-threaded (the benchmark re-runs
itself with OMP/OPENBLAS/MKL_NUM_THREADS=1), and torch uses one intra-op thread.

Targets: asyncnet's best mode >= 1.0x torch eager on every model; on dlrm,
async_scheduling >= 1.3x the simple executor, judged on the large DLRM's median samples/s
over :data:`PAIR_ROUNDS` rounds (the zoo dlrm's ratio is printed too: its step holds the GIL
84% of the time, which bounds it at ~1.19x on any 2-thread schedule). Measured, never asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from benchmarks._single import single_threaded_main
from benchmarks._table import cell

MODELS = ("mlp", "cnn", "lstm", "dlrm")
#: (metric, bar): test accuracy >= bar, or test AUC >= the optimum's - bar
TARGETS = {"mlp": ("accuracy", 0.95), "cnn": ("accuracy", 0.98), "lstm": ("accuracy", 0.95), "dlrm": ("auc_gap", 0.02)}
#: epochs and batch size per model: enough epochs for the target with the defaults
#: (dlrm: batch 128 as DLRM is trained, with SGD's rate raised to 0.5 for it; the trainers'
#: default 0.05 is for batch 32)
FULL = {
    "mlp": dict(epochs=10, batch_size=32),
    "cnn": dict(epochs=10, batch_size=32),
    "lstm": dict(epochs=10, batch_size=32),
    "dlrm": dict(epochs=4, batch_size=128, lr=0.5),
}
QUICK = {m: {**s, "epochs": 1} for m, s in FULL.items()}
#: The executor pair at a size where kernels, not Python, fill a step (the zoo's dlrm has
#: 100-row tables of dim 8: there is nothing to overlap). Same architecture, generated log.
LARGE_DLRM = dict(num_dense=64, table_sizes=(100000, 100000, 100000), dim=64, bottom=(512,), top=(512,))
LARGE = dict(batch_size=512, max_ids=20, steps=20)
QUICK_LARGE = dict(batch_size=128, max_ids=20, steps=4, table_sizes=(10000, 10000, 10000))
QUICK_CLICKS = (2000, 1000)  # --quick: a small click log, so dlrm's rows take a fraction of a second
#: (label, mode, workers, tensor, net_type)
#: net_type None: the trainer's default (local: "straight", the others: "async_scheduling")
ROWS = [
    ("local", "local", 1, "numpy", None),
    ("sync 2", "sync", 2, "numpy", None),
    ("hogwild 2", "hogwild", 2, "numpy", None),
    ("local", "local", 1, "torch", None),
    ("sync 2", "sync", 2, "torch", None),
    ("hogwild 2", "hogwild", 2, "torch", None),
]
#: dlrm's executor pair: the local trainer on async_scheduling (lookups beside the bottom MLP) and on simple
ASYNC_ROW = ("local async", "local", 1, "numpy", "async_scheduling")
SIMPLE_ROW = ("local simple", "local", 1, "numpy", "simple")
EAGER = "torch eager"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks models", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 epoch, a small click log, one round")
    p.add_argument("--model", choices=MODELS, action="append", help="only this model (repeatable; default all)")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="rounds over the rows; the fastest samples/s is kept (default 3, quick 1)",
    )
    args = p.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    return args


def _dataset(model: str, quick: bool) -> Any:
    from asyncnet.train.data import dataset_for, load_clicks

    return load_clicks(*QUICK_CLICKS) if quick and model == "dlrm" else dataset_for(model)


def _reached(model: str, m: Any) -> bool:
    """Did epoch metrics ``m`` reach ``model``'s target?"""
    metric, bar = TARGETS[model]
    if metric == "accuracy":
        return m["test_accuracy"] >= bar
    return m["test_auc"] is not None and m["test_auc"] >= m["optimal_auc"] - bar


def _figures(model: str, label: str, tensor: str, epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """A row from per-epoch dicts (seconds, samples, test_accuracy, test_auc, optimal_auc)."""
    steady = epochs[1:] or epochs
    seconds, samples = sum(e["seconds"] for e in steady), sum(e["samples"] for e in steady)
    to_target, t = None, 0.0
    for e in epochs:
        t += e["seconds"]
        if _reached(model, e):
            to_target = (e["epoch"], t)
            break
    last = epochs[-1]
    return {
        "model": model,
        "mode": label,
        "tensor": tensor,
        "samples_per_sec": samples / seconds if seconds > 0 else 0.0,
        "epochs_to_target": to_target[0] if to_target else None,
        "seconds_to_target": to_target[1] if to_target else None,
        "final_test_accuracy": last["test_accuracy"],
        "final_test_auc": last.get("test_auc"),
        "optimal_auc": last.get("optimal_auc"),
        "reached_target": to_target is not None,
    }


def measure(model: str, row: tuple[str, str, int, str, str], settings: dict[str, Any], ds: Any) -> dict[str, Any]:
    """Train ``model`` in one asyncnet mode (a :data:`ROWS` entry) and return its row."""
    from asyncnet.train import TrainConfig, train

    label, mode, workers, tensor, net_type = row
    cfg = TrainConfig(
        model=model,
        mode=mode,
        workers=workers,
        tensor=tensor,
        net_type=net_type,
        seed=0,
        trace=False,
        threads=1,
        **settings,
    )
    h = train(cfg, ds).history
    epochs = [
        {
            "epoch": m.epoch,
            "seconds": m.seconds,
            "samples": m.samples,
            "test_accuracy": m.test_accuracy,
            "test_auc": m.test_auc,
            "optimal_auc": m.optimal_auc,
        }
        for m in h.epochs
    ]
    out = _figures(model, label, tensor, epochs)
    out.update(optimizer=cfg.optimizer, lr=cfg.lr, net_type=cfg.net_type)
    return out


def torch_eager(model: str, settings: dict[str, Any], ds: Any) -> dict[str, Any]:
    """The torch twin of ``model`` with the local mode's optimizer (``torch.optim``), initial
    weights and batches, in a plain eager loop; one intra-op thread."""
    import torch

    import asyncnet as an
    from asyncnet.model.zoo.dlrm import auc
    from asyncnet.train import TrainConfig
    from asyncnet.train.data import epoch_batches
    from asyncnet.train.program import build_program
    from benchmarks.peers.torch_twins import torch_twin

    cfg = TrainConfig(model=model, mode="local", seed=0, trace=False, threads=1, **settings)
    asy = build_program(cfg, ds.input_dim, ds.num_classes)
    with an.Workspace() as ws:
        ws.run_net_once(asy.init_net)
        net = torch_twin(model, {p: np.array(ws.fetch(p), copy=True) for p in asy.params})
    opt = _torch_optimizer(torch, net, cfg)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        test_feeds = ds.feeds(ds.x_test, ds.y_test)
        epochs = []
        for epoch in range(1, cfg.epochs + 1):
            t, n = 0.0, 0
            for xb, yb in epoch_batches(ds.x_train, ds.y_train, cfg.batch_size, epoch, cfg.seed):
                start = time.perf_counter()  # timed as the trainers time a step: from the batch's rows to its loss
                feeds = ds.feeds(xb, yb)
                opt.zero_grad(set_to_none=True)
                loss = net.loss(feeds)
                loss.backward()
                opt.step()
                loss.item()
                t += time.perf_counter() - start
                n += len(yb)
            scores = net.predict(test_feeds).numpy()
            e = {"epoch": epoch, "seconds": t, "samples": n, "test_auc": None, "optimal_auc": None}
            if net.binary:
                e.update(
                    test_accuracy=float(np.mean((scores[:, 0] > 0.5) == (ds.y_test > 0))),
                    test_auc=auc(ds.y_test, scores),
                    optimal_auc=ds.optimal_auc(),
                )
            else:
                e["test_accuracy"] = float(np.mean(np.argmax(scores, axis=1) == ds.y_test))
            epochs.append(e)
    finally:
        torch.set_num_threads(old_threads)
    out = _figures(model, EAGER, "torch", epochs)
    out.update(optimizer=cfg.optimizer, lr=cfg.lr, net_type="-")
    return out


#: rounds of the large pair (each ~0.6 s: one pass of its 20 steps per net, interleaved); its
#: target is judged on each net's median samples/s over the rounds, which three rounds left to chance
PAIR_ROUNDS = 10

#: the large pair's nets: (label, net type, FC gradients split). async_scheduling runs dlrm's
#: split net (:func:`asyncnet.model.zoo.dlrm.dlrm`); simple runs that same net and its own
#: default, the unsplit one (3 ops a layer fewer), and the ratio is taken to the faster of the two
PAIR_NETS = (
    ("simple", "simple", False),
    ("simple split", "simple", True),
    ("async_scheduling", "async_scheduling", True),
)


def executor_pair(quick: bool, repeat: int) -> list[dict[str, Any]]:
    """samples/s of the large DLRM's train net on the simple and the async_scheduling executor
    (a pool of one thread plus the caller), the fastest of ``repeat`` interleaved rounds
    (``samples_per_sec_runs``: every round's)."""
    from asyncnet.model.zoo import dlrm
    from asyncnet.model.zoo.dlrm import click_log
    from asyncnet.train import TrainConfig
    from asyncnet.train.program import Program
    from asyncnet.train.worker import WorkerNets

    size = QUICK_LARGE if quick else LARGE
    arch = {k: size.get(k, v) for k, v in LARGE_DLRM.items()}
    bs, steps = size["batch_size"], size["steps"]
    log = click_log(bs * steps, num_dense=arch["num_dense"], table_sizes=arch["table_sizes"], max_ids=size["max_ids"])
    batches = [log.batch(range(s * bs, s * bs + bs)) for s in range(steps)]
    workers, runs = {}, {}
    for label, net_type, split in PAIR_NETS:
        cfg = TrainConfig(mode="local", model="dlrm", seed=0, trace=False, threads=1, batch_size=bs, net_type=net_type)
        model = Program(
            dlrm(net_type=net_type, num_workers=cfg.net_threads, split_fc_gradients=split, **arch),
            optimizer="sgd",
            lr=0.1,
        )
        workers[label], runs[label] = WorkerNets(cfg, model, feeds=lambda x, y: x), []
    try:
        for r in range(repeat + 1):  # round 0 warms up (and lets the executor measure its chains)
            for label, w in workers.items():
                start = time.perf_counter()
                for feeds in batches:
                    for k, v in feeds.items():
                        w.ws.feed(k, v)
                    w.train_net.run()
                if r:
                    runs[label].append(bs * steps / (time.perf_counter() - start))
    finally:
        for w in workers.values():
            w.close()
    return [
        {
            "model": "dlrm large",
            "mode": "local async" if t == "async_scheduling" else "local simple",
            "tensor": "numpy",
            "net": label,
            "net_type": t,
            "split_fc_gradients": split,
            "samples_per_sec": max(runs[label]),
            "samples_per_sec_runs": [round(x) for x in runs[label]],
            "batch_size": bs,
            "steps": steps,
        }
        for label, t, split in PAIR_NETS
    ]


def pair_ratio(pair: list[dict[str, Any]], pick: Any = max) -> float:
    """async_scheduling's samples/s over the faster simple row's (``pick`` of each row's rounds)."""
    speed = {r["net"]: pick(r["samples_per_sec_runs"]) for r in pair}
    return speed["async_scheduling"] / max(speed["simple"], speed["simple split"])


def _torch_optimizer(torch: Any, net: Any, cfg: Any) -> Any:
    """torch.optim's twin of the trainer's optimizer (asyncnet's ops use formula="torch")."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    momentum = cfg.momentum if cfg.optimizer == "momentum" else 0.0
    return torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=momentum, weight_decay=cfg.weight_decay)


def run(args: argparse.Namespace) -> dict[str, Any]:
    models = list(dict.fromkeys(args.model or MODELS))
    repeat = args.repeat or (1 if args.quick else 3)
    settings = QUICK if args.quick else FULL
    plan: list[tuple[str, Any]] = []
    for model in models:
        plan += (
            [(model, r) for r in ROWS]
            + [(model, EAGER)]
            + ([(model, ASYNC_ROW), (model, SIMPLE_ROW)] if model == "dlrm" else [])
        )
    data = {m: _dataset(m, args.quick) for m in models}
    runs: list[list[dict[str, Any]]] = [[] for _ in plan]
    for _ in range(repeat):  # rounds interleave the rows, so a noisy spell hits them all
        for i, (model, row) in enumerate(plan):
            runs[i].append(
                torch_eager(model, settings[model], data[model])
                if row == EAGER
                else measure(model, row, settings[model], data[model])
            )
    rows = []
    for r in runs:  # accuracy from the first round, speed the best
        row = dict(r[0])
        row["samples_per_sec"] = max(x["samples_per_sec"] for x in r)
        row["samples_per_sec_runs"] = [round(x["samples_per_sec"]) for x in r]
        rows.append(row)
    ratios, targets = {}, {}
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        eager = next(r["samples_per_sec"] for r in mine if r["mode"] == EAGER)
        for r in mine:
            r["vs_torch_eager"] = r["samples_per_sec"] / eager if eager > 0 else 0.0
        best = max((r for r in mine if r["mode"] != EAGER), key=lambda r: r["samples_per_sec"])
        ratios[f"{model}_best_vs_torch_eager"] = best["vs_torch_eager"]
        targets[f"{model}_best_mode_at_least_1.0x_torch_eager"] = best["vs_torch_eager"] >= 1.0
        if model == "dlrm":
            by = {(r["mode"], r["tensor"]): r["samples_per_sec"] for r in mine}
            ratios["dlrm_async_vs_simple"] = by[("local async", "numpy")] / by[("local simple", "numpy")]
    large = []
    if "dlrm" in models:
        large = executor_pair(args.quick, repeat if args.quick else max(repeat, PAIR_ROUNDS))
        ratios["dlrm_large_async_vs_simple"] = pair_ratio(large)
        ratios["dlrm_large_async_vs_simple_median_rounds"] = pair_ratio(large, pick=statistics.median)
        # judged on the large DLRM: the zoo's tables (100 rows of dim 8) cost next to nothing, and its
        # step holds the GIL ~84% of the time (py-spy), which bounds any 2-thread schedule at ~1.19x
        targets["dlrm_async_scheduling_at_least_1.3x_simple"] = (
            ratios["dlrm_large_async_vs_simple_median_rounds"] >= 1.3
        )
    return {
        "benchmark": "models",
        "quick": bool(args.quick),
        "settings": {m: settings[m] for m in models},
        "large_dlrm": {**LARGE_DLRM, **(QUICK_LARGE if args.quick else LARGE)} if large else None,
        "executor_pair": large,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
    }


def table(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        "models benchmark: asyncnet's trainers vs the same model in PyTorch eager, single-threaded BLAS; "
        + ", ".join(f"{m} {v['epochs']} epochs batch {v['batch_size']}" for m, v in s.items()),
        f"{'model':<5} {'mode':<13} {'tensor':<6} {'optimizer':<11} {'samples/s':>10} {'vs eager':>9} "
        f"{'epochs to target':>16} {'s to target':>11} {'final':>16}",
    ]
    for r in result["rows"]:
        final = (
            f"AUC {r['final_test_auc']:.4f}/{r['optimal_auc']:.4f}"
            if r["final_test_auc"] is not None
            else f"acc {r['final_test_accuracy']:.2%}"
        )
        lines.append(
            f"{r['model']:<5} {r['mode']:<13} {r['tensor']:<6} {r['optimizer'] + ' ' + format(r['lr'], 'g'):<11} "
            f"{r['samples_per_sec']:>10,.0f} {r['vs_torch_eager']:>8.2f}x {cell(r['epochs_to_target'], 'd'):>16} "
            f"{cell(r['seconds_to_target'], '.2f'):>11} {final:>16}"
        )
    pair = result.get("executor_pair") or []
    if pair:
        d = result["large_dlrm"]
        lines.append(
            f"large dlrm (tables {len(d['table_sizes'])} x {d['table_sizes'][0]:,} x {d['dim']}, {d['max_ids']} ids per bag, "
            f"MLPs {d['bottom'][0]}, batch {d['batch_size']}, {d['steps']} steps): "
            + ", ".join(f"{r['net']} {r['samples_per_sec']:,.0f} samples/s" for r in pair)
            + " (async_scheduling and simple split run the same net, FC gradients split; simple its unsplit default)"
        )
    lines.append("targets: cnn 98%, lstm 95%, mlp 95% test accuracy; dlrm test AUC within 0.02 of the optimum")
    lines.append("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in result["ratios"].items()))
    lines.append("load average: " + " ".join(f"{x:.2f}" for x in result["load_average"]))
    lines.append("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in result["targets"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return single_threaded_main("benchmarks.models", argv, _parse, run, table)


if __name__ == "__main__":
    sys.exit(main())
