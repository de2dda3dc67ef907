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
from collections.abc import Callable
from typing import Any

from asyncnet.simulate.model import HybridWorkload, Network, Workload, hybrid_step_seconds

__all__ = [
    "BLAS_ENV",
    "DIMS",
    "PROBE_BYTES",
    "free_port",
    "spawn_ranks",
    "interleaved_rounds",
    "interleaved_medians",
    "run_ranks",
    "profile_compute",
    "measure_network",
    "cores_got",
    "workload_from",
    "network_from",
    "HYBRID_PHASES",
    "run_hybrid",
    "hybrid_workload_from",
    "validate_hybrid",
]

BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
DIMS = (64, 1024, 1024, 10)
PROBE_BYTES = 4 * 2**20


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_ranks(
    rank_fn: Callable[..., None], world: int, *args: Any, prefix: str = "asyncnet-ranks-"
) -> dict[str, Any]:
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


def interleaved_rounds(
    parts: dict[str, Any], steps: int, warmup: int, barrier: Any, before: dict[str, Any] | None = None
) -> dict[str, list[float]]:
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


def interleaved_medians(
    parts: dict[str, Any], steps: int, warmup: int, barrier: Any, before: dict[str, Any] | None = None
) -> dict[str, float]:
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
    parts = {
        "small": lambda: dist.all_reduce(small),  # warm: right after the barrier
        "small_cold": lambda: dist.all_reduce(small),
        "big": lambda: dist.all_reduce(big),
    }
    if not after_compute:
        return parts, {}
    a, b = np.ones((512, 1024), np.float32), np.ones((1024, 1024), np.float32)
    return parts, {"small_cold": lambda: a @ b, "big": lambda: a @ b}


def _step_parts(ws: Any, rank: int, batch: int, bucket_mb: float) -> tuple[dict[str, Any], int]:
    """The wide MLP's nets in ``ws`` (forward, gradient, compute, no_overlap, overlap) and its gradient bytes."""
    import numpy as np

    from asyncnet.model.zoo import mlp
    from asyncnet.sync import TorchDistributedGradientSync
    from asyncnet.train import Program

    model = Program(
        mlp(DIMS[0], tuple(DIMS[1:-1]), DIMS[-1], seed=0, net_type="async_scheduling", num_workers=1), lr=0.01
    )
    ws.run_net_once(model.init_net)
    ws.feed("sync", TorchDistributedGradientSync(check="first"))
    rng = np.random.default_rng(rank)
    ws.feed("data", rng.standard_normal((batch, DIMS[0])).astype(np.float32))
    ws.feed("label", rng.integers(0, DIMS[-1], batch).astype(np.int32))
    nets = {
        "forward": model.forward_net("forward"),
        "gradient": model.gradient_net("gradient"),
        "compute": model.train_net("compute"),
        "no_overlap": model.train_net("no_overlap", sync_blob="sync", bucket_mb=None),
        "overlap": model.train_net("overlap", sync_blob="sync", bucket_mb=bucket_mb),
    }
    for net in nets.values():
        net_def = net.to_def()
        net_def.own_pool = True
        ws.create_net(net_def)
    ws.run_net("compute")
    grad_bytes = int(sum(ws.fetch(model.grads[p]).nbytes for p in model.params))
    return {name: (lambda n=name: ws.run_net(n)) for name in nets}, grad_bytes


def _rank(
    rank: int,
    world: int,
    port: int,
    out: str,
    batch: int,
    bucket_mb: float,
    steps: int,
    what: str,
    after_compute: bool = True,
) -> None:
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


def run_ranks(
    world: int, what: str = "all", batch: int = 512, bucket_mb: float = 1.0, steps: int = 15, after_compute: bool = True
) -> dict[str, Any]:
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
    return Network(
        bandwidth=PROBE_BYTES / max(r["big_s"] - 2 * alpha - wakeup, 1e-9),
        latency=alpha,
        cpu_per_byte=max(r["big_cpu_s"] - 2 * cpu_msg, 0.0) / PROBE_BYTES,
        cpu_per_message=cpu_msg,
        wakeup=wakeup,
    )


HYBRID_PHASES = ("lookup", "alltoall", "dense", "allreduce", "update")


def _hybrid_rank(
    rank: int,
    world: int,
    port: int,
    out: str,
    spec: str,
    batch: int,
    steps: int,
    dims: dict[str, Any],
    network: bool,
    after_compute: bool = True,
    solo: bool = False,
) -> None:
    """One gloo rank of the hybrid dlrm: median step and phase seconds (and the network probes;
    with ``solo``, one process's step on rank 0 alone, the others waiting, in the same rounds)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from asyncnet.train.criteo import load_click_data
    from asyncnet.train.dlrm_hybrid import HybridDLRM, TorchComm

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    models: list[Any] = []
    try:
        log = load_click_data(spec)
        feeds = [log.batch(np.arange(i * batch, (i + 1) * batch) % len(log)) for i in range(4)]
        model = HybridDLRM(TorchComm(), lr=0.01, **dims, **log.model_args)
        models.append(model)
        model.step(feeds[0])  # creates its nets; the probes below may run them
        parts, before = _network_parts(False) if network and world > 1 else ({}, {})
        if parts and after_compute:
            compute = _local_compute(model)
            before = {"small_cold": compute, "big": compute}
        phases: dict[str, dict[str, list[float]]] = {"": {}, "solo": {}}
        parts["step"] = _timed_steps(model, feeds, phases[""])
        if solo and world > 1:
            group = dist.new_group([0])  # rank 0 alone: its collectives of one rank cost what one process's do
            alone = HybridDLRM(TorchComm(group), lr=0.01, **dims, **log.model_args) if rank == 0 else None
            models.append(alone)
            parts["solo"] = _timed_steps(alone, feeds, phases["solo"]) if alone is not None else (lambda: None)
        res = _hybrid_record(model, world, batch)
        res.update(interleaved_medians(parts, steps, 2, dist.barrier, before))
        res.update({f"{k}_s": statistics.median(v[-steps:]) for k, v in phases[""].items()})
        if phases["solo"]:
            res["solo"] = {
                **_hybrid_record(models[1], 1, batch),
                "step_s": res["solo_s"],
                "step_cpu_s": res["solo_cpu_s"],
                **{f"{k}_s": statistics.median(v[-steps:]) for k, v in phases["solo"].items()},
            }
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(res, f)
    finally:
        for m in models:
            if m is not None:
                m.ws.close()
        dist.destroy_process_group()


def _local_compute(model: Any) -> Callable[[], None]:
    """The step's compute between its collectives (the dense part's gradients on the pooled rows
    of the last step, the lookup), with no communication: what the network probes follow when
    they are taken after compute."""
    import numpy as np

    pooled = {f"emb{k}": np.array(model.ws.fetch(f"emb{k}")) for k in range(model.num_tables)}

    def compute() -> None:
        for name, value in pooled.items():
            model.ws.feed(name, value)
        model.ws.run_net("dense_grad")
        model.ws.run_net("emb")

    return compute


def _timed_steps(model: Any, feeds: list[Any], phases: dict[str, list[float]]) -> Callable[[], None]:
    """A step of ``model`` on the next of ``feeds``, its phase seconds appended to ``phases``."""
    count = [0]

    def step() -> None:
        model.step(feeds[count[0] % len(feeds)])
        count[0] += 1
        for k, v in model.times.items():
            phases.setdefault(k, []).append(v)

    return step


def _hybrid_record(model: Any, world: int, batch: int) -> dict[str, Any]:
    """What :func:`hybrid_workload_from` needs besides the times: the ranks, tables, width, batch, bytes."""
    import numpy as np

    return {
        "ranks": world,
        "tables": model.num_tables,
        "dim": model.dim,
        "batch": batch,
        "owned": len(model.local),
        "grad_bytes": 4 * (1 + sum(int(np.asarray(model.ws.fetch(p)).size) for p in model.dense_params)),
    }


def run_hybrid(
    world: int,
    spec: str,
    batch: int,
    steps: int = 10,
    dims: dict[str, Any] | None = None,
    network: bool = True,
    after_compute: bool = True,
    solo: bool = False,
) -> dict[str, Any]:
    """Spawn ``world`` gloo ranks training the hybrid dlrm on ``spec`` (``random:...``) with a
    global batch of ``batch``; rank 0's medians of the step, of its phases (``lookup_s``,
    ``alltoall_s``, ``dense_s``, ``allreduce_s``, ``update_s`` and their ``_cpu_s``) and, with
    ``network`` and 2 ranks or more, the network probes of :func:`measure_network`, each after
    the step's own compute between collectives (``after_compute``: its lookup and dense
    gradients, no communication) or warm, right after a barrier; with ``solo``, ``"solo"`` holds one process's step measured
    in the same rounds (rank 0 alone, the others waiting at the barrier)."""
    return spawn_ranks(
        _hybrid_rank,
        world,
        spec,
        batch,
        steps,
        dict(dims or {}),
        network,
        after_compute,
        solo,
        prefix="asyncnet-hybrid-",
    )


def hybrid_workload_from(r: dict[str, Any], clock: str = "", call: float | None = None) -> HybridWorkload:
    """The one-process :class:`~asyncnet.simulate.model.HybridWorkload` from a run's phase medians
    (``clock=""`` wall, ``"_cpu"`` process CPU), scaled back from that run's share of the work;
    the seconds per collective ``call`` from a one-rank run's collectives unless given.

    >>> r = {"ranks": 2, "tables": 4, "owned": 2, "dim": 8, "batch": 64, "grad_bytes": 40,
    ...      "lookup_s": 1.0, "dense_s": 2.0, "update_s": 3.0, "alltoall_s": 0.2, "allreduce_s": 0.1}
    >>> w = hybrid_workload_from(r); (w.lookup, w.dense, w.update, w.grad_bytes, round(w.call, 3))
    (2.0, 4.0, 6.0, 40, 0.1)
    """
    tables, owned, ranks = r["tables"], max(r["owned"], 1), r["ranks"]
    if call is None:
        call = (r.get(f"alltoall{clock}_s", 0.0) + r.get(f"allreduce{clock}_s", 0.0)) / 3
    return HybridWorkload(
        call=call,
        lookup=r[f"lookup{clock}_s"] * tables / owned,
        dense=r[f"dense{clock}_s"] * ranks,
        update=r[f"update{clock}_s"] * tables / owned,
        tables=tables,
        dim=r["dim"],
        batch=r["batch"],
        grad_bytes=int(r["grad_bytes"]),
    )


def validate_hybrid(
    spec: str, batch: int, steps: int = 10, dims: dict[str, Any] | None = None, after_compute: bool = True
) -> dict[str, Any]:
    """Measured step seconds of the hybrid dlrm on 1 process and 2 gloo ranks against
    :func:`~asyncnet.simulate.model.hybrid_step_seconds`, predicted from the 1-process step's
    phases and the 2 ranks' network probes (*predicted*), and from each run's own compute CPU on
    the cores it got (*cores got*, as :func:`cores_got`). One job of 2 ranks measures all of it,
    the parts taking turns each round (the 1-process step on rank 0 while rank 1 waits), so a
    change of the machine's load hits them alike. ``after_compute``: the network probed after the
    step's own compute (what a collective of the step follows; on a loaded machine a rank that
    waits loses its core and pays for getting it back) or warm, right after a barrier."""
    two = run_hybrid(2, spec, batch, steps, dims, after_compute=after_compute, solo=True)
    one = two["solo"]
    runs = {1: one, 2: two}
    work, net = hybrid_workload_from(one), network_from(two)
    cores = os.cpu_count() or 1
    rows = []
    for p, m in runs.items():
        compute = sum(m[f"{k}_s"] for k in ("lookup", "dense", "update"))
        compute_cpu = sum(m[f"{k}_cpu_s"] for k in ("lookup", "dense", "update"))
        got = cores_got({"compute_s": compute, "compute_cpu_s": compute_cpu}, p, cores)
        pred = hybrid_step_seconds(work, p, net, cores_per_host=cores, ranks_per_host=p)
        here = hybrid_step_seconds(
            hybrid_workload_from(m, "_cpu", work.call), p, net, cores_per_host=got, ranks_per_host=p
        )
        rows.append(
            {
                "ranks": p,
                "measured_s": m["step_s"],
                "predicted_s": pred,
                "error": pred / m["step_s"] - 1,
                "predicted_here_s": here,
                "error_here": here / m["step_s"] - 1,
                "cores_got": got,
                "phases_s": {k: m[f"{k}_s"] for k in HYBRID_PHASES},
            }
        )
    return {
        "workload": work.__dict__,
        "network": net.__dict__,
        "network_after_compute": after_compute,
        "cores": cores,
        "rows": rows,
        "load_average": os.getloadavg(),
    }
