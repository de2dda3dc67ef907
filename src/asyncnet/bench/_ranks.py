"""Gloo ranks on 127.0.0.1 for the benchmarks: a free port, and a spawn that collects rank 0's figures.

    >>> 0 < free_port() < 65536
    True
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from typing import Any, Callable

from asyncnet.bench._single import BLAS_ENV

__all__ = ["free_port", "spawn_ranks"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_ranks(rank_fn: Callable[..., None], world: int, *args: Any, prefix: str = "asyncnet-ranks-") -> dict[str, Any]:
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
