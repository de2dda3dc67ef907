"""A cost model of data-parallel training: step time for R ranks x W threads, to 1,000 ranks.

Alpha-beta all-reduce of ``n`` bytes over ``p`` ranks on links of ``latency`` alpha seconds and
``bandwidth`` bytes/s (beta = 1 / bandwidth):

- ring: ``2 (p-1)`` steps of ``n / p`` bytes: ``2 (p-1) alpha + 2 (p-1)/p n beta``;
- tree: ``ceil(log2 p)`` steps of the whole buffer (recursive doubling):
  ``ceil(log2 p) (alpha + n beta)``;
- plus ``Network.wakeup`` once per all-reduce: what its first message costs when the ranks'
  communication threads slept through the compute (0 unless measured or given).

A step of one rank is forward, backward, update (measured on one worker, see
:func:`asyncnet.simulate.measure.profile_compute`). W threads of a rank first reduce in shared
memory (``(W-1) n / local_bandwidth``) before the rank's one all-reduce. Without overlap the
all-reduce of all the gradients follows the backward pass. With overlap the gradients form
buckets (DDP's 25 MiB by default) produced at an even byte rate during the backward pass;
bucket k starts when it is ready and the previous one is done, and the update waits for the
last one. When the ranks x threads of one host outnumber its cores, compute slows in
proportion (``cores_per_host``; None means enough cores).

Communication is not free CPU time on a TCP network: gloo's threads copy, sum and push every
byte through the kernel. ``Network.cpu_per_byte`` and ``cpu_per_message`` give that cost (CPU
seconds per byte and per message, in the alpha-beta form: ring ``2 (p-1)`` messages and
``2 (p-1)/p n`` bytes per rank; measured with gloo by ``asyncnet simulate --measure-network``;
0 for an RDMA network, where the NIC moves the data). With ``cores_per_host``, a host whose
ranks x threads and their communication need more CPU than it has pays for it:

- no overlap: the all-reduce phase takes at least ``ranks_on_host x comm_cpu / cores``;
- overlap: the step takes at least ``(ranks_on_host x threads x compute + ranks_on_host x
  comm_cpu) / cores`` (every CPU second of the host, compute and communication, is spent
  somewhere in the step), e.g. ``compute + comm_cpu`` for 2 ranks on 2 cores.

When the cores are enough these floors are below the other terms and change nothing.

    >>> net = Network(bandwidth=12.5e9, latency=5e-6)          # 100 Gb/s, 5 us
    >>> w = Workload(forward=0.010, backward=0.020, update=0.002, grad_bytes=100 * 2**20)
    >>> round(allreduce_seconds(2**20, 8, net, "ring") * 1e6, 1)
    216.8
    >>> s0, s1 = step_seconds(w, 64, net), step_seconds(w, 64, net, overlap=True)
    >>> round(s0 * 1e3, 2), round(s1 * 1e3, 2)
    (49.15, 36.76)
    >>> tcp = Network(bandwidth=1e9, latency=100e-6, cpu_per_byte=0.5e-9, cpu_per_message=20e-6)
    >>> round(allreduce_cpu_seconds(2**20, 2, tcp) * 1e6, 1)            # 2 messages + 1 MiB
    564.3
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "Network",
    "Workload",
    "HybridWorkload",
    "allreduce_seconds",
    "allreduce_cpu_seconds",
    "alltoall_seconds",
    "alltoall_cpu_seconds",
    "hybrid_step_seconds",
    "step_seconds",
    "scaling_curve",
    "parse_bandwidth",
    "ALGORITHMS",
]

ALGORITHMS = ("ring", "tree")


@dataclass(frozen=True)
class Network:
    """Link ``bandwidth`` in bytes/s and per-message ``latency`` in seconds; the CPU time
    the all-reduce takes from its rank, ``cpu_per_byte`` and ``cpu_per_message`` seconds
    (0: the network moves the data without the host's CPU, as RDMA); ``wakeup``: seconds each
    all-reduce pays once, when it is issued after compute with the communication threads asleep
    (waking them, and on a VM its halted vCPUs; measured here, 0 for a given network)."""

    bandwidth: float
    latency: float
    cpu_per_byte: float = 0.0
    cpu_per_message: float = 0.0
    wakeup: float = 0.0

    def __post_init__(self) -> None:
        if not self.bandwidth > 0 or not self.latency >= 0 or not self.wakeup >= 0:
            raise ValueError(
                f"expected bandwidth > 0, latency >= 0 and wakeup >= 0, got {self.bandwidth!r} B/s, "
                f"{self.latency!r} s, {self.wakeup!r} s"
            )
        if not self.cpu_per_byte >= 0 or not self.cpu_per_message >= 0:
            raise ValueError(
                f"expected cpu_per_byte >= 0 and cpu_per_message >= 0, got {self.cpu_per_byte!r} s/B, "
                f"{self.cpu_per_message!r} s"
            )


@dataclass(frozen=True)
class Workload:
    """One worker's step: seconds of ``forward``, ``backward``, ``update``; ``grad_bytes`` to
    all-reduce; ``bucket_bytes`` per bucket when overlapped; ``batch`` examples per worker."""

    forward: float
    backward: float
    update: float
    grad_bytes: int
    bucket_bytes: int = 25 * 2**20
    batch: int = 1
    local_bandwidth: float = 5e9  # bytes/s of the threads' shared-memory reduction

    @property
    def compute(self) -> float:
        return self.forward + self.backward + self.update


def parse_bandwidth(text: str) -> float:
    """Bytes/s from ``"100Gb/s"``, ``"12.5GB/s"``, ``"800Mb/s"`` or a plain number of bytes/s.

    >>> parse_bandwidth("100Gb/s")
    12500000000.0
    """
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(([kKMGT]?)([bB])(/s|ps)?)?\s*", text)
    if not m:
        raise ValueError(f"expected a bandwidth such as '100Gb/s' or '12.5GB/s', got {text!r}")
    value = float(m.group(1))
    if m.group(2):
        value *= {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(3)]
        value /= 8 if m.group(4) == "b" else 1
    return value


def _alpha_beta(nbytes: float, ranks: int, alpha: float, beta: float, algorithm: str) -> float:
    if ranks < 1:
        raise ValueError(f"expected ranks >= 1, got {ranks}")
    if ranks == 1 or nbytes == 0:
        return 0.0
    if algorithm == "ring":
        return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes * beta
    if algorithm == "tree":
        return math.ceil(math.log2(ranks)) * (alpha + nbytes * beta)
    raise ValueError(f"expected algorithm one of {ALGORITHMS}, got {algorithm!r}")


def allreduce_seconds(nbytes: float, ranks: int, net: Network, algorithm: str = "ring") -> float:
    """Alpha-beta time of one all-reduce of ``nbytes`` over ``ranks`` ranks, plus the network's
    ``wakeup`` once (ranks > 1)."""
    t = _alpha_beta(nbytes, ranks, net.latency, 1.0 / net.bandwidth, algorithm)
    return t + net.wakeup if t > 0 else t


def allreduce_cpu_seconds(nbytes: float, ranks: int, net: Network, algorithm: str = "ring") -> float:
    """CPU seconds one rank spends in that all-reduce (same message and byte counts)."""
    return _alpha_beta(nbytes, ranks, net.cpu_per_message, net.cpu_per_byte, algorithm)


def _buckets(w: Workload) -> list[int]:
    full, rest = divmod(w.grad_bytes, w.bucket_bytes)
    return [w.bucket_bytes] * full + ([rest] if rest else [])


def step_seconds(
    w: Workload,
    ranks: int,
    net: Network,
    algorithm: str = "ring",
    overlap: bool = False,
    threads: int = 1,
    cores_per_host: float | None = None,
    ranks_per_host: int | None = None,
) -> float:
    """Predicted seconds of one data-parallel step (see the module docstring)."""
    host_ranks = min(ranks, ranks_per_host or ranks)
    on_host = host_ranks * threads
    slow = max(1.0, on_host / cores_per_host) if cores_per_host else 1.0
    fwd, bwd, upd = w.forward * slow, w.backward * slow, w.update * slow

    def sync(nbytes: float) -> float:
        local = (threads - 1) * nbytes / w.local_bandwidth if threads > 1 else 0.0
        return local + allreduce_seconds(nbytes, ranks, net, algorithm)

    def comm_cpu(sizes: list[int]) -> float:  # the host's ranks' CPU seconds of communication, per core
        if not cores_per_host:
            return 0.0
        return host_ranks * sum(allreduce_cpu_seconds(n, ranks, net, algorithm) for n in sizes) / cores_per_host

    if not overlap:
        return fwd + bwd + max(sync(w.grad_bytes), comm_cpu([w.grad_bytes])) + upd
    end, produced = 0.0, 0
    buckets = _buckets(w)
    for size in buckets:
        produced += size
        ready = fwd + bwd * produced / w.grad_bytes
        end = max(ready, end) + sync(size)
    cpu_floor = on_host * w.compute / cores_per_host + comm_cpu(buckets) if cores_per_host else 0.0
    return max(max(fwd + bwd, end) + upd, cpu_floor)


def scaling_curve(
    w: Workload,
    net: Network,
    ranks: list[int],
    algorithm: str = "ring",
    overlap: bool = False,
    threads: int = 1,
    cores_per_host: int | None = None,
    ranks_per_host: int | None = None,
) -> list[dict]:
    """Rows of ranks, step seconds, samples/s and weak-scaling efficiency (one rank's step
    time over this one's: 1.0 is perfect)."""
    base = step_seconds(w, 1, net, algorithm, overlap, threads, cores_per_host, ranks_per_host)
    rows = []
    for r in ranks:
        s = step_seconds(w, r, net, algorithm, overlap, threads, cores_per_host, ranks_per_host)
        rows.append(
            {
                "ranks": r,
                "threads": threads,
                "step_s": s,
                "samples_per_s": r * threads * w.batch / s,
                "efficiency": base / s,
            }
        )
    return rows


def alltoall_seconds(nbytes: float, ranks: int, net: Network) -> float:
    """Alpha-beta time of a pairwise all-to-all in which one rank holds ``nbytes`` and sends
    ``nbytes / p`` to each of the ``p - 1`` others: ``(p-1) alpha + (p-1)/p n beta``, plus the
    network's ``wakeup`` once (ranks > 1).

        >>> round(alltoall_seconds(2**20, 2, Network(bandwidth=1e9, latency=1e-4)) * 1e6, 1)
        624.3
    """
    if ranks < 1:
        raise ValueError(f"expected ranks >= 1, got {ranks}")
    if ranks == 1 or nbytes == 0:
        return 0.0
    return (ranks - 1) * net.latency + (ranks - 1) / ranks * nbytes / net.bandwidth + net.wakeup


def alltoall_cpu_seconds(nbytes: float, ranks: int, net: Network) -> float:
    """CPU seconds one rank spends in that all-to-all (``p - 1`` messages, ``(p-1)/p n`` bytes)."""
    if ranks <= 1 or nbytes == 0:
        return 0.0
    return (ranks - 1) * net.cpu_per_message + (ranks - 1) / ranks * nbytes * net.cpu_per_byte


@dataclass(frozen=True)
class HybridWorkload:
    """One process's step of a hybrid-parallel DLRM on the whole global batch of ``batch``
    examples: seconds to pool all ``tables`` (``lookup``), of the dense part (bottom and top
    MLPs, interaction, loss, their gradients and SGD: ``dense``) and of the tables' row update
    (``update``); ``dim`` the embeddings' width, ``itemsize`` bytes per value; ``grad_bytes``
    the bytes of the MLP gradients and the loss (one all-reduce of one buffer); ``call`` the
    seconds a rank spends issuing one collective whatever the ranks (copies in and out:
    measured at one rank)."""

    lookup: float
    dense: float
    update: float
    tables: int
    dim: int
    batch: int
    grad_bytes: int = 0
    itemsize: int = 4
    call: float = 0.0
    calls: int = 3  # collectives per step: two all-to-alls and the all-reduce

    def pooled_bytes(self, tables: int) -> int:
        """Bytes of ``tables`` tables' pooled vectors over the global batch."""
        return tables * self.batch * self.dim * self.itemsize


def hybrid_step_seconds(
    w: HybridWorkload, ranks: int, net: Network, cores_per_host: float | None = None, ranks_per_host: int | None = None
) -> float:
    """Predicted seconds of one hybrid-parallel step on ``ranks`` ranks (tables sharded, MLPs
    replicated), set by the rank owning the most tables, ``ceil(T / p)``:

    - compute: ``(lookup + update) ceil(T/p) / T + dense / p`` (its tables over the global
      batch; the dense part on its ``B / p`` examples), slowed when the host's ranks outnumber
      its cores, plus ``call`` per collective;
    - an all-to-all of its tables' pooled vectors (it keeps ``1/p``, sends the rest), one
      all-reduce of the MLP gradients and the loss, one all-to-all of the pooled gradients
      back: three phases, each issued after compute (the wake-up once each);
    - with ``cores_per_host``, the phases take at least the host's ranks' CPU seconds of
      communication over its cores.

        >>> w = HybridWorkload(lookup=0.004, dense=0.020, update=0.006, tables=8, dim=64, batch=512, grad_bytes=2**20)
        >>> net = Network(bandwidth=1e9, latency=1e-4)
        >>> round(hybrid_step_seconds(w, 1, net) * 1e3, 2), round(hybrid_step_seconds(w, 2, net) * 1e3, 2)
        (30.0, 16.97)
    """
    if ranks < 1:
        raise ValueError(f"expected ranks >= 1, got {ranks}")
    host_ranks = min(ranks, ranks_per_host or ranks)
    slow = max(1.0, host_ranks / cores_per_host) if cores_per_host else 1.0
    share = math.ceil(w.tables / ranks) / w.tables if w.tables else 0.0
    compute = ((w.lookup + w.update) * share + w.dense / ranks + w.calls * w.call) * slow
    if ranks == 1:
        return compute
    sent = w.pooled_bytes(math.ceil(w.tables / ranks))
    comm = 2 * alltoall_seconds(sent, ranks, net) + allreduce_seconds(w.grad_bytes, ranks, net)
    cpu = 2 * alltoall_cpu_seconds(sent, ranks, net) + allreduce_cpu_seconds(w.grad_bytes, ranks, net)
    floor = host_ranks * cpu / cores_per_host if cores_per_host else 0.0
    return compute + max(comm, floor)
