"""Start-up benchmark: ``python -m benchmarks startup [--json] [--quick] [--runs N] [--breakdown]``.

The wall time and CPU time of fresh interpreters (median of ``--runs`` runs after one untimed
round, the commands taking turns each round so a change of load hits all alike): ``import
asyncnet`` and ``asyncnet train --help`` against their floors, an empty interpreter and ``import
numpy`` (asyncnet's one required library). Targets: ``import asyncnet`` <= 0.25 s and ``asyncnet
train --help`` <= 0.5 s on a quiet machine. ``--breakdown`` adds the slowest imports of ``import
asyncnet`` by cumulative time (``python -X importtime``). The modules' bytecode is cached as an
installed package's is (in a temporary ``PYTHONPYCACHEPREFIX``, whatever
``PYTHONDONTWRITEBYTECODE`` says); ``--no-bytecode-cache`` compiles every module on every run
instead. Measured, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import child_env

__all__ = ["main", "COMMANDS", "importtime"]

COMMANDS = {
    "python (empty)": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "import asyncnet": ["-c", "import asyncnet"],
    "asyncnet train --help": ["-m", "asyncnet", "train", "--help"],
}
TARGETS = {"import asyncnet": 0.25, "asyncnet train --help": 0.5}


def _env(cache_dir: str | None) -> dict[str, str]:
    env = child_env()
    if cache_dir is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache_dir
    return env


def _seconds(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one ``python ARGS``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def run(runs: int, bytecode_cache: bool = True) -> dict[str, Any]:
    """Median wall and CPU seconds of each command over ``runs`` interleaved rounds (after one
    untimed round), and the load average before and after."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="asyncnet-pycache-") as cache:
        env = _env(cache if bytecode_cache else None)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
        for i in range(runs + 1):
            for name, args in COMMANDS.items():
                t = _seconds(args, env)
                if i:
                    times[name].append(t)
    rows = [
        {
            "command": name,
            "median_s": statistics.median(w for w, _ in ts),
            "min_s": min(w for w, _ in ts),
            "cpu_s": statistics.median(c for _, c in ts),
            "runs": runs,
            "target_s": TARGETS.get(name),
        }
        for name, ts in times.items()
    ]
    return {
        "rows": rows,
        "bytecode_cache": bytecode_cache,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "python": sys.version.split()[0],
    }


def importtime(top: int = 15, bytecode_cache: bool = True) -> list[tuple[str, float, float]]:
    """The ``top`` slowest imports of ``import asyncnet``: (module, self s, cumulative s)."""
    cmd = [sys.executable, "-X", "importtime", "-c", "import asyncnet"]
    with tempfile.TemporaryDirectory(prefix="asyncnet-pycache-") as cache:
        env = _env(cache if bytecode_cache else None)
        subprocess.run(cmd, env=env, capture_output=True, check=True)  # fills the cache
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            rows.append((parts[2].strip(), int(parts[0]) / 1e6, int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: -r[2])[:top]


def table(res: dict[str, Any]) -> str:
    b, a = res["load_average_before"], res["load_average_after"]
    cache = "bytecode cached" if res["bytecode_cache"] else "no bytecode cache: every module compiled"
    lines = [
        f"start-up, median of {res['rows'][0]['runs']} runs ({cache}; Python {res['python']}; load average "
        f"{b[0]:.2f} {b[1]:.2f} {b[2]:.2f} before, {a[0]:.2f} {a[1]:.2f} {a[2]:.2f} after)",
        f"{'command':24s} {'wall s':>8s} {'min s':>7s} {'CPU s':>7s} {'target s':>9s}",
    ]
    for r in res["rows"]:
        target = f"{r['target_s']:9.2f}" if r["target_s"] else f"{'':9s}"
        lines.append(f"{r['command']:24s} {r['median_s']:8.3f} {r['min_s']:7.3f} {r['cpu_s']:7.3f} {target}")
    if "importtime" in res:
        lines.append(
            "slowest imports of 'import asyncnet' (python -X importtime, one run): module, self s, cumulative s"
        )
        lines += [f"  {m:40s} {s:7.3f} {c:7.3f}" for m, s, c in res["importtime"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks startup", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quick", action="store_true", help="3 runs (a smoke run)")
    p.add_argument("--runs", type=int, default=10, help="runs of each command (the median is kept)")
    p.add_argument("--breakdown", action="store_true", help="also list the slowest imports (python -X importtime)")
    p.add_argument("--no-bytecode-cache", action="store_true", help="compile every module on every run")
    args = p.parse_args(argv)
    res = run(3 if args.quick else max(1, args.runs), bytecode_cache=not args.no_bytecode_cache)
    if args.breakdown:
        res["importtime"] = importtime(bytecode_cache=not args.no_bytecode_cache)
    print(json.dumps(res, indent=2) if args.json else table(res))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
