"""``python -m benchmarks NAME [ARGS...]`` runs one benchmark; ``python -m benchmarks all [ARGS...]``
runs every one, each in its own process (the same ARGS to each, e.g. ``--quick``), prints the
load average before each, and exits 1 if any failed."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

from benchmarks import available, child_env


def _usage() -> str:
    return f"usage: python -m benchmarks NAME|all [ARGS...]; NAME one of: {', '.join(available())}"


def run_all(args: list[str]) -> int:
    """Run every benchmark with ``args`` in a child process; 1 if any failed."""
    failed = []
    for name in available():
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"== {name} {' '.join(args)} (load average {load})", flush=True)
        if subprocess.run([sys.executable, "-m", "benchmarks", name, *args], env=child_env()).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, args = argv[0], argv[1:]
    if name == "all":
        return run_all(args)
    if name not in available():
        print(f"unknown benchmark {name!r}; {_usage()}", file=sys.stderr)
        return 2
    return int(importlib.import_module(f"benchmarks.{name}").main(args) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
