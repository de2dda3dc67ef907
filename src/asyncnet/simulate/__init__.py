"""The cost model of data-parallel training (:mod:`asyncnet.simulate.model`) and what it measures
on this machine (:mod:`asyncnet.simulate.measure`: one rank's compute, gloo's latency and bandwidth).

    >>> from asyncnet.simulate import Network, step_seconds
    >>> Network(bandwidth=12.5e9, latency=5e-6).latency
    5e-06
"""

from asyncnet.simulate.model import (
    ALGORITHMS,
    HybridWorkload,
    Network,
    Workload,
    allreduce_cpu_seconds,
    allreduce_seconds,
    alltoall_cpu_seconds,
    alltoall_seconds,
    hybrid_step_seconds,
    parse_bandwidth,
    scaling_curve,
    step_seconds,
)

__all__ = [
    "Network",
    "Workload",
    "HybridWorkload",
    "alltoall_seconds",
    "alltoall_cpu_seconds",
    "hybrid_step_seconds",
    "allreduce_seconds",
    "allreduce_cpu_seconds",
    "step_seconds",
    "scaling_curve",
    "parse_bandwidth",
    "ALGORITHMS",
]
