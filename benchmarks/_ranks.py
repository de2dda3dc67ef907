"""Gloo ranks on 127.0.0.1 for the benchmarks: a free port, and a spawn that collects rank 0's
figures (:mod:`asyncnet.simulate.measure`'s, which measures the simulator's inputs the same way).

    >>> 0 < free_port() < 65536
    True
"""

from __future__ import annotations

from asyncnet.simulate.measure import free_port, spawn_ranks

__all__ = ["free_port", "spawn_ranks"]
