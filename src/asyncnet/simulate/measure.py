"""The simulator's inputs measured on this machine: the wide MLP's step on one rank and the
network between 2 gloo ranks on 127.0.0.1.

The model is the wide MLP (64-1024-1024-10, SGD) on gloo ranks started with
``torch.multiprocessing.spawn``, one BLAS thread each, its nets on the async_scheduling executor.
:func:`profile_compute` gives a :class:`~asyncnet.simulate.model.Workload` (forward, backward,
update: the medians of the forward, gradient and train nets without sync on one rank).
:func:`measure_network` gives a :class:`~asyncnet.simulate.model.Network` from 2 ranks (ring,
p = 2): a 4-byte all-reduce right after a barrier gives the latency; the same and a 4 MiB one,
each issued after a 512 x 1024 x 1024 GEMM on every rank as a step's all-reduce follows its
backward pass, give the wake-up each all-reduce pays once and the bandwidth; the process CPU
time of each (gloo's threads included) gives ``cpu_per_message`` and ``cpu_per_byte``.

The parts take turns every round (:func:`interleaved_rounds`), a barrier starting each on every
rank together, so a change of the machine's load hits all of them alike; rank 0's medians are
kept. torch is imported in the ranks only.

    >>> cores_got({"compute_s": 0.2, "compute_cpu_s": 0.05}, 4, 2)
    1.0
    >>> 0 < free_port() < 65536
    True
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
import time
from typing import Any, Callable

from asyncnet.simulate.model import Network, Workload

__all__ = ["BLAS_ENV", "DIMS", "PROBE_BYTES", "free_port", "spawn_ranks", "interleaved_rounds", "interleaved_medians",
           "run_ranks", "profile_compute", "measure_network", "cores_got", "workload_from", "network_from"]

BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
DIMS = (64, 1024, 1024, 10)
PROBE_BYTES = 4 * 2**20


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_ranks(rank_fn: Callable[..., None], world: int, *args: Any,
                prefix: str = "asyncnet-ranks-") -> dict[str, Any]:
    """Run ``rank_fn(rank, world, port, out_dir, *args)`` in ``world`` processes with one BLAS
    thread each (torch.multiprocessing.spawn, joined) and return the JSON rank 0 wrote to
    ``out_dir/rank0.json``; this process's BLAS variables are restored afterwards."""
    import torch.multiprocessing as tmp

    saved = {k: os.environ.get(k) for k in BLAS_ENV}
    os.environ.update({k: "1" for k in BLAS_ENV})  # the children read them when BLAS loads
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as out:
            tmp.spawn(rank_fn, args=(world, free_port(), out, *args), nprocs=world, join=True)
            with open(os.path.join(out, "rank0.json")) as f:
                return json.load(f)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def interleaved_rounds(parts: dict[str, Any], steps: int, warmup: int, barrier: Any,
                       before: dict[str, Any] | None = None) -> dict[str, list[float]]:
    """Seconds of each part per round (wall ``<part>`` and process CPU ``<part>_cpu``), the parts
    taking turns every round (so a change of the machine's load hits all of them alike); a
    barrier starts each part on every rank together, then ``before[part]`` (untimed), if given."""
    rounds: dict[str, list[float]] = {}
    for i in range(warmup + steps):
        for name, fn in parts.items():
            barrier()
            if before and name in before:
                before[name]()
            c, t = time.process_time(), time.perf_counter()
            fn()
            if i >= warmup:
                rounds.setdefault(name, []).append(time.perf_counter() - t)
                rounds.setdefault(f"{name}_cpu", []).append(time.process_time() - c)  # gloo's threads too
    return rounds


def interleaved_medians(parts: dict[str, Any], steps: int, warmup: int, barrier: Any,
                        before: dict[str, Any] | None = None) -> dict[str, float]:
    """This rank's median seconds of each part (``<part>_s``, ``<part>_cpu_s``) over
    :func:`interleaved_rounds`.

    >>> sorted(interleaved_medians({"a": lambda: None}, steps=3, warmup=1, barrier=lambda: None))
    ['a_cpu_s', 'a_s']
    """
    rounds = interleaved_rounds(parts, steps, warmup, barrier, before)
    return {f"{k}_s": statistics.median(v) for k, v in rounds.items()}


def _network_parts(after_compute: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The network probes (4 bytes warm and after compute, 4 MiB after compute) and their untimed GEMMs."""
    import numpy as np
    import torch
    import torch.distributed as dist

    small, big = torch.ones(1), torch.ones(PROBE_BYTES // 4)
    parts = {"small": lambda: dist.all_reduce(small),  # warm: right after the barrier
             "small_cold": lambda: dist.all_reduce(small), "big": lambda: dist.all_reduce(big)}
    if not after_compute:
        return parts, {}
    a, b = np.ones((512, 1024), np.float32), np.ones((1024, 1024), np.float32)
    return parts, {"small_cold": lambda: a @ b, "big": lambda: a @ b}


def _step_parts(ws: Any, rank: int, batch: int, bucket_mb: float) -> tuple[dict[str, Any], int]:
    """The wide MLP's nets in ``ws`` (forward, gradient, compute, no_overlap, overlap) and its gradient bytes."""
    import numpy as np

    from asyncnet.sync import TorchDistributedGradientSync
    from asyncnet.train import MLP

    model = MLP(DIMS[0], hidden=DIMS[1:-1], num_classes=DIMS[-1], lr=0.01, seed=0,
                net_type="async_scheduling", num_workers=1)
    ws.run_net_once(model.init_net)
    ws.feed("sync", TorchDistributedGradientSync(check="first"))
    rng = np.random.default_rng(rank)
    ws.feed("data", rng.standard_normal((batch, DIMS[0])).astype(np.float32))
    ws.feed("label", rng.integers(0, DIMS[-1], batch).astype(np.int32))
    nets = {"forward": model.forward_net("forward"), "gradient": model.gradient_net("gradient"),
            "compute": model.train_net("compute"),
            "no_overlap": model.train_net("no_overlap", sync_blob="sync", bucket_mb=None),
            "overlap": model.train_net("overlap", sync_blob="sync", bucket_mb=bucket_mb)}
    for net in nets.values():
        net_def = net.to_def()
        net_def.own_pool = True
        ws.create_net(net_def)
    ws.run_net("compute")
    grad_bytes = int(sum(ws.fetch(model.grads[p]).nbytes for p in model.params))
    return {name: (lambda n=name: ws.run_net(n)) for name in nets}, grad_bytes


def _rank(rank: int, world: int, port: int, out: str, batch: int, bucket_mb: float, steps: int, what: str,
          after_compute: bool = True) -> None:
    """One gloo rank: measure ``what`` ("network", "steps" or "all"); rank 0's medians go to ``out/rank<r>.json``."""
    import torch
    import torch.distributed as dist

    import asyncnet as an

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    ws = an.Workspace()
    try:
        res: dict[str, Any] = {"ranks": world}
        parts: dict[str, Any] = {}
        before: dict[str, Any] = {}
        if what in ("network", "all"):
            parts, before = _network_parts(after_compute)
        if what in ("steps", "all"):
            steps_parts, res["grad_bytes"] = _step_parts(ws, rank, batch, bucket_mb)
            parts.update(steps_parts)
        res.update(interleaved_medians(parts, steps, 2, dist.barrier, before))
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(res, f)
    finally:
        ws.close()
        dist.destroy_process_group()


def run_ranks(world: int, what: str = "all", batch: int = 512, bucket_mb: float = 1.0, steps: int = 15,
              after_compute: bool = True) -> dict[str, Any]:
    """Spawn ``world`` gloo ranks on 127.0.0.1 (one BLAS thread each); rank 0's medians.
    ``after_compute``: each network probe follows a 512 x 1024 x 1024 GEMM on every rank
    (untimed), as a step's all-reduce follows its backward pass; False: right after a barrier."""
    return spawn_ranks(_rank, world, batch, bucket_mb, steps, what, after_compute, prefix="asyncnet-scaling-")


def profile_compute(batch: int = 512, bucket_mb: float = 1.0, steps: int = 15) -> Workload:
    """The :class:`~asyncnet.simulate.model.Workload` of the wide MLP measured on one rank."""
    return workload_from(run_ranks(1, "steps", batch, bucket_mb, steps), batch, bucket_mb)


def workload_from(r: dict[str, Any], batch: int, bucket_mb: float, clock: str = "") -> Workload:
    """The step's parts from wall medians (``clock=""``) or process CPU medians (``"_cpu"``).

    >>> r = {"forward_s": 1.0, "gradient_s": 3.0, "compute_s": 3.5, "grad_bytes": 8}
    >>> w = workload_from(r, 4, 1.0); (w.forward, w.backward, w.update)
    (1.0, 2.0, 0.5)
    """
    fwd = r[f"forward{clock}_s"]
    bwd = max(0.0, r[f"gradient{clock}_s"] - fwd)
    upd = max(0.0, r[f"compute{clock}_s"] - r[f"gradient{clock}_s"])
    return Workload(fwd, bwd, upd, r["grad_bytes"], int(bucket_mb * 2**20), batch)


def cores_got(r: dict[str, Any], ranks: int, cores: int) -> float:
    """Cores the ``ranks`` ranks had while computing: their CPU seconds per wall second.

    >>> cores_got({"compute_s": 0.2, "compute_cpu_s": 0.05}, 4, 2)
    1.0
    """
    return min(float(cores), ranks * r["compute_cpu_s"] / r["compute_s"])


def measure_network(steps: int = 15, after_compute: bool = True) -> Network:
    """The :class:`~asyncnet.simulate.model.Network` of 2 gloo ranks on 127.0.0.1 (ring, p = 2:
    a tiny all-reduce takes 2 alpha, one of n bytes 2 alpha + n beta), each all-reduce issued
    after compute as in a step (``after_compute``, see :func:`run_ranks`)."""
    return network_from(run_ranks(2, "network", steps=steps, after_compute=after_compute))


def network_from(r: dict[str, Any]) -> Network:
    """Ring with p = 2 from the probes' medians: a warm 4-byte all-reduce is 2 alpha; the same
    after compute adds the wake-up; a 4 MiB one after compute adds n beta to both."""
    alpha, cpu_msg = r["small_s"] / 2, r["small_cpu_s"] / 2
    wakeup = max(r.get("small_cold_s", r["small_s"]) - r["small_s"], 0.0)
    return Network(bandwidth=PROBE_BYTES / max(r["big_s"] - 2 * alpha - wakeup, 1e-9), latency=alpha,
                   cpu_per_byte=max(r["big_cpu_s"] - 2 * cpu_msg, 0.0) / PROBE_BYTES, cpu_per_message=cpu_msg,
                   wakeup=wakeup)
