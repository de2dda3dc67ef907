"""``asyncnet bench NAME [ARGS...]``: run ``python -m benchmarks NAME ARGS...`` of a source checkout.

The benchmarks are not part of the installed package: they live in ``benchmarks/`` at the root
of the source repository. This command finds that checkout (the current directory or one of its
parents, else the repository an editable install points at) and runs the benchmark there in a
child process with the same Python; without a checkout it says so in one line (exit 2).

    >>> find_checkout(Path("/")) is None or find_checkout(Path("/")).is_dir()
    True
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["find_checkout", "add_parser", "run"]

EXIT_NO_CHECKOUT = 2


def _is_checkout(root: Path) -> bool:
    return (root / "benchmarks" / "__main__.py").is_file() and (root / "src" / "asyncnet").is_dir()


def find_checkout(cwd: Path | None = None) -> Path | None:
    """The root of an asyncnet source checkout: ``cwd`` or a parent of it, else the repository the
    imported package comes from (an editable install or ``PYTHONPATH=src``); None if neither is one."""
    start = (cwd or Path.cwd()).resolve()
    for root in (start, *start.parents):
        if _is_checkout(root):
            return root
    installed = Path(__file__).resolve().parents[3]  # <root>/src/asyncnet/cli/bench_cmd.py
    return installed if _is_checkout(installed) else None


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark of the source checkout (python -m benchmarks NAME)",
        description="Run a benchmark from the source repository's benchmarks/ (python -m benchmarks "
        "NAME ARGS); NAME 'all' runs every one. Arguments after NAME go to it.",
    )
    p.add_argument("name", help="a benchmark (executor, atomics, allreduce, train, models, ...) or 'all'")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for the benchmark, e.g. --json --quick")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    root = find_checkout()
    if root is None:
        print(
            "asyncnet bench: the benchmarks ship with the source repository, not the package: "
            "run it from a clone of asyncnet (python -m benchmarks NAME)",
            file=sys.stderr,
        )
        return EXIT_NO_CHECKOUT
    package_dir = str(Path(__file__).resolve().parents[2])  # the asyncnet this command runs from
    path = os.pathsep.join(p for p in (str(root), package_dir, os.environ.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "benchmarks", args.name, *args.bench_args]
    return subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=path)).returncode
