"""The campaign's fuzzers, run inside one child process each (``main(kind, n, seed, work)``): every
case calls ``asyncnet.cli.main.main(argv)`` in-process on generated flags, ``--data`` files,
NetDef JSON or damaged checkpoints, and appends one JSON line ``{"ok", "detail"}`` to
``<work>/<kind>.jsonl``. A case is good when the command returns an allowed status with at most one
line on stderr, no traceback and no internal error, within its time bound, and leaves no thread
running. Memory is capped (``RLIMIT_AS``) so a fuzzed shape cannot take the machine's memory.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import resource
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Valid data of a huge magnitude (finite float32 values near 1e30) makes the loss explode:
# the divergence check stops that run with exit 1, as it should, after the data check passed.
DIVERGED = "asyncnet: error: training diverged: "
CASE_BOUND = 60  # seconds per case before it counts as a hang
MEMORY_CAP = 8 << 30


class Hang(BaseException):
    """Raised by the per-case alarm (a BaseException: no handler in the CLI catches it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def call(argv: list[str]) -> tuple[Any, str, float]:
    """main(argv) in-process: (status or "hang", stderr, seconds)."""
    from asyncnet.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, CASE_BOUND)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                status = main(argv)
            except SystemExit as e:
                status = e.code
    except Hang:
        status = "hang"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return status, err.getvalue(), time.monotonic() - start


def judge(status: Any, err: str, allowed: set[int], what: str, baseline_threads: int) -> tuple[bool, str]:
    problems = []
    if status == "hang":
        problems.append("hang")
    elif status not in allowed and not (status == 1 and DIVERGED in err):
        problems.append(f"exit {status} (allowed {sorted(allowed)})")
    if "Traceback" in err or "internal error" in err:
        problems.append("traceback or internal error")
    if err.count("\n") > 1:
        problems.append(f"{err.count(chr(10))} lines on stderr")
    deadline = time.monotonic() + 5
    while threading.active_count() > baseline_threads and time.monotonic() < deadline:
        time.sleep(0.02)
    if threading.active_count() > baseline_threads:
        problems.append(f"threads left: {[t.name for t in threading.enumerate()][baseline_threads:]}")
    return not problems, ("; ".join(problems) + f" -- {what} -- stderr: {err.strip()[-300:]}") if problems else ""


# -- CLI flags ----------------------------------------------------------------------------------
JUNK = [
    "",
    "x",
    "-1",
    "0",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "9" * 30,
    "0x10",
    " 1",
    "1,",
    "é",
    "a" * 300,
    "/",
    "/dev/null",
    "/no/such/file",
    "--",
    "-",
    "None",
    "[]",
    "{}",
]
TRAIN_VALUES: dict[str, list[str]] = {
    "--model": ["mlp", "cnn", "lstm", "dlrm"],
    "--workers": ["1", "2", "3"],
    "--mode": ["local", "sync", "hogwild"],
    "--backend": ["threads", "processes", "torch"],
    "--epochs": ["1", "2"],
    "--batch-size": ["1", "7", "64", "100000"],
    "--lr": ["0", "1e-300", "0.1", "1e9"],
    "--optimizer": ["sgd", "momentum", "adam"],
    "--momentum": ["0", "0.9", "1"],
    "--weight-decay": ["0", "0.1"],
    "--lr-policy": ["fixed", "step", "exp"],
    "--lr-step": ["1", "10"],
    "--lr-gamma": ["0.5", "1"],
    "--hidden": ["8", "16,8", "1"],
    "--seed": ["0", "7"],
    "--target-accuracy": ["0.5", "1"],
    "--threads": ["1", "2"],
    "--tensor": ["numpy", "torch"],
    "--device": ["cpu", "cuda", "cuda:3"],
    "--config": ["/no/such.json"],
    "--resume": ["/no/such/run"],
    "--data": ["/no/such.npz"],
}
RUN_FLAGS = ["--feed", "--fetch", "--save", "--iters"]


def fuzz_cli(rng: random.Random, i: int, work: Path) -> tuple[list[str], set[int], str | None]:
    sub = rng.choice(["train", "train", "train", "run", "ops", "graph", "trace", "simulate", "clean", "nosuch"])
    if sub == "train":
        argv = ["train", "--quiet"]
        for flag in rng.sample(sorted(TRAIN_VALUES), rng.randint(1, 4)):
            argv += [flag, rng.choice(TRAIN_VALUES[flag] + JUNK[:8] if rng.random() < 0.4 else TRAIN_VALUES[flag])]
        if "--epochs" not in argv:
            argv += ["--epochs", "1"]
        if "--resume" not in argv and rng.random() < 0.9:
            argv += ["--out", str(work / f"c{i}")]
        if rng.random() < 0.2:
            argv.insert(rng.randrange(1, len(argv) + 1), rng.choice(JUNK))
        return argv, {0, 1, 2}, None
    if sub == "run":
        net = work / "net.json"
        net.write_text(json.dumps({"name": "n", "ops": [{"type": "Relu", "inputs": ["x"], "outputs": ["y"]}]}))
        np.save(work / "x.npy", np.arange(6.0).reshape(2, 3) - 2)
        argv = ["run", rng.choice([str(net), str(net), "/no/such.json", "/", str(work / "x.npy")])]
        for flag in rng.sample(RUN_FLAGS, rng.randint(0, 4)):
            value = {
                "--feed": rng.choice([f"x={work / 'x.npy'}", "x", "=", f"x={work}", "y=/dev/null"]),
                "--fetch": rng.choice(["y", "x", "nosuch", ""]),
                "--save": rng.choice([str(work / f"o{i}.npz"), str(work / "o.txt"), "/proc/x.npz", "a" * 300 + ".npz"]),
                "--iters": rng.choice(["0", "1", "3", "-1", "x", "1e3"]),
            }[flag]
            argv += [flag, value]
        return argv, {0, 1, 2}, None
    other = {
        "ops": ["ops"],
        "graph": ["graph", rng.choice(["/no/such.json", str(work), "/dev/null"])],
        "trace": ["trace", rng.choice(["/no/such.json", str(work)])],
        "simulate": ["simulate", rng.choice(["--help-nothing", "--workers", "x", ""])],
        "clean": ["clean", "--dry-run"],
        "nosuch": ["nosuch", rng.choice(JUNK)],
    }[sub]
    return other, {0, 1, 2}, None


# -- --data files -------------------------------------------------------------------------------
def _random_x(rng: random.Random, n: int) -> np.ndarray:
    shape = rng.choice([(n, 64), (n, 8, 8), (n, 1, 8, 8), (n, rng.randint(0, 5)), (n,), (n, 3, 0), ()])
    dtype = rng.choice(["f4", "f8", "f2", "i8", "u1", "?", "c8", "U3", "M8[s]"])
    x = np.random.default_rng(rng.randrange(2**31)).standard_normal(shape).astype("f8")
    special = rng.choice([None, None, np.nan, np.inf, 1e300, -1e39, 1e30])
    if special is not None and x.size:
        x.flat[rng.randrange(x.size)] = special
    if dtype.startswith("M"):
        return np.zeros(shape, dtype)
    with np.errstate(all="ignore"):
        return x.astype(dtype) if dtype[0] in "fcU" else np.nan_to_num(x * 10).astype(dtype)


def _random_y(rng: random.Random, n: int) -> np.ndarray:
    choice = rng.randrange(8)
    base = np.random.default_rng(rng.randrange(2**31)).integers(0, rng.choice([1, 2, 10, 300]), max(n, 0))
    if choice == 0:
        return base.astype("f8") + 0.5
    if choice == 1:
        return -base - 1
    if choice == 2:
        return base.reshape(-1, 1)
    if choice == 3:
        return np.full(max(n, 0), 2**40)
    if choice == 4:
        return base[: max(n - 1, 0)]
    return base.astype(rng.choice(["i4", "i8", "u1", "f4"]))


def fuzz_data(rng: random.Random, i: int, work: Path) -> tuple[list[str], set[int], str | None]:
    n = rng.choice([0, 1, 2, 5, 40])
    arrays: dict[str, Any] = {}
    if rng.random() < 0.4:  # a valid set with at most a small change
        gen = np.random.default_rng(rng.randrange(2**31))
        n = rng.choice([2, 5, 40])
        x = gen.standard_normal((n, 64))
        if rng.random() < 0.5:
            x.flat[rng.randrange(x.size)] = rng.choice([np.nan, np.inf, 1e300, 0, -1e6])
        with np.errstate(all="ignore"):
            arrays["x"] = x.astype(rng.choice(["f4", "f8", "i4"]) if np.isfinite(x).all() else rng.choice(["f4", "f8"]))
        arrays["y"] = gen.integers(0, rng.choice([2, 10]), n)
    else:
        if rng.random() < 0.95:
            arrays["x"] = _random_x(rng, n)
        if rng.random() < 0.95:
            arrays["y"] = _random_y(rng, n)
    if rng.random() < 0.3:
        arrays["x_test"], arrays["y_test"] = _random_x(rng, 4), _random_y(rng, 4)
    if rng.random() < 0.1:
        arrays["extra"] = np.array([None, {}], dtype=object)
    path = work / f"d{i}.npz"
    np.savez(path, **arrays)
    raw = path.read_bytes()
    damage = rng.randrange(6)
    if damage == 0:
        path.write_bytes(raw[: rng.randrange(len(raw))])
    elif damage == 1:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 5)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        path.write_bytes(bytes(b))
    model = rng.choice(["mlp", "mlp", "cnn", "lstm", "dlrm"])
    argv = ["train", "--data", str(path), "--model", model, "--epochs", "1", "--quiet", "--out", str(work / f"r{i}")]
    return argv, {0, 2}, None  # a problem in the data is found by the check: exit 2, never 1 later


# -- NetDef JSON --------------------------------------------------------------------------------
FEEDS = {
    "f": np.arange(6.0, dtype=np.float32).reshape(2, 3),
    "g": np.ones((3, 2), np.float32),
    "i": np.array([0, 1], np.int64),
    "s": np.array([2.0], np.float32),
    "e": np.zeros((0, 3), np.float32),
    "b": np.array([True, False]),
}
SKIP_MODULES = ("asyncnet.ops.collective", "asyncnet.ops.device", "asyncnet.ops.caffe2_queue")  # queues block by design


def _ops() -> list[str]:
    import asyncnet.ops  # noqa: F401
    from asyncnet.core.registry import _REGISTRY

    return sorted(
        n
        for n, s in _REGISTRY.items()
        if not s.fn.__module__.startswith(SKIP_MODULES) and s.fn.__module__.startswith("asyncnet.")
    )


def _arg_value(rng: random.Random, arg: Any) -> Any:
    pool = [0, 1, -1, 2, 3, 0.5, -0.5, 1e300, True, "x", [], [1, 2], [0], [-1, 2], None, {"a": 1}, 2**70]
    if arg is not None and arg.choices and rng.random() < 0.6:
        return rng.choice(list(arg.choices))
    if arg is not None and isinstance(arg.default, (int, float, bool, str, list)) and rng.random() < 0.4:
        return arg.default
    return rng.choice(pool)


def _random_op(rng: random.Random, ops: list[str], blobs: list[str]) -> dict[str, Any]:
    from asyncnet.core.registry import get_schema

    t = rng.choice(ops)
    s = get_schema(t)
    n_in = rng.randint(
        max(0, s.min_inputs - (rng.random() < 0.1)), min((s.max_inputs or s.min_inputs + 3), s.min_inputs + 3)
    )
    n_out = rng.randint(
        max(0, s.min_outputs - (rng.random() < 0.1)), min((s.max_outputs or s.min_outputs + 2), s.min_outputs + 2)
    )
    args = {a: _arg_value(rng, s.args[a]) for a in rng.sample(sorted(s.args), min(len(s.args), rng.randint(0, 3)))}
    if rng.random() < 0.1:
        args["nosuch_arg"] = 1
    outs = [rng.choice(blobs + [f"o{k}" for k in range(4)]) for _ in range(n_out)]
    return {"type": t, "inputs": [rng.choice(blobs) for _ in range(n_in)], "outputs": outs, "args": args}


def _corrupt_json(rng: random.Random, text: str) -> str:
    how = rng.randrange(8)
    if how == 0:
        return text[: rng.randrange(len(text) + 1)]
    if how == 1:
        return "[" * 50000 + "]" * 50000
    if how == 2:
        return text.replace('"ops"', '"opz"')
    if how == 3:
        return json.dumps({"name": ["n"], "ops": {}})
    if how == 4:
        return text.replace('"type": "', '"type": "Nope', 1)
    return text


def fuzz_netdef(rng: random.Random, i: int, work: Path) -> tuple[list[str], set[int], str | None]:
    ops = _OPS_CACHE.setdefault("ops", _ops())
    blobs = list(FEEDS) + ["y"]
    net: dict[str, Any] = {
        "name": rng.choice(["n", "n", "", "x" * 300]),
        "type": rng.choice(["simple"] * 4 + ["async_scheduling"] * 4 + ["dag", "nosuch", 3]),
        "ops": [_random_op(rng, ops, blobs) for _ in range(rng.randint(1, 4))],
    }
    if rng.random() < 0.3:
        net["num_workers"] = rng.choice([0, 1, 2, -1, 10**6, "x"])
    text = json.dumps(net)
    if rng.random() < 0.15:
        text = _corrupt_json(rng, text)
    path = work / f"n{i}.json"
    path.write_text(text)
    argv = ["run", str(path), "--iters", str(rng.choice([1, 1, 2]))]
    for name in rng.sample(sorted(FEEDS), rng.randint(0, len(FEEDS))):
        argv += ["--feed", f"{name}={work / (name + '.npy')}"]
    argv += ["--fetch", rng.choice(["y", "o0", "f"])]
    return argv, {0, 1, 2}, None


_OPS_CACHE: dict[str, list[str]] = {}


# -- checkpoints --------------------------------------------------------------------------------
def _base_run(work: Path) -> Path:
    base = work / "base"
    if not (base / "checkpoint.npz").exists():
        status, err, _ = call(["train", "--epochs", "2", "--quiet", "--out", str(base), "--overwrite"])
        if status != 0:
            raise RuntimeError(f"the base run failed: {err}")
    return base


def _damage_npz(rng: random.Random, path: Path) -> str:
    raw = path.read_bytes()
    how = rng.randrange(9)
    if how == 0:
        path.write_bytes(raw[: rng.randrange(len(raw))])
        return "truncated"
    if how == 1:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        path.write_bytes(bytes(b))
        return "bytes flipped"
    if how == 2:
        path.write_bytes(b"")
        return "empty"
    if how == 3:
        path.unlink()
        path.mkdir()
        return "a directory"
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    key = rng.choice(sorted(arrays))
    if how == 4:
        del arrays[key]
        what = f"entry {key} removed"
    elif how == 5:
        arrays[key] = np.zeros((3, 1, 2), arrays[key].dtype if arrays[key].dtype.kind != "U" else "f4")
        what = f"entry {key} reshaped"
    elif how == 6:
        arrays[key] = arrays[key].astype("f8") if arrays[key].dtype.kind in "fiu" else np.array(7)
        what = f"entry {key} retyped"
    elif how == 7:
        a = arrays[key]
        if a.dtype.kind == "f" and a.size:
            a = a.copy()
            a.flat[0] = np.nan
        arrays[key] = a
        what = f"entry {key} with a NaN"
    else:
        arrays[key] = np.array(rng.choice(["{}", "", "x" * 1000, '{"format": 99}']))
        what = f"entry {key} replaced by text"
    np.savez(path, **arrays)
    return what


def _damage_metrics(rng: random.Random, path: Path) -> str:
    data = json.loads(path.read_bytes())
    how = rng.randrange(5)
    if how == 0:
        path.write_text(path.read_text()[: rng.randrange(20, 200)])
        return "metrics truncated"
    if how == 1:
        data["epochs"] = data["epochs"][:1]
        what = "metrics: one epoch dropped"
    elif how == 2:
        data["epochs"] = "x"
        what = "metrics: epochs not a list"
    elif how == 3:
        data["config"]["lr"] = "fast"
        what = "metrics: bad config value"
    else:
        data["epochs"] = data["epochs"] * 3
        what = "metrics: epochs repeated"
    path.write_text(json.dumps(data))
    return what


def fuzz_checkpoint(rng: random.Random, i: int, work: Path) -> tuple[list[str], set[int], str | None]:
    base = _base_run(work)
    run = work / f"k{i}"
    shutil.copytree(base, run)
    what = (
        _damage_npz(rng, run / "checkpoint.npz") if rng.random() < 0.75 else _damage_metrics(rng, run / "metrics.json")
    )
    _CASE_NOTE["what"] = what
    return ["train", "--resume", str(run), "--epochs", str(rng.choice([3, 4])), "--quiet"], {0, 1, 2}, None


_CASE_NOTE: dict[str, str] = {}
FUZZERS: dict[str, Callable[[random.Random, int, Path], tuple[list[str], set[int], str | None]]] = {
    "fuzz_cli": fuzz_cli,
    "fuzz_data": fuzz_data,
    "fuzz_netdef": fuzz_netdef,
    "fuzz_checkpoint": fuzz_checkpoint,
}


def main(kind: str, n: int, seed: int, work: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    signal.signal(signal.SIGALRM, _alarm)
    root = Path(work)
    for name, value in FEEDS.items():
        np.save(root / f"{name}.npy", value)
    rng = random.Random(seed)
    out = root / f"{kind}.jsonl"
    import asyncnet.cli.main  # noqa: F401  (imports before the thread count is taken)

    for i in range(n):
        _CASE_NOTE.clear()
        baseline = threading.active_count()
        argv, allowed, _ = FUZZERS[kind](rng, i, root)
        status, err, took = call(argv)
        what = " ".join(a if len(a) < 60 else a[:30] + "..." for a in argv)
        if _CASE_NOTE:
            what += f" [{_CASE_NOTE['what']}]"
        ok, detail = judge(status, err, allowed, what, baseline)
        if kind == "fuzz_checkpoint" and status == 0 and "__asyncnet_checkpoint__ removed" in what:
            ok, detail = False, f"resumed without its metadata entry -- {what}"
        with open(out, "a") as f:
            f.write(
                json.dumps(
                    {
                        "ok": ok,
                        "detail": detail,
                        "seconds": round(took, 2),
                        "status": status,
                        "what": what[:150],
                        "err": err.strip()[-150:],
                    }
                )
                + "\n"
            )
        for p in root.glob("[crk][0-9]*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else None
