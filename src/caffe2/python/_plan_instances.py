"""Steps with Caffe2's ``create_workspace`` and ``num_concurrent_instances``, which asyncnet's
plan executor does not have: the step tree above and at such steps is walked here, and every
subtree without them runs as a plan of its own on asyncnet's executor.

A step with ``create_workspace`` runs in a child workspace: it starts with the parent's blobs
(the same objects, so counters, mutexes and queues are shared), the blobs of the parent's names
it wrote are copied back when it ends (those it left alone are not, so concurrent steps do not
undo each other's writes), and the blobs it creates are dropped with it. A step
with ``num_concurrent_instances = n`` runs ``n`` copies at once, on threads.
"""

from __future__ import annotations

import threading
from typing import Any

from asyncnet.errors import ExecutionError, NetDefinitionError
from caffe2.convert import plan_to_asyncnet
from caffe2.proto import caffe2_pb2

_LOOP_FIELDS = ("num_iter", "should_stop_blob", "only_once", "report_net", "run_every_ms")


def needs_walk(step: Any) -> bool:
    """Whether ``step`` or a substep has ``create_workspace`` or several concurrent instances."""
    if step.create_workspace or step.num_concurrent_instances > 1:
        return True
    return any(needs_walk(s) for s in step.substep)


class _Run:
    """One run of a plan: the asyncnet plans it started, so that the first failure anywhere
    cancels the others (a step blocked on a queue another step feeds would wait forever)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[Any] = set()
        self.failed = False
        self.first_error: BaseException | None = None

    def start(self, ws: Any, plan: Any) -> Any:
        with self._lock:
            if self.failed:
                raise ExecutionError("not started: another step of the plan failed")
            handle = ws.run_plan_async(plan)
            self._running.add(handle)
        return handle

    def finished(self, handle: Any) -> None:
        with self._lock:
            self._running.discard(handle)

    def fail(self, error: BaseException) -> None:
        """Record ``error`` (the first one is the plan's) and cancel the running plans."""
        with self._lock:
            self.failed = True
            self.first_error = self.first_error or error
            running = list(self._running)
        for handle in running:
            handle.cancel()


def run(plan: Any, key: str) -> None:
    """Run ``plan`` (a ``caffe2_pb2.PlanDef``) in workspace ``key``."""
    state = _Run()
    for step in plan.execution_step:
        _run_step(plan, step, key, state)


def _run_plain(plan: Any, step: Any, key: str, state: _Run) -> None:
    from caffe2.python import workspace

    sub = caffe2_pb2.PlanDef(name=plan.name)
    sub.network.extend(plan.network)
    sub.execution_step.add().CopyFrom(step)
    handle = state.start(workspace._workspaces[key], plan_to_asyncnet(sub))
    try:
        handle.wait()
    finally:
        state.finished(handle)


def _run_step(plan: Any, step: Any, key: str, state: _Run) -> None:
    if not needs_walk(step):
        _run_plain(plan, step, key, state)
        return
    looping = [f for f in _LOOP_FIELDS if step.HasField(f)]
    if looping:
        raise NetDefinitionError(
            f"{looping} on a step holding create_workspace or num_concurrent_instances is not "
            "supported (such a step and the steps around it run once)",
            f"step {step.name!r}",
        )
    body = caffe2_pb2.ExecutionStep()
    body.CopyFrom(step)
    body.ClearField("create_workspace")
    body.ClearField("num_concurrent_instances")
    n = max(step.num_concurrent_instances, 1)
    if n == 1:
        _run_instance(plan, body, key, step.create_workspace, state)
        return
    _on_threads([lambda: _run_instance(plan, body, key, step.create_workspace, state) for _ in range(n)], state)


def _run_instance(plan: Any, body: Any, key: str, private: bool, state: _Run) -> None:
    if not private:
        _run_body(plan, body, key, state)
        return
    from caffe2.python import workspace

    child = workspace._new_child(key)
    parent = workspace._workspaces[key]
    before = {name: parent.fetch(name) for name in parent.blobs()}
    try:
        _run_body(plan, body, child, state)
        kid = workspace._workspaces[child]
        for name, value in before.items():
            if kid.has(name) and kid.fetch(name) is not value:
                parent.feed(name, kid.fetch(name))
    finally:
        workspace._drop_anonymous(child)


def _run_body(plan: Any, step: Any, key: str, state: _Run) -> None:
    if step.network or not needs_walk(step):
        _run_plain(plan, step, key, state)
    elif step.concurrent_substeps and len(step.substep) > 1:
        _on_threads([lambda s=s: _run_step(plan, s, key, state) for s in step.substep], state)
    else:
        for sub in step.substep:
            _run_step(plan, sub, key, state)


def _on_threads(bodies: list[Any], state: _Run) -> None:
    """Run each body on its own thread; the first failure cancels the rest of the plan's run
    and is raised after all are joined."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def wrap(body: Any) -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - raised by the caller after the join
            with lock:
                errors.append(exc)
            state.fail(exc)

    threads = [threading.Thread(target=wrap, args=(b,), name="caffe2-step-instance") for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise state.first_error or errors[0]
