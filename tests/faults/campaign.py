"""The fault campaign: kill, signal and fuzz the ``asyncnet`` command the way a demanding operator
would, and count what went wrong.

Each *kind* of fault runs a number of tries; a try is *good* when every target holds:

- no traceback, no Python warning, at most one line on stderr (exactly one for a signal);
- no hang: every command ends within its bound (a hang counts as bad and is killed);
- no orphan: every process the command started is gone soon after the command ended;
- no leak: no shared-memory segment (``/dev/shm``) or runner folder of those processes remains;
- no corrupt checkpoint: a ``checkpoint.npz`` that exists loads completely, ``metrics.json`` parses;
- the exit status says what happened (interrupt 130 / SIGTERM 143, a killed worker 1, bad input
  2 or 1, a diverged run non-zero), and a stopped run resumes from its last saved epoch, leaving
  no temporary file in its run directory.

Run it with::

    python tests/faults/campaign.py --tries 3          # every kind, 3 tries each; prints the table
    python tests/faults/campaign.py --short            # the short form the test suite runs

or through pytest: ``pytest tests/faults -m slow`` (full) and ``pytest tests/faults`` (short).
Every process it starts runs in its own session and is killed by process group at the end; every
file it writes is under one temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
PYTHON = sys.executable
RUN_BOUND = 120.0  # seconds any one command may take before it counts as a hang
SETTLE = 15.0  # seconds the processes of a command get to disappear after it ended


@dataclass
class Try:
    kind: str
    ok: bool
    detail: str = ""


@dataclass
class Tally:
    tries: int = 0
    good: int = 0
    bad: int = 0
    details: list[str] = field(default_factory=list)

    def add(self, t: Try) -> None:
        self.tries += 1
        if t.ok:
            self.good += 1
        else:
            self.bad += 1
            self.details.append(t.detail)


# -- processes ----------------------------------------------------------------------------------
def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), str(HERE)] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    e.pop("ASYNCNET_DEBUG", None)
    return e


TORCHRUN = [str(Path(PYTHON).parent / "torchrun"), "--nproc-per-node", "2"]


def start(args: list[str], cwd: Path, torchrun: bool = False) -> subprocess.Popen:
    """``python -m asyncnet ARGS`` (or under torchrun) in its own session (so the group can be
    signalled and reaped; torchrun puts each rank in a session of its own)."""
    head = [*TORCHRUN, "-m", "asyncnet"] if torchrun else [PYTHON, "-m", "asyncnet"]
    return subprocess.Popen(
        [*head, *args],
        cwd=cwd,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parent_of[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for c, pp in parent_of.items():
            if pp == p and c not in out:
                out.add(c)
                todo.append(c)
    return out


def in_group(pgid: int) -> set[int]:
    """Live processes of process group ``pgid`` (the command and whatever it started)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                    found.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def alive(pid: int) -> bool:
    from asyncnet.cleanup import pid_gone

    return not pid_gone(pid)


def finish(proc: subprocess.Popen, bound: float = RUN_BOUND) -> tuple[int | None, str, bool]:
    """Wait for the command: (status, stderr, hung). A hung command's group is killed."""
    try:
        _, err = proc.communicate(timeout=bound)
        return proc.returncode, err.decode(errors="replace"), False
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        _, err = proc.communicate()
        return None, err.decode(errors="replace"), True


def send(pid: int, sig: int, group: bool = False) -> None:
    """Signal a process (or its group); one that already ended is no error: its exit is judged."""
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def leftovers(pids: set[int], pgid: int) -> tuple[list[int], list[str]]:
    """Processes of the command still alive after ``SETTLE`` s, and its segments and folders left."""
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline and ({p for p in pids if alive(p)} | in_group(pgid)):
        time.sleep(0.05)
    orphans = sorted({p for p in pids if alive(p)} | in_group(pgid))
    kill_group(pgid)
    for p in orphans:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    tokens = {f"_{p}_" for p in pids | {pgid}}
    left = [n for n in _listdir("/dev/shm") if n.startswith("asyncnet_") and any(t in n for t in tokens)]
    left += [n for n in _listdir(tempfile.gettempdir()) if n.startswith("asyncnet_fn_") and any(t in n for t in tokens)]
    return orphans, left


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def asyncnet_traceback(err: str) -> str | None:
    """Under torchrun, whose own logging and signal traceback are not ours: a traceback through asyncnet."""
    if "Traceback" in err and ("/asyncnet/" in err.split("Traceback", 1)[1]):
        return "traceback through asyncnet on stderr: " + err[-300:]
    return None


def stderr_problem(err: str, lines: int = 1) -> str | None:
    if "Traceback" in err:
        return "traceback on stderr: " + err[-300:]
    if "Warning" in err or "warnings.warn" in err:
        return "a warning on stderr: " + err[-300:]
    if err.count("\n") > lines:
        return f"{err.count(chr(10))} lines on stderr: " + err[-300:]
    return None


def checkpoint_problem(run: Path) -> str | None:
    """A checkpoint or metrics.json that exists but cannot be read whole."""
    ck = run / "checkpoint.npz"
    if ck.exists():
        try:
            with np.load(ck, allow_pickle=False) as f:
                for k in f.files:
                    f[k]
        except Exception as e:  # noqa: BLE001
            return f"corrupt checkpoint: {type(e).__name__}: {e}"
    m = run / "metrics.json"
    if m.exists():
        try:
            json.loads(m.read_bytes())
        except ValueError as e:
            return f"corrupt metrics.json: {e}"
    return None


def metrics_epochs(run: Path) -> int:
    try:
        return len(json.loads((run / "metrics.json").read_bytes()).get("epochs", []))
    except (OSError, ValueError, AttributeError):
        return 0


def checkpoint_epochs(run: Path) -> int | None:
    """The epochs the run's checkpoint records: 0 without a checkpoint, None when it has no record."""
    from asyncnet.model.checkpoint import metadata

    if not (run / "checkpoint.npz").exists():
        return 0
    try:
        return len(((metadata(run / "checkpoint.npz") or {}).get("run") or {})["epochs"])
    except Exception:  # noqa: BLE001 - unreadable, or a checkpoint without the record
        return None


def saved_epochs(run: Path) -> int:
    """The epochs the run holds: its checkpoint's record (metrics.json may lag it by the epoch
    whose checkpoint was being written when the run was killed), else metrics.json's."""
    held = checkpoint_epochs(run)
    return metrics_epochs(run) if held is None or not (run / "checkpoint.npz").exists() else held


def wait_for(pred: Callable[[], bool], bound: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


# -- kills and signals --------------------------------------------------------------------------
TRAIN = ["train", "--epochs", "400", "--quiet"]


def _train_args(rng: random.Random, backend: str, run: Path) -> list[str]:
    model = rng.choice(["mlp", "mlp", "cnn", "lstm"])
    if backend == "torch":
        return [*TRAIN, "--model", model, "--backend", "torch", "--out", str(run)]
    mode = rng.choice(["sync", "hogwild"]) if backend == "processes" else rng.choice(["sync", "hogwild", "local"])
    if backend == "threads" and rng.random() < 0.2:
        model, mode = "dlrm", "sync"
    return [*TRAIN, "--model", model, "--mode", mode, "--backend", backend, "--out", str(run)]


def _started(proc: subprocess.Popen, run: Path, backend: str, bound: float = 60) -> bool:
    """Training is under way: metrics.json exists and (processes) the workers exist."""

    def ready() -> bool:
        if proc.poll() is not None:
            return True
        return (run / "metrics.json").exists() and (backend == "threads" or len(children(proc.pid)) >= 2)

    return wait_for(ready, bound) and proc.poll() is None


def _resume(run: Path, cwd: Path, torchrun: bool = False) -> tuple[bool, str]:
    """``--resume`` the stopped run for one more epoch: (resumed, why not)."""
    n = saved_epochs(run)
    proc = start(["train", "--resume", str(run), "--epochs", str(n + 1), "--quiet"], cwd, torchrun)
    status, err, hung = finish(proc)
    if hung:
        return False, "resume hung"
    if status != 0:
        ours = [line for line in err.splitlines() if line.startswith("asyncnet")]  # a rank's line under torchrun
        return False, f"resume exit {status}: {(ours[0] if ours else err.strip()[-200:])}"
    if saved_epochs(run) != n + 1:
        return False, f"resume from {n} epochs gave {saved_epochs(run)}"
    return True, ""


def kill_try(kind: str, rng: random.Random, work: Path) -> Try:
    """One try of a kill or signal kind: ``<what>[<backend>]``."""
    what, backend = kind.split("[")[0], kind.split("[")[1].rstrip("]")
    run = work / f"run{rng.randrange(10**9)}"
    torch = backend == "torch"
    proc = start(_train_args(rng, backend, run), work, torch)
    pids = {proc.pid}
    try:
        if not _started(proc, run, backend):
            status, err, hung = finish(proc, 5)
            return Try(kind, False, f"the run did not start (exit {status}): {err.strip()[-200:]}")
        if rng.random() < 0.5:  # half the faults come once an epoch was saved (the others may come before)
            wait_for(
                lambda: saved_epochs(run) >= 1 or proc.poll() is not None, 5 if backend == "processes" else 30, 0.05
            )
        time.sleep(rng.uniform(0.2, 2.5))
        pids |= children(proc.pid)
        victim = None
        if what == "worker_kill":
            workers = sorted(children(proc.pid) - _trackers(children(proc.pid)))
            if not workers:
                return Try(kind, False, "no worker process found")
            victim = rng.choice(workers)
            send(victim, signal.SIGKILL)
        elif what == "parent_kill":
            send(proc.pid, signal.SIGKILL)
        elif what in ("sigterm_group", "sigint_group"):
            send(proc.pid, signal.SIGTERM if what == "sigterm_group" else signal.SIGINT, group=True)
        elif what == "checkpoint_kill":
            if not wait_for(
                lambda: any(p.name.startswith(".checkpoint") for p in _ls(run)) or proc.poll() is not None, 30, 0.0005
            ):
                return Try(kind, False, "no checkpoint write seen in 30 s")
            send(proc.pid, signal.SIGKILL)
        if what in ("parent_kill", "checkpoint_kill"):  # its children may hold its stderr: judge them first
            proc.wait(30)
            orphans, left = leftovers(pids, proc.pid)
            status, err, hung = finish(proc, 10)
        else:
            status, err, hung = finish(proc)
            orphans, left = leftovers(pids, proc.pid)
    finally:
        if proc.poll() is None:
            kill_group(proc.pid)
            proc.wait()
    problems = []
    if hung:
        problems.append("hang")
    if orphans:
        problems.append(f"orphans {orphans}")
    if left:
        problems.append(f"left behind {left}")
    want_lines = 1
    if what in ("parent_kill", "checkpoint_kill"):
        want_lines = 0  # killed outright: it says nothing, and nothing it started may speak for it
    bad_err = stderr_problem(err, want_lines) if not torch else asyncnet_traceback(err)
    if bad_err:
        problems.append(bad_err)
    expect = {"worker_kill": {1}, "sigterm_group": {143}, "sigint_group": {130}}.get(what) if not torch else None
    if torch and what != "parent_kill" and not hung and status == 0:
        problems.append("torchrun exited 0 after the fault")
    if expect and not hung and status not in expect:
        problems.append(f"exit {status}, expected {sorted(expect)}: {err.strip()[-200:]}")
    if what == "worker_kill" and torch and not hung and "rank" not in err:
        problems.append(f"torchrun does not name the killed rank: {err.strip()[-300:]}")
    if what == "worker_kill" and not torch and status == 1 and "worker" not in err:
        problems.append(f"the error does not name the worker: {err.strip()}")
    if (
        what in ("sigterm_group", "sigint_group")
        and not torch
        and err.strip() not in ("asyncnet: terminated", "asyncnet: interrupted")
    ):
        problems.append(f"not the one interrupt line: {err.strip()[-200:]}")
    ck = checkpoint_problem(run)
    if ck:
        problems.append(ck)
    elif (checkpoint_epochs(run) or 0) < metrics_epochs(run) and checkpoint_epochs(run) is not None:
        problems.append(
            f"metrics.json lists {metrics_epochs(run)} epochs, the checkpoint holds {checkpoint_epochs(run)}"
        )
    if problems:
        return Try(kind, False, "; ".join(problems))
    before = saved_epochs(run)
    resumed, why = _resume(run, work, torch)
    stray = [p.name for p in _ls(run) if p.name.endswith(".tmp")]
    if not resumed and not (before == 0 and "saved no epoch" in why):  # else: said in one line (exit 2)
        return Try(kind, False, f"{why}" + (f" (stray {stray})" if stray else ""))
    if stray:
        return Try(kind, False, f"temporary files left in the run directory after resume: {stray}")
    return Try(kind, True)


def _trackers(pids: set[int]) -> set[int]:
    """multiprocessing's resource tracker among ``pids`` (not a worker)."""
    out = set()
    for p in pids:
        try:
            if b"resource_tracker" in Path(f"/proc/{p}/cmdline").read_bytes():
                out.add(p)
        except OSError:
            pass
    return out


def _ls(run: Path) -> list[Path]:
    try:
        return list(run.iterdir())
    except OSError:
        return []


def sigint_run_try(kind: str, rng: random.Random, work: Path) -> Try:
    """Ctrl-C in ``asyncnet run`` of a long net: 130 and one line, within 2 s."""
    net_type = kind.split("[")[1].rstrip("]")
    net = {
        "name": "n",
        "type": net_type,
        "num_workers": 2,
        "ops": [
            {"type": "MatMul", "inputs": ["x", "x"], "outputs": ["h"]},
            {"type": "Relu", "inputs": ["h"], "outputs": ["h"]},
            {"type": "Sum", "inputs": ["h", "x"], "outputs": ["y"]},
        ],
    }
    (work / "net.json").write_text(json.dumps(net))
    np.save(work / "x.npy", np.ones((200, 200), np.float32))
    proc = start(["run", "net.json", "--feed", "x=x.npy", "--iters", "1000000000"], work)
    time.sleep(rng.uniform(1.5, 3.0))
    pids = {proc.pid} | children(proc.pid)
    sent = time.monotonic()
    send(proc.pid, signal.SIGINT, group=True)
    status, err, hung = finish(proc, 30)
    took = time.monotonic() - sent
    orphans, left = leftovers(pids, proc.pid)
    problems = [
        p
        for p in [
            "hang" if hung else None,
            f"exit {status}" if status != 130 else None,
            f"stderr {err!r}" if err != "asyncnet: interrupted\n" else None,
            f"took {took:.1f} s" if took > 2.0 else None,
            f"orphans {orphans}" if orphans else None,
            f"left {left}" if left else None,
        ]
        if p
    ]
    return Try(kind, not problems, "; ".join(problems))


def diverge_try(kind: str, rng: random.Random, work: Path) -> Try:
    """A learning rate that makes the loss explode: the run must not exit 0."""
    model = rng.choice(["mlp", "cnn", "lstm"])
    run = work / f"div{rng.randrange(10**9)}"
    proc = start(["train", "--model", model, "--lr", "1e9", "--epochs", "3", "--quiet", "--out", str(run)], work)
    status, err, hung = finish(proc)
    if hung:
        return Try(kind, False, "hang")
    problem = stderr_problem(err)
    if problem:
        return Try(kind, False, problem)
    if status == 0:
        return Try(kind, False, f"--model {model} --lr 1e9 exited 0")
    return Try(kind, True)


# -- fuzzers (in one child process each: main() in-process, one result line per case) ------------
def _fuzz_results(
    kind: str, status: int | None, err: str, hung: bool, orphans: list[int], left: list[str], work: Path
) -> list[Try]:
    path = work / f"{kind}.jsonl"
    tries = []
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            tries.append(Try(kind, r["ok"], r.get("detail", "")))
    if hung or status != 0 or orphans or left:
        tries.append(
            Try(
                kind,
                False,
                f"the fuzzer process: exit {status}, hung {hung}, orphans {orphans}, left {left}: {err.strip()[-300:]}",
            )
        )
    return tries


KILL_KINDS = [
    f"{w}[{b}]"
    for w in ("parent_kill", "sigterm_group", "sigint_group", "checkpoint_kill")
    for b in ("threads", "processes")
] + ["worker_kill[processes]"]
# torchrun: a signal to the whole group, SIGKILL of the agent, SIGKILL of one rank
TORCH_KINDS = ["sigterm_group[torch]", "sigint_group[torch]", "parent_kill[torch]", "worker_kill[torch]"]
RUN_KINDS = ["sigint_run[async_scheduling]", "sigint_run[simple]"]
FUZZ_KINDS = ["fuzz_cli", "fuzz_data", "fuzz_netdef", "fuzz_checkpoint"]
ALL_KINDS = RUN_KINDS + KILL_KINDS + TORCH_KINDS + ["diverge"] + FUZZ_KINDS
SHORT = {
    "sigint_run[async_scheduling]": 1,
    "parent_kill[processes]": 1,
    "worker_kill[processes]": 1,
    "sigterm_group[threads]": 1,
    "fuzz_cli": 10,
    "fuzz_data": 10,
    "fuzz_netdef": 30,
    "fuzz_checkpoint": 4,
}
FUZZ_PER_TRY = 25  # cases per fuzzer "try" in the full campaign


def run_campaign(plan: dict[str, int], seed: int = 0, log: Callable[[str], None] = lambda s: None) -> dict[str, Tally]:
    """Run ``plan`` ({kind: tries}); returns {kind: Tally}. Everything happens in one temp folder."""
    rng = random.Random(seed)
    table: dict[str, Tally] = {}
    with tempfile.TemporaryDirectory(prefix="asyncnet-faults-") as tmp:
        work = Path(tmp)
        for kind, tries in plan.items():
            tally = table.setdefault(kind, Tally())
            if kind.startswith("fuzz_"):
                sub = work / kind
                sub.mkdir()
                for t in _fuzz_kind(kind, tries, rng.randrange(2**31), sub):
                    tally.add(t)
            else:
                for _ in range(tries):
                    sub = Path(tempfile.mkdtemp(dir=work))
                    fn = (
                        sigint_run_try
                        if kind.startswith("sigint_run")
                        else diverge_try
                        if kind == "diverge"
                        else kill_try
                    )
                    t = fn(kind, rng, sub)
                    tally.add(t)
                    if not t.ok:
                        log(f"  {kind}: BAD: {t.detail[:400]}")
            log(f"{kind}: {tally.tries} tries, {tally.good} good, {tally.bad} bad")
    return table


def _fuzz_kind(kind: str, n: int, seed: int, work: Path) -> list[Try]:
    proc = subprocess.Popen(
        [PYTHON, "-c", f"import campaign_fuzz as F; F.main({kind!r}, {n}, {seed}, {str(work)!r})"],
        cwd=work,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    status, err, hung = finish(proc, RUN_BOUND + 10 * n)
    orphans, left = leftovers({proc.pid} | children(proc.pid), proc.pid)
    return _fuzz_results(kind, status, err, hung, orphans, left, work)


def format_table(table: dict[str, Tally]) -> str:
    rows = ["| kind | tries | good | bad |", "|---|---:|---:|---:|"]
    for kind, t in table.items():
        rows.append(f"| {kind} | {t.tries} | {t.good} | {t.bad} |")
    total = Tally()
    for t in table.values():
        total.tries += t.tries
        total.good += t.good
        total.bad += t.bad
    rows.append(f"| **total** | {total.tries} | {total.good} | {total.bad} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=3, help=f"tries per kill/signal kind (fuzzers: x{FUZZ_PER_TRY} cases)")
    p.add_argument("--short", action="store_true", help="the short form the test suite runs")
    p.add_argument("--kinds", help="comma-separated kinds (default all): " + ", ".join(ALL_KINDS))
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--json", help="write the table and failures here")
    args = p.parse_args(argv)
    if args.short:
        plan = dict(SHORT)
    else:
        kinds = args.kinds.split(",") if args.kinds else ALL_KINDS
        plan = {k: args.tries * (FUZZ_PER_TRY if k.startswith("fuzz_") else 1) for k in kinds}
    started = time.monotonic()
    table = run_campaign(plan, args.seed, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(format_table(table))
    print(
        f"\nseed {args.seed}, {time.monotonic() - started:.0f} s, load {Path('/proc/loadavg').read_text().split()[:3]}"
    )
    for kind, t in table.items():
        for d in t.details:
            print(f"- {kind}: {d}")
    if args.json:
        Path(args.json).write_text(json.dumps({k: vars(t) for k, t in table.items()}, indent=1))
    return 1 if any(t.bad for t in table.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
