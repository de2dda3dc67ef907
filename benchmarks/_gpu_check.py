"""The Python half of ``benchmarks/gpu_check.sh``: CUDA tests, and every zoo model trained on
CUDA against the same run on the CPU.

    python -m benchmarks _gpu_check probe            # exit 77 with one line when there is no CUDA device
    python -m benchmarks _gpu_check tests             # every test file that mentions CUDA; fails on a CUDA skip
    python -m benchmarks _gpu_check compare [--json]  # each zoo model x (local, sync 2 threads, async 2 streams)

``compare`` trains each model for one epoch with ``tensor="torch"`` on ``cuda`` and on ``cpu``
(same seed, same batches, TF32 off so cuDNN and cuBLAS compute in float32) and compares the
final parameters: the largest absolute difference over the largest absolute value of each
parameter must stay within :data:`TOLERANCE`; the test accuracy (or AUC) is printed beside it.
The modes: local on the straight executor, sync with 2 worker threads, and local on
async_scheduling with 2 executor threads, i.e. two CUDA streams with events between them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("mlp", "cnn", "lstm", "dlrm")
#: (label, TrainConfig overrides)
MODES = (
    ("local", dict(mode="local", workers=1)),
    ("sync 2 threads", dict(mode="sync", workers=2, backend="threads")),
    ("async 2 streams", dict(mode="local", workers=1, net_type="async_scheduling", net_threads=2)),
)
TOLERANCE = 2e-3  # max |cuda - cpu| / max |cpu| per parameter after one epoch in float32
NO_CUDA = 77  # the exit status of "not run here" (automake's SKIP)
#: skip reasons that are fine on a CUDA machine (anything else mentioning CUDA or a GPU fails the check)
EXPECTED_SKIPS = (r"tensorflow", r"more than one CUDA device", r"2 CUDA devices", r"torchrun", r"nccl")


def probe() -> int:
    """0 when torch sees a CUDA device; else one line and :data:`NO_CUDA`."""
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed; nothing to check (install the CUDA build of torch)")
        return NO_CUDA
    if not torch.cuda.is_available():
        build = torch.version.cuda or "a CPU-only build"
        print(f"gpu_check: no CUDA device (torch {torch.__version__}, {build}); nothing to check here")
        return NO_CUDA
    print(
        f"gpu_check: torch {torch.__version__} CUDA {torch.version.cuda}, "
        f"{torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)}"
    )
    return 0


def cuda_test_files() -> list[str]:
    """Every test module that mentions cuda (device strings, streams, Copy ops)."""
    out = []
    for p in sorted((ROOT / "tests").rglob("test_*.py")):
        if re.search(r"cuda", p.read_text(errors="replace"), re.IGNORECASE):
            out.append(str(p.relative_to(ROOT)))
    return out


def tests() -> int:
    """Run the CUDA test files; fail on a failure or on a skip that names CUDA or a GPU unexpectedly."""
    files = cuda_test_files()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        serial = ["-n", "0"] if importlib.util.find_spec("xdist") is not None else []  # one process: GPU memory
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *serial, f"--junitxml={report}", *files]
        status = subprocess.run(cmd, cwd=ROOT).returncode
        bad = unexpected_skips(report) if report.exists() else ["no junit report written"]
    for line in bad:
        print(f"gpu_check: UNEXPECTED SKIP {line}")
    if status != 0 or bad:
        print(f"gpu_check: CUDA tests FAILED (pytest status {status}, {len(bad)} unexpected skip(s))")
        return 1
    print(f"gpu_check: CUDA tests passed ({len(files)} files)")
    return 0


def unexpected_skips(report: Path) -> list[str]:
    """``test id: reason`` of every skipped test whose reason mentions CUDA/GPU and is not expected."""
    bad = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for skip in case.findall("skipped"):
            reason = f"{skip.get('message', '')} {skip.text or ''}"
            if re.search(r"cuda|gpu|device", reason, re.IGNORECASE) and not any(
                re.search(e, reason, re.IGNORECASE) for e in EXPECTED_SKIPS
            ):
                bad.append(f"{case.get('classname')}::{case.get('name')}: {reason.strip()[:200]}")
    return bad


def _train(model: str, overrides: dict[str, Any], device: str) -> tuple[dict[str, Any], float, float]:
    from asyncnet.train.trainers import TrainConfig, train

    cfg = TrainConfig(model=model, epochs=1, seed=0, tensor="torch", device=device, trace=False, **overrides)
    start = time.perf_counter()
    res = train(cfg)
    seconds = time.perf_counter() - start
    last = res.history.epochs[-1]
    score = last.test_auc if getattr(last, "test_auc", None) is not None else last.test_accuracy
    return {k: _host(v) for k, v in res.params.items()}, float(score), seconds


def _host(v: Any) -> Any:
    import numpy as np

    if hasattr(v, "detach"):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def max_relative_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, str]:
    """The worst parameter's max |a - b| / max |b| (and its name); names must match."""
    import numpy as np

    if set(a) != set(b):
        raise ValueError(f"parameter names differ: {sorted(set(a) ^ set(b))}")
    worst, name = 0.0, ""
    for k in sorted(b):
        scale = float(np.max(np.abs(b[k]))) if b[k].size else 0.0
        diff = float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) if b[k].size else 0.0
        rel = diff / scale if scale > 0 else diff
        if rel > worst:
            worst, name = rel, k
    return worst, name


def compare(as_json: bool) -> int:
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for model in MODELS:
        for label, overrides in MODES:
            row: dict[str, Any] = {"model": model, "mode": label}
            try:
                gpu, gpu_score, gpu_s = _train(model, overrides, "cuda")
                cpu, cpu_score, cpu_s = _train(model, overrides, "cpu")
                rel, worst = max_relative_difference(gpu, cpu)
                row.update(
                    cuda_score=gpu_score,
                    cpu_score=cpu_score,
                    cuda_s=gpu_s,
                    cpu_s=cpu_s,
                    max_rel_diff=rel,
                    worst_param=worst,
                    ok=rel <= TOLERANCE,
                )
            except Exception as exc:  # noqa: BLE001 - reported in the table, fails the check
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print(
            f"{'model':<6}{'mode':<17}{'cuda score':>11}{'cpu score':>10}{'max rel diff':>13}{'cuda s':>8}{'cpu s':>7}  result"
        )
        for r in rows:
            if "error" in r:
                print(f"{r['model']:<6}{r['mode']:<17}{'':>49}  FAILED {r['error']}")
                continue
            print(
                f"{r['model']:<6}{r['mode']:<17}{r['cuda_score']:>11.4f}{r['cpu_score']:>10.4f}{r['max_rel_diff']:>13.2e}"
                f"{r['cuda_s']:>8.1f}{r['cpu_s']:>7.1f}  {'ok' if r['ok'] else 'FAILED (' + r['worst_param'] + ')'}"
            )
    failed = [r for r in rows if not r["ok"]]
    print(
        f"gpu_check: {len(rows) - len(failed)}/{len(rows)} CUDA training runs match the CPU within {TOLERANCE:g}"
        + ("" if not failed else " -- FAILED")
    )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("probe", "tests", "compare"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    if args.step == "probe":
        return probe()
    if args.step == "tests":
        return tests()
    return compare(args.json)


if __name__ == "__main__":
    sys.exit(main())
