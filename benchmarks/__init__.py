"""asyncnet's benchmarks: one module per benchmark, each measuring its peers in the same run.

Every public module here has ``main(argv) -> int``; run one with ``python -m benchmarks NAME
[ARGS...]`` from the repository root (or ``asyncnet bench NAME`` from a source checkout), every
one with ``python -m benchmarks all`` (``make bench``). Peers (what a user would pick instead of
asyncnet: PyTorch eager, torch.distributed gloo, Dask, a numpy loop) sit beside them, the torch
twins of the zoo models in :mod:`benchmarks.peers.torch_twins`. Dated results are markdown files
in ``benchmarks/results/``. The package ``asyncnet`` never imports this one.

    >>> "executor" in available() and "peers" not in available()
    True
"""

from __future__ import annotations

import os
import pkgutil
from pathlib import Path

__all__ = ["ROOT", "available", "child_env"]

ROOT = Path(__file__).resolve().parent.parent


def available() -> list[str]:
    """The names of the benchmarks (the public modules of this package, the peers excluded)."""
    here = [str(Path(__file__).parent)]
    return sorted(m.name for m in pkgutil.iter_modules(here) if not m.name.startswith("_") and not m.ispkg)


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository root first on ``PYTHONPATH`` (so a child
    ``python -m benchmarks.X`` finds this package from any directory), plus ``extra``.

    >>> child_env(OMP_NUM_THREADS="1")["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    True
    """
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)
