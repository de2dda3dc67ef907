"""Caffe2's ``caffe2.python.session``: run tasks, task groups, steps and plans in a workspace.

:class:`LocalSession` compiles a task group to one plan and runs it with asyncnet's plan
executor in its workspace (the current one by default). A task group of the PRIVATE workspace
type runs in a child workspace: it sees the session's blobs, its writes to them are kept, and
the blobs it creates are dropped after the run (the task outputs excepted)::

    >>> from caffe2.python import core
    >>> from caffe2.python.session import LocalSession
    >>> net = core.Net("session_doc")
    >>> y = net.ConstantFill([], "session_doc_y", shape=[2], value=3.0)
    >>> with LocalSession() as session:
    ...     session.run(core.execution_step("doc_step", net))
    >>> from caffe2.python import workspace
    >>> workspace.FetchBlob("session_doc_y")
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core, workspace
from caffe2.python.task import Cluster, Task, TaskGroup, WorkspaceType

__all__ = ["CompiledRunnable", "LocalSession", "Session"]


class CompiledRunnable:
    """A runnable compiled by a session class."""

    def __init__(self, obj: Any, session_class: type):
        self.obj = obj
        self.session_class = session_class


class Session:
    """Runs tasks, task groups, execution steps and plans; compiled runnables are cached."""

    _compiled_cache: dict[Any, Any] = {}

    def __init__(self) -> None:
        self._open = True
        # id(runnable) -> (runnable, compiled): the runnable is kept so that its id is not reused
        self._runnable_cache: dict[int, tuple[Any, CompiledRunnable]] = {}

    def is_open(self) -> bool:
        return self._open

    @classmethod
    def compile(cls, runnable: Any, workspace_type: str | None = None, setup_net_list: Any = None) -> CompiledRunnable:
        """``runnable`` (a TaskGroup, Task, ExecutionStep, Plan, Net or list) compiled for this class."""
        if isinstance(runnable, CompiledRunnable):
            if runnable.session_class is not cls:
                raise AssertionError("Runnable was compiled for a different session type.")
            return runnable
        if isinstance(runnable, TaskGroup):
            tg = runnable
        else:
            tg = TaskGroup(workspace_type=workspace_type or WorkspaceType.GLOBAL)
            if isinstance(runnable, Task):
                tg.add(runnable)
            elif isinstance(runnable, core.ExecutionStep):
                tg.add(Task(step=runnable))
            elif isinstance(runnable, core.Plan):
                steps = runnable.Steps()
                if not steps:
                    raise AssertionError("The plan has no steps")
                tg.add(Task(step=steps[0] if len(steps) == 1 else steps))
            else:
                tg.add(Task(step=core.execution_step("runnable", runnable)))
        return CompiledRunnable(cls._compile_task_group(tg, setup_net_list), session_class=cls)

    def run(self, runnable: Any, workspace_type: str | None = None, setup_net_list: Any = None) -> None:
        """Run ``runnable``; its task outputs can be fetched afterwards."""
        if not self.is_open():
            raise AssertionError("Session is closed.")
        if runnable is None:
            raise AssertionError("Got a none runnable.")
        cached = self._runnable_cache.get(id(runnable))
        if cached is not None and cached[0] is runnable:
            compiled = cached[1]
        else:
            compiled = self.compile(runnable, workspace_type, setup_net_list)
            self._runnable_cache[id(runnable)] = (runnable, compiled)
        self._run_compiled(compiled.obj)

    def close(self) -> None:
        if self.is_open():
            self._do_close()
            self._open = False

    def fetch_output(self, output: Any) -> Any:
        raise NotImplementedError

    def _run_compiled(self, compiled: Any) -> None:
        raise NotImplementedError

    @classmethod
    def _compile_task_group(cls, task_group: TaskGroup, setup_net_list: Any = None) -> Any:
        return task_group

    def _do_close(self) -> None:
        pass

    def __enter__(self) -> Session:
        if not self.is_open():
            raise AssertionError("Session already closed.")
        return self

    def __exit__(self, ex_type: Any, value: Any, traceback: Any) -> None:
        if ex_type is None:
            self.close()


def _local_steps(step: Any) -> None:
    """Drop ``create_workspace`` from a task group's step: the session provides that child
    workspace (a task's instances keep theirs). A ``create_workspace`` set to False anywhere
    below is dropped too: it is the default, and the plan converter takes no such field."""
    step.ClearField("create_workspace")
    _drop_false_create_workspace(step)


def _drop_false_create_workspace(step: Any) -> None:
    for sub in step.substep:
        if sub.HasField("create_workspace") and not sub.create_workspace:
            sub.ClearField("create_workspace")
        _drop_false_create_workspace(sub)


class LocalSession(Session):
    """Runs task groups in workspace ``ws`` (a ``workspace.C.Workspace``; the current one by default)."""

    def __init__(self, ws: Any = None):
        Session.__init__(self)
        self._ws = ws or workspace.C.Workspace.current

    @classmethod
    def _compile_task_group(cls, task_group: TaskGroup, setup_net_list: Any = None) -> Any:
        with Cluster():
            task = task_group.to_task()
        plan = core.Plan("task_group_plan")
        plan.AddStep(task.get_step())
        return plan, task.output_list(), task.workspace_type()

    def _run_compiled(self, compiled: Any) -> None:
        plan, output_list, workspace_type = compiled
        outputs = []
        for name in output_list.names():
            self._ws.create_blob(str(name))
            outputs.append(core.BlobReference(str(name)))
        output_list.set_values(outputs, _fetch_func=self._fetch_output)
        proto = type(plan.Proto())()
        proto.CopyFrom(plan.Proto())
        for step in proto.execution_step:
            _local_steps(step)
        if workspace_type != WorkspaceType.PRIVATE:
            self._ws.run(proto)
            return
        child = workspace.C.Workspace()
        parent = self._ws._an()
        before = {name: parent.fetch(name) for name in parent.blobs()}
        for name, value in before.items():
            child._an().feed(name, value)
        try:
            child.run(proto)
        finally:
            for name, value in before.items():
                if child._an().has(name) and child._an().fetch(name) is not value:
                    parent.feed(name, child._an().fetch(name))

    def _fetch_output(self, output: Any) -> Any:
        return self._ws.blobs[str(output)].fetch()

    def fetch_output(self, output: Any) -> Any:
        """The value of a task output."""
        return output.fetch()
