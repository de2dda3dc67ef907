"""Start-up benchmark: ``python -m benchmarks startup [--json] [--quick] [--runs N] [--breakdown]``.

The wall time of fresh interpreters (median of ``--runs`` runs, the commands taking turns each
round so a change of load hits all alike): ``import asyncnet`` and ``asyncnet train --help``
against their floors, an empty interpreter and ``import numpy`` (asyncnet's one required
library). Targets: ``import asyncnet`` <= 0.25 s and ``asyncnet train --help`` <= 0.5 s on a
quiet machine. ``--breakdown`` adds the slowest imports of ``import asyncnet`` by cumulative
time (``python -X importtime``). Measured, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def _seconds(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, *args], env=child_env(), stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def run(runs: int) -> dict[str, Any]:
    """Median seconds of each command over ``runs`` interleaved rounds, and the load before and after."""
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        for name, args in COMMANDS.items():
            times[name].append(_seconds(args))
    rows = [{"command": name, "median_s": statistics.median(ts), "min_s": min(ts), "runs": runs,
             "target_s": TARGETS.get(name)} for name, ts in times.items()]
    return {"rows": rows, "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "python": sys.version.split()[0]}


def importtime(top: int = 15) -> list[tuple[str, float, float]]:
    """The ``top`` slowest imports of ``import asyncnet``: (module, self s, cumulative s)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import asyncnet"], env=child_env(),
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            rows.append((parts[2].strip(), int(parts[0]) / 1e6, int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: -r[2])[:top]


def table(res: dict[str, Any]) -> str:
    b, a = res["load_average_before"], res["load_average_after"]
    lines = [f"start-up, median of {res['rows'][0]['runs']} runs (Python {res['python']}; load average "
             f"{b[0]:.2f} {b[1]:.2f} {b[2]:.2f} before, {a[0]:.2f} {a[1]:.2f} {a[2]:.2f} after)",
             f"{'command':24s} {'median s':>9s} {'min s':>7s} {'target s':>9s}"]
    for r in res["rows"]:
        target = f"{r['target_s']:9.2f}" if r["target_s"] else f"{'':9s}"
        lines.append(f"{r['command']:24s} {r['median_s']:9.3f} {r['min_s']:7.3f} {target}")
    if "importtime" in res:
        lines.append("slowest imports of 'import asyncnet' (python -X importtime, one run): module, self s, cumulative s")
        lines += [f"  {m:40s} {s:7.3f} {c:7.3f}" for m, s, c in res["importtime"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks startup", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quick", action="store_true", help="3 runs (a smoke run)")
    p.add_argument("--runs", type=int, default=10, help="runs of each command (the median is kept)")
    p.add_argument("--breakdown", action="store_true", help="also list the slowest imports (python -X importtime)")
    args = p.parse_args(argv)
    res = run(3 if args.quick else max(1, args.runs))
    if args.breakdown:
        res["importtime"] = importtime()
    print(json.dumps(res, indent=2) if args.json else table(res))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
