"""Net observers, as Caffe2's ``Net.AddObserver`` attached them: ``TimeObserver`` times each
run of the created net (``workspace.RunNet``) and reports the average in milliseconds;
``RunCountObserver`` counts the operators run, including the step-net operators that a
RecurrentNetwork op (and its gradient) runs once per timestep, as Caffe2 copied its operator
observers into the step nets.

The count uses the executors' recorder hook (``net.recorder``, see :mod:`asyncnet.exec.trace`):
during an observed ``RunNet`` the created net and the step nets of its recurrent ops record into
the observer, and the hooks are taken off again after the run.

    >>> import numpy as np
    >>> from caffe2.python import core, workspace
    >>> net = core.Net("observed")
    >>> _ = net.ConstantFill([], "z", shape=[2], value=0.0)
    >>> workspace.CreateNet(net)
    True
    >>> ob = net.AddObserver("TimeObserver")
    >>> workspace.RunNet(net, num_iter=3)
    True
    >>> ob.average_time() >= 0.0, net.NumObservers()
    (True, 1)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from asyncnet.errors import NetDefinitionError


class TimeObserver:
    """The wall time of each run of one net."""

    def __init__(self) -> None:
        self._total_ms = 0.0
        self._runs = 0

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, started: float, runs: int = 1) -> None:
        self._total_ms += (time.perf_counter() - started) * 1000.0
        self._runs += runs

    def average_time(self) -> float:
        """The average time of one run, in milliseconds (0 before any run)."""
        return self._total_ms / self._runs if self._runs else 0.0

    def debug_info(self) -> str:
        return f"average time: {self.average_time()} msecs"


class RunCountObserver:
    """The number of operator runs of one net (step-net operators included)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        return None

    def stop(self, started: Any, runs: int = 1) -> None:
        return None

    def record(self, op: Any, start: float, end: float) -> None:
        with self._lock:
            self._count += 1

    def run_count(self) -> int:
        return self._count

    def debug_info(self) -> str:
        return f"operators run: {self._count}"


_TYPES: dict[str, type] = {"TimeObserver": TimeObserver, "RunCountObserver": RunCountObserver}
_attached: dict[str, list[Any]] = {}
_STEP_NETS = {
    "RecurrentNetwork": ("forward", "step_net"),
    "RecurrentNetworkGradient": ("backward", "backward_step_net"),
}


def add(net_name: str, observer_type: str) -> Any:
    if observer_type not in _TYPES:
        raise NetDefinitionError(f"AddObserver: unknown observer type {observer_type!r}; available: {sorted(_TYPES)}")
    ob = _TYPES[observer_type]()
    _attached.setdefault(net_name, []).append(ob)
    return ob


def remove(net_name: str, ob: Any) -> None:
    obs = _attached.get(net_name, [])
    if ob in obs:
        obs.remove(ob)


def count(net_name: str) -> int:
    return len(_attached.get(net_name, []))


def _step_instances(ws: Any, inst: Any) -> list[Any]:
    """The step-net instances of the recurrent ops of net instance ``inst``, created now if the
    ops have not run yet (the ops reuse them)."""
    from asyncnet.ops.caffe2_recurrent import StepWorkspaces

    found = []
    for op in inst.operators:
        which = _STEP_NETS.get(op.type)
        if which is None or not op.ctx.args.get(which[1]):
            continue
        scratch_name = op.outputs[-1] if which[0] == "forward" else op.inputs[-1]
        scratch = ws.blob_dict.get(scratch_name)
        if not isinstance(scratch, StepWorkspaces):
            if which[0] == "backward":
                continue  # made by the forward op, which is hooked itself
            scratch = StepWorkspaces()
            ws.feed(scratch_name, scratch)
        step = scratch.step_net(which[0], op.ctx.args[which[1]])
        if step.instance is None:
            step.instance = step.ws.create_net(step.net_def, overwrite=True)
        found.append(step.instance)
        if which[0] == "forward" and op.ctx.args.get("backward_step_net"):
            back = scratch.step_net("backward", op.ctx.args["backward_step_net"])
            if back.instance is None:
                back.instance = back.ws.create_net(back.net_def, overwrite=True)
            found.append(back.instance)
    return found


def _fan_out(recorders: list[Any]) -> Any:
    def record(op: Any, start: float, end: float) -> None:
        for r in recorders:
            r(op, start, end)

    return record


@contextlib.contextmanager
def _recording(net_name: str, counters: list[RunCountObserver]) -> Iterator[None]:
    """Hook ``counters`` into net ``net_name`` of the current workspace and its step nets."""
    if not counters:
        yield
        return
    from caffe2.python import workspace

    ws = workspace.asyncnet_workspace()
    inst = ws.net(net_name)
    nets = [inst, *_step_instances(ws, inst)]
    previous = [n.recorder for n in nets]
    for n, before in zip(nets, previous):
        n.recorder = _fan_out([c.record for c in counters] + ([before] if before is not None else []))
    try:
        yield
    finally:
        for n, before in zip(nets, previous):
            n.recorder = before


@contextlib.contextmanager
def observing(net_name: str, num_iter: int) -> Iterator[None]:
    """Observe a run of ``num_iter`` iterations of net ``net_name``: time it for its
    TimeObservers, count its operator runs for its RunCountObservers."""
    obs = list(_attached.get(net_name, []))
    counters = [ob for ob in obs if isinstance(ob, RunCountObserver)]
    started = [ob.start() for ob in obs]
    with _recording(net_name, counters):
        yield
    for ob, t0 in zip(obs, started):
        ob.stop(t0, num_iter)
