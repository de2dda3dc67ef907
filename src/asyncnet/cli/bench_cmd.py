"""``asyncnet bench NAME [ARGS...]``: run a benchmark from :mod:`asyncnet.bench`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import asyncnet.bench
from asyncnet.cli.common import CLIError


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(asyncnet.bench.__path__) if not m.name.startswith("_"))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark (executor, atomics, allreduce, train, models, ...)",
                       description="Run a benchmark; arguments after NAME go to it (try NAME --help).")
    p.add_argument("name", help=f"one of: {', '.join(available())}")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for the benchmark, e.g. --json --quick")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.name not in available():
        raise CLIError(f"unknown benchmark {args.name!r}; available: {', '.join(available())}")
    module = importlib.import_module(f"asyncnet.bench.{args.name}")
    return int(module.main(args.bench_args) or 0)
