"""Single-threaded BLAS for a benchmark: BLAS reads its thread count when it loads, so a
benchmark that needs one thread per kernel starts itself over with the variables set.

    >>> BLAS_ENV
    ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from asyncnet.simulate.measure import BLAS_ENV
from benchmarks import child_env

__all__ = ["BLAS_ENV", "single_threaded", "rerun_single_threaded", "single_threaded_main"]


def single_threaded() -> bool:
    """True when every BLAS thread variable of this process is 1."""
    return all(os.environ.get(k) == "1" for k in BLAS_ENV)


def rerun_single_threaded(module: str, argv: list[str]) -> int | None:
    """Run ``python -m module argv`` with one BLAS thread and return its exit status, or None
    when this process already is single-threaded (then the caller measures itself)."""
    if single_threaded():
        return None
    env = child_env(**{k: "1" for k in BLAS_ENV})
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


def single_threaded_main(
    module: str,
    argv: list[str] | None,
    parse: Callable[[list[str]], Any],
    run: Callable[[Any], dict[str, Any]],
    table: Callable[[dict[str, Any]], str],
) -> int:
    """A benchmark's ``main``: parse ``argv`` (errors before any restart), run in a single-threaded
    BLAS process, print the table or, with ``--json``, the result."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    status = rerun_single_threaded(module, argv)
    if status is not None:
        return status
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0
