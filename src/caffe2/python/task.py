"""Caffe2's ``caffe2.python.task``: tasks (an execution step plus the blobs it returns), grouped
into task groups that a session runs, on nodes.

A :class:`Task` used as a context is a :class:`~caffe2.python.net_builder.NetBuilder`;
``ops.task_init()``/``task_exit()`` blocks run once before and after it,
``final_output(blob)`` is fetched after the run::

    >>> from caffe2.python.net_builder import ops
    >>> from caffe2.python.session import LocalSession
    >>> from caffe2.python.task import Task, final_output
    >>> with Task() as task:
    ...     out = final_output(ops.Add([ops.Const(2), ops.Const(3)]))
    >>> with LocalSession() as session:
    ...     session.run(task)
    >>> int(out.fetch())
    5
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from caffe2.python import context, core

__all__ = [
    "Cluster",
    "Node",
    "SetupNets",
    "Task",
    "TaskGroup",
    "TaskOutput",
    "TaskOutputList",
    "WorkspaceType",
    "add_setup_steps",
    "final_output",
    "get_setup_nets",
]


@context.define_context(allow_default=True)
class Cluster:
    """The node names used (a default Cluster exists; ``Node`` registers itself here)."""

    def __init__(self) -> None:
        self._nodes: list[str] = []
        self._node_kwargs: dict[str, dict[str, Any]] = {}

    def add_node(self, node: Node) -> None:
        if str(node) not in self._nodes:
            self._nodes.append(str(node))
        merged = dict(self._node_kwargs.get(str(node)) or {})
        merged.update(node.kwargs() or {})
        self._node_kwargs[str(node)] = merged

    def nodes(self) -> list[str]:
        return self._nodes

    def node_kwargs(self) -> dict[str, dict[str, Any]]:
        return self._node_kwargs


@context.define_context(allow_default=True)
class Node:
    """Tasks created inside ``with Node(name):`` run on node ``name`` ("local" by default)."""

    def __init__(self, node: Any = "local", **kwargs: Any):
        self._name = str(node)
        self._kwargs = kwargs
        Cluster.current().add_node(self)

    def __str__(self) -> str:
        return self._name

    def kwargs(self) -> dict[str, Any]:
        return self._kwargs


class WorkspaceType:
    """PRIVATE: a task group runs in a child workspace; GLOBAL: in the session's workspace."""

    PRIVATE = "private"
    GLOBAL = "global"


def _collect(nets: Any, into: list[Any]) -> None:
    if isinstance(nets, (list, tuple)):
        into.extend(nets)
    elif isinstance(nets, (core.Net, core.ExecutionStep)):
        into.append(nets)
    elif nets is not None:
        raise TypeError(f"Unsupported type for setup: {type(nets)}")


def get_setup_nets(key: str, steps_or_nets: list[Any], target: Any) -> tuple[list[Any], list[Any]]:
    """The init and exit nets or steps that the setup objects stored under attribute ``key`` of
    the nets of ``steps_or_nets`` give (each setup object is used once)."""
    init_net, exit_net = core.Net(key + "/init"), core.Net(key + "/exit")
    init_nets: list[Any] = []
    exit_nets: list[Any] = []
    objs: list[Any] = []
    for s in steps_or_nets:
        if hasattr(s, "get_all_attributes"):
            objs += s.get_all_attributes(key)
        elif hasattr(s, "get_attributes"):
            objs += s.get_attributes(key)
    for obj in objs:
        if getattr(obj, "_setup_used", False):
            continue
        if hasattr(obj, "_setup_target") and obj._setup_target != target:
            continue
        if hasattr(obj, "setup"):
            _collect(obj.setup(init_net), init_nets)
            obj._setup_used = True
        if hasattr(obj, "exit"):
            _collect(obj.exit(exit_net), exit_nets)
            obj._setup_used = True
    if init_net.Proto().op:
        init_nets.insert(0, init_net)
    if exit_net.Proto().op:
        exit_nets.insert(0, exit_net)
    return init_nets, exit_nets


def add_setup_steps(step: Any, init_nets: list[Any], exit_nets: list[Any], name: str) -> Any:
    """``step`` between a step of ``init_nets`` and one of ``exit_nets``."""
    if not init_nets and not exit_nets:
        return step
    steps = []
    if init_nets:
        steps.append(core.execution_step(f"{name}:init", init_nets))
    steps.append(step)
    if exit_nets:
        steps.append(core.execution_step(f"{name}:exit", exit_nets))
    return core.execution_step(name, steps)


class SetupNets:
    """Nets run once at the start (``init_nets``) and end (``exit_nets``) of a task or task group,
    attached to a net with ``net.add_attribute(Task.TASK_SETUP, SetupNets(...))``."""

    def __init__(self, init_nets: Any = None, exit_nets: Any = None):
        self.init_nets = init_nets
        self.exit_nets = exit_nets

    def setup(self, init_net: Any) -> Any:
        return self.init_nets

    def exit(self, exit_net: Any) -> Any:
        return self.exit_nets


@context.define_context(allow_default=False)
class TaskGroup:
    """Tasks that run concurrently; tasks on one node share a workspace."""

    LOCAL_SETUP = "local_setup"

    def __init__(self, workspace_type: str | None = None):
        self._tasks: list[Task] = []
        self._tasks_to_add: list[Task] = []
        self._already_used = False
        self._report_steps: list[tuple[str, Any]] = []
        self._workspace_type = workspace_type
        self._tasks_by_node: Any = None

    def add(self, task: Task) -> None:
        if self._already_used:
            raise AssertionError("Cannot add Task to an already used TaskGroup.")
        if task._workspace_type is None:
            task._workspace_type = self._workspace_type or WorkspaceType.PRIVATE
        if self._workspace_type is None:
            self._workspace_type = task._workspace_type
        task._notify_used()
        self._tasks.append(task)

    def tasks(self) -> list[Task]:
        for task in self._tasks_to_add:
            self.add(task)
        self._tasks_to_add = []
        self._already_used = True
        return self._tasks

    def num_registered_tasks(self) -> int:
        return len(self._tasks_to_add) + len(self._tasks)

    def used_nodes(self) -> list[str]:
        used: list[str] = []
        for task in self._tasks + self._tasks_to_add:
            if task.node not in used:
                used.append(task.node)
        return used

    def report_step(self, step: Any = None, node: Any = None, interval_ms: int = 1000) -> None:
        """Not available: asyncnet's steps have no periodic run."""
        raise NotImplementedError("TaskGroup.report_step: periodic report steps are not available")

    def workspace_type(self) -> str | None:
        return self._workspace_type

    def tasks_by_node(self, node_remap: Any = None) -> TaskGroup:
        """A task group with one task per node, whose step runs that node's tasks concurrently."""
        node_map = {t.node: (node_remap(t.node) if node_remap else t.node) for t in self.tasks()}
        if self._tasks_by_node is not None:
            grouped, prev = self._tasks_by_node
            if prev != node_map:
                raise AssertionError("Cannot call tasks_by_node multiple times.")
            return grouped
        by_node: dict[str, list[Task]] = defaultdict(list)
        for task in self.tasks():
            by_node[node_map[task.node]].append(task)
        grouped = TaskGroup()
        for node, tasks in by_node.items():
            inits, exits = get_setup_nets(TaskGroup.LOCAL_SETUP, [t.get_step() for t in tasks], self)
            steps, outputs = [], []
            workspace_type = WorkspaceType.PRIVATE
            for task in tasks:
                step = task.get_step()
                step.SetCreateWorkspace(task.workspace_type() == WorkspaceType.PRIVATE)
                steps.append(step)
                outputs += task.outputs()
                if task.workspace_type() == WorkspaceType.GLOBAL:
                    workspace_type = WorkspaceType.GLOBAL
            step = steps[0] if len(steps) == 1 else core.execution_step(f"{node}:body", steps, concurrent_substeps=True)
            if inits or exits:
                step = add_setup_steps(step, inits, exits, node)
            Task(
                node=node,
                step=step,
                outputs=outputs,
                name="grouped_by_node",
                group=grouped,
                workspace_type=workspace_type,
            )
        self._tasks_by_node = (grouped, node_map)
        return grouped

    def to_task(self, node: Any = None) -> Task:
        """This group as one task on ``node``."""
        node = str(Node.current(node))
        tasks = self.tasks_by_node(lambda x: node).tasks()
        return tasks[0] if tasks else Task()


class TaskOutput:
    """A blob (or list of blobs) a task returns; ``fetch()`` after the session ran it."""

    def __init__(self, names: Any):
        self._is_scalar = type(names) not in (tuple, list)
        self.names = [names] if self._is_scalar else list(names)
        self._values: Any = None
        self._fetch_func: Any = None

    def set(self, values: list[Any], _fetch_func: Any = None) -> None:
        if len(values) != len(self.names):
            raise AssertionError(f"expected {len(self.names)} values, got {len(values)}")
        self._values = values
        self._fetch_func = _fetch_func

    def get(self) -> Any:
        if self._values is None:
            raise AssertionError("Output value not set yet.")
        return self._values[0] if self._is_scalar else self._values

    def fetch(self) -> Any:
        """The output's value(s) from the session's workspace."""
        if self._fetch_func is None:
            raise AssertionError("Cannot fetch value for this output.")
        values = [self._fetch_func(v) for v in self._values]
        return values[0] if self._is_scalar else values


def final_output(blob_or_record: Any) -> TaskOutput:
    """Return ``blob_or_record`` from the current task (a new task when none is active)."""
    task = Task.current(required=False) or Task()
    return task.add_output(blob_or_record)


class TaskOutputList:
    """The outputs of a task, set from one flat list of values."""

    def __init__(self, outputs: list[TaskOutput] | None = None):
        self.outputs = outputs or []

    def names(self) -> list[Any]:
        return [n for o in self.outputs for n in o.names]

    def set_values(self, values: list[Any], _fetch_func: Any = None) -> None:
        offset = 0
        for o in self.outputs:
            o.set(values[offset : offset + len(o.names)], _fetch_func)
            offset += len(o.names)
        if offset != len(values):
            raise AssertionError("Wrong number of output values.")


@context.define_context()
class Task:
    """An execution step and its outputs, run by a session inside a task group.

    ``num_instances`` > 1 runs that many copies concurrently, each in a child workspace
    (Caffe2's ``num_concurrent_instances``); a plan holding such a step is built here but
    asyncnet's plan executor refuses to run it."""

    TASK_SETUP = "task_setup"
    TASK_INSTANCE_SETUP = "task_instance_setup"
    REPORT_STEP = "report_step"
    _global_names_used: set[str] = set()

    @staticmethod
    def _get_next_name(node: str, group: TaskGroup | None, name: str) -> str:
        base = f"{node}/{name}"
        used = Task._global_names_used if group is None else {t.name for t in group._tasks_to_add}
        cur, i = base, 0
        while cur in used:
            i += 1
            cur = f"{base}:{i}"
        return cur

    def __init__(
        self,
        step: Any = None,
        outputs: Any = None,
        workspace_type: str | None = None,
        group: TaskGroup | None = None,
        node: Any = None,
        name: str | None = None,
        num_instances: int | None = None,
    ):
        if not name and isinstance(step, core.ExecutionStep):
            name = step.Proto().name
        name = name or "task"
        self.node = str(Node.current(None if node is None else Node(node)))
        self.group = TaskGroup.current(group, required=False)
        self.name = Task._get_next_name(self.node, self.group, name)
        if self.group is not None:
            self.group._tasks_to_add.append(self)
        self._already_used = False
        self._step: Any = None
        self._step_with_setup: Any = None
        self._outputs: list[TaskOutput] = []
        self._net_builder: Any = None
        if step is not None:
            self.set_step(step)
        if outputs is not None:
            self.add_outputs(outputs)
        self._workspace_type = workspace_type
        self._num_instances = num_instances

    def __enter__(self) -> Task:
        from caffe2.python import net_builder

        if self.group is not None:
            self.group._tasks_to_add.remove(self)
        self._assert_not_used()
        if self._step is not None:
            raise AssertionError("This Task already has an execution step.")
        self._net_builder = net_builder.NetBuilder(_fullname=self.name)
        self._net_builder.__enter__()
        return self

    def __exit__(self, etype: Any, value: Any, traceback: Any) -> None:
        self._net_builder.__exit__(etype, value, traceback)
        if etype is None:
            self.set_step(self._net_builder)
        if self.group is not None:
            self.group._tasks_to_add.append(self)
        self._net_builder = None

    def workspace_type(self) -> str | None:
        return self._workspace_type

    def _assert_not_used(self) -> None:
        if self._already_used:
            raise AssertionError("Cannot modify task since it is already been used.")

    def add_output(self, output: Any) -> TaskOutput:
        self._assert_not_used()
        output = output if isinstance(output, TaskOutput) else TaskOutput(output)
        self._outputs.append(output)
        return output

    def add_outputs(self, outputs: Any) -> Any:
        self._assert_not_used()
        if type(outputs) not in (list, tuple):
            return self.add_output(outputs)
        return [self.add_output(o) for o in outputs]

    def set_step(self, step: Any) -> None:
        self._assert_not_used()
        self._step = core.to_execution_step(step)

    def get_step(self) -> core.ExecutionStep:
        """The task's step with its setup steps (and instance copies) around it."""
        if self._step_with_setup is not None:
            return self._step_with_setup
        if self._step is None:
            self._step_with_setup = core.execution_step(self.name, [])
            return self._step_with_setup
        task_init, task_exit = get_setup_nets(Task.TASK_SETUP, [self._step], self)
        instance_init, instance_exit = get_setup_nets(Task.TASK_INSTANCE_SETUP, [self._step], self)
        if not self._outputs:
            output_net = core.Net(f"{self.name}:output")
            self.add_output(output_net.ConstantFill([], 1, dtype=core.DataType.INT32, value=0))
            task_exit.append(output_net)
        step = add_setup_steps(self._step, instance_init, instance_exit, self.name + ":instance")
        if self._num_instances and self._num_instances > 1:
            step.SetCreateWorkspace(True)
            step = core.execution_step(f"{self.name}:parallel", [step], num_concurrent_instances=self._num_instances)
        self._step_with_setup = add_setup_steps(step, task_init, task_exit, self.name)
        return self._step_with_setup

    def output_list(self) -> TaskOutputList:
        return TaskOutputList(self._outputs)

    def outputs(self) -> list[TaskOutput]:
        return self._outputs

    def _notify_used(self) -> None:
        self.get_step()
        self._already_used = True
