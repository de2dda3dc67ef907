"""Overlap benchmark: ``python -m benchmarks overlap [--json] [--quick] [--bucket-mb MB]``.

The wide MLP (64-1024-1024-10, ``--batch`` 512 examples per rank, SGD) trained data-parallel
on 2 gloo ranks over 127.0.0.1 (``torch.multiprocessing.spawn``, one BLAS thread per rank),
each rank running its train net on the async_scheduling executor. Median step times of:

- compute: the train net without any sync (forward, backward, update);
- communication: ``sync_gradients`` of all the gradients alone (4.3 MB per rank), held as
  views of one buffer as the overlapped net holds them (one all-reduce, no concatenation);
- no overlap: one ``Allreduce`` of every gradient after the backward pass (``bucket_mb=None``);
- overlap: one ``AllreduceStart`` per bucket of ``--bucket-mb`` MiB right after its last
  gradient (torch ``async_op=True`` work handles), waits before the update.

The bound is max(compute, communication): what perfect overlap would give. Target: overlap
<= 1.15x the bound. It holds only if the all-reduce costs the ranks no CPU; gloo over TCP
does cost CPU (its threads copy, sum and move the buckets through the kernel), and when the
ranks fill the cores (R ranks, one compute thread each, on C <= R cores) that time comes out of
the compute. The CPU-aware bound: each rank needs ``compute + comm_cpu`` seconds of CPU per step
(``comm_cpu``: the process CPU time of the all-reduce alone, every thread counted), R ranks
share C cores, and a rank's compute is serial:
``max(compute, communication, (compute + comm_cpu) * R / C)``. Both bounds are printed. The
four parts take turns each round, a barrier starting each on both ranks together. Each figure
is the job's: per round the slower rank's time (a synchronous step ends with its last rank,
and its compute is the slower rank's), then the median over rounds; each rank's own median
compute is printed beside it (rank 0's own medians alone would put the bound below what the
slower rank allows).

``--timeline`` then runs more overlapped steps with the net recorder on and prints, per rank,
each op's median start and end (ms from the step's start, and the thread that ran it) and
each thread's CPU time per step, gloo's own threads included (Linux: /proc/self/task): where
the time between the bound and the overlapped step goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from asyncnet.simulate.measure import DIMS, interleaved_rounds, spawn_ranks

__all__ = ["main", "DIMS", "cpu_aware_bound", "job_medians"]


def job_medians(per_rank: list[dict[str, list[float]]]) -> dict[str, float]:
    """The data-parallel job's median of each part: per round the slowest rank's time (a
    synchronous step ends when its last rank does, and its compute is the slower rank's),
    then the median over rounds; ``<part>_rank<r>_s``: each rank's own median.

    >>> r = job_medians([{"compute": [1.0, 3.0, 2.0]}, {"compute": [2.0, 1.0, 2.5]}])
    >>> r["compute_s"], r["compute_rank0_s"], r["compute_rank1_s"]
    (2.5, 2.0, 2.0)
    """
    out: dict[str, float] = {}
    for name in per_rank[0]:
        out[f"{name}_s"] = statistics.median(max(ts) for ts in zip(*(r[name] for r in per_rank)))
        for rank, r in enumerate(per_rank):
            out[f"{name}_rank{rank}_s"] = statistics.median(r[name])
    return out


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process by name (Python's name, else the kernel's), Linux only."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        name = names.get(int(tid), comm)
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _timeline(ws: Any, inst: Any, name: str, steps: int, barrier: Any) -> dict[str, Any]:
    """Median start/end (ms from the step's start) of each op of ``steps`` recorded runs, the
    thread that ran it most often, and each thread's CPU ms per step."""
    from asyncnet.exec.trace import Timeline

    tl = Timeline()
    inst.recorder = tl
    spans: dict[tuple[int, str], list[tuple[float, float, str]]] = {}
    before = _thread_cpu()
    try:
        for _ in range(steps):
            barrier()
            tl.clear()
            t0 = time.perf_counter()
            ws.run_net(name)
            for e in tl.events:
                spans.setdefault((e.op_index, e.op_type), []).append((e.start - t0, e.end - t0, e.thread_name))
    finally:
        inst.recorder = None
    after = _thread_cpu()
    ops = [
        [
            i,
            typ,
            statistics.mode(t for _, _, t in v),
            statistics.median(s for s, _, _ in v) * 1e3,
            statistics.median(e for _, e, _ in v) * 1e3,
        ]
        for (i, typ), v in spans.items()
    ]
    cpu = {k: (after[k] - before.get(k, 0.0)) * 1e3 / steps for k in after if after[k] > before.get(k, 0.0)}
    return {"ops": sorted(ops, key=lambda o: o[3]), "thread_cpu_ms": cpu}


def cpu_aware_bound(compute: float, comm: float, comm_cpu: float, ranks: int, cores: int) -> float:
    """Best step time when the all-reduce's CPU time competes with compute for the cores
    (see the module doc).

    >>> round(cpu_aware_bound(0.048, 0.007, 0.003, ranks=2, cores=2), 3)
    0.051
    """
    return max(compute, comm, (compute + comm_cpu) * ranks / cores)


def _rank(
    rank: int, world: int, port: int, out: str, batch: int, bucket_mb: float, steps: int, timeline: bool = False
) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    import asyncnet as an
    from asyncnet.core.bound import bind_views
    from asyncnet.model.zoo import mlp
    from asyncnet.sync import TorchDistributedGradientSync
    from asyncnet.train import Program

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sync = TorchDistributedGradientSync(check="first")
        model = Program(
            mlp(DIMS[0], tuple(DIMS[1:-1]), DIMS[-1], seed=0, net_type="async_scheduling", num_workers=1), lr=0.01
        )
        ws = an.Workspace()
        ws.run_net_once(model.init_net)
        ws.feed("sync", sync)
        rng = np.random.default_rng(rank)
        ws.feed("data", rng.standard_normal((batch, DIMS[0])).astype(np.float32))
        ws.feed("label", rng.integers(0, DIMS[-1], batch).astype(np.int32))
        nets = {
            "compute": model.train_net("compute"),
            "no_overlap": model.train_net("no_overlap", sync_blob="sync", bucket_mb=None),
            "overlap": model.train_net("overlap", sync_blob="sync", bucket_mb=bucket_mb),
        }
        insts = {}
        for name, net in nets.items():
            net_def = net.to_def()
            net_def.own_pool = True
            insts[name] = ws.create_net(net_def)
        ws.run_net("compute")
        # as views of one buffer, as the overlapped net keeps them: the all-reduce alone, no concatenation
        grads = bind_views([ws.fetch(model.grads[p]) for p in model.params])
        parts = {
            "compute": lambda: ws.run_net("compute"),
            "comm": lambda: sync.sync_gradients(grads),
            "no_overlap": lambda: ws.run_net("no_overlap"),
            "overlap": lambda: ws.run_net("overlap"),
        }
        mine = interleaved_rounds(parts, steps, 2, dist.barrier)
        every_rank: list[Any] = [None] * world
        dist.all_gather_object(every_rank, mine)
        res: dict[str, Any] = job_medians(every_rank)
        res["grad_bytes"] = int(sum(g.nbytes for g in grads))
        res["buckets"] = sum(op.type == "AllreduceStart" for op in nets["overlap"].ops)
        if timeline:
            tl = _timeline(ws, insts["overlap"], "overlap", steps, dist.barrier)
            every: list[Any] = [None] * world
            dist.all_gather_object(every, tl)
            res["timeline"] = every
        ws.close()
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(res, f)
    finally:
        dist.destroy_process_group()


def measure(batch: int = 512, bucket_mb: float = 1.0, steps: int = 20, timeline: bool = False) -> dict[str, Any]:
    """Run the 2 ranks and return the job's figures (:func:`job_medians`) plus the bound and ratios (and with
    ``timeline`` each rank's op timeline and thread CPU of the overlapped step)."""
    res = spawn_ranks(_rank, 2, batch, bucket_mb, steps, timeline, prefix="asyncnet-overlap-")
    bound = max(res["compute_s"], res["comm_s"])
    cores = os.cpu_count() or 1
    cpu_bound = cpu_aware_bound(res["compute_s"], res["comm_s"], res["comm_cpu_s"], 2, cores)
    res.update(
        batch=batch,
        bucket_mb=bucket_mb,
        steps=steps,
        bound_s=bound,
        cores=cores,
        cpu_bound_s=cpu_bound,
        overlap_over_bound=res["overlap_s"] / bound,
        no_overlap_over_bound=res["no_overlap_s"] / bound,
        overlap_over_cpu_bound=res["overlap_s"] / cpu_bound,
        no_overlap_over_cpu_bound=res["no_overlap_s"] / cpu_bound,
        load_average=os.getloadavg(),
    )
    return res


def _table(r: dict[str, Any]) -> str:
    ms = lambda k: f"{r[k] * 1e3:8.2f} ms"
    la = r["load_average"]
    return "\n".join(
        [
            f"wide MLP {'-'.join(map(str, DIMS))}, batch {r['batch']} per rank, 2 gloo ranks on 127.0.0.1, "
            f"{r['grad_bytes'] / 2**20:.1f} MiB of gradients; load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}",
            f"  compute (no sync)            {ms('compute_s')}   (process CPU {ms('compute_cpu_s')}; each rank's own "
            f"median {r['compute_rank0_s'] * 1e3:.2f} / {r['compute_rank1_s'] * 1e3:.2f} ms)",
            f"  communication (all-reduce)   {ms('comm_s')}   (process CPU {ms('comm_cpu_s')}: comm_cpu)",
            f"  bound max(compute, comm)     {ms('bound_s')}",
            f"  CPU-aware bound              {ms('cpu_bound_s')}   max(compute, comm, (compute + comm_cpu) x 2 ranks "
            f"/ {r['cores']} cores) = {r['cpu_bound_s'] / r['bound_s']:.2f}x bound",
            f"  no overlap (one Allreduce)   {ms('no_overlap_s')}   {r['no_overlap_over_bound']:.2f}x bound, "
            f"{r['no_overlap_over_cpu_bound']:.2f}x CPU-aware bound   (process CPU {ms('no_overlap_cpu_s')})",
            f"  overlap ({r['buckets']} buckets of {r['bucket_mb']:g} MiB) {ms('overlap_s')}   "
            f"{r['overlap_over_bound']:.2f}x bound, {r['overlap_over_cpu_bound']:.2f}x CPU-aware bound   (process CPU {ms('overlap_cpu_s')})",
            "  target: overlap <= 1.15x the bound; figures: per round the slower rank's, median over rounds; "
            "compute's process CPU well below its wall time means other jobs took the cores",
            *_timeline_lines(r.get("timeline")),
        ]
    )


def _timeline_lines(timeline: list[dict[str, Any]] | None) -> list[str]:
    """The ``--timeline`` figures: each rank's ops (median start -> end, ms) and threads' CPU per step."""
    lines: list[str] = []
    for rank, tl in enumerate(timeline or []):
        lines.append(f"rank {rank}: overlapped step, median ms from its start (op, the thread that ran it most)")
        for i, typ, thread, start, end in tl["ops"]:
            lines.append(f"  {i:3d} {typ:24s} {start:7.2f} -> {end:7.2f}  ({end - start:6.2f})  {thread}")
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(tl["thread_cpu_ms"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  CPU ms per step by thread: {cpu}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks overlap", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quick", action="store_true", help="batch 64, 5 steps (a smoke run)")
    p.add_argument("--batch", type=int, default=512, help="examples per rank and step")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="bucket size of the overlapped net (MiB)")
    p.add_argument("--steps", type=int, default=20, help="measured steps per part (the median is kept)")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="also print each rank's op timeline and per-thread CPU of the overlapped step",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.steps = 64, 5
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        print("python -m benchmarks overlap needs PyTorch: pip install 'asyncnet[torch]'", file=sys.stderr)
        return 2
    res = measure(args.batch, args.bucket_mb, args.steps, args.timeline)
    print(json.dumps(res, indent=2) if args.json else _table(res))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
