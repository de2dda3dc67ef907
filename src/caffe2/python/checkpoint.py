"""Caffe2's ``caffe2.python.checkpoint``: the :class:`Job`, a training run as task groups, and
:class:`JobRunner`, which runs it epoch by epoch, saving the global blobs of each node after
every epoch with a :class:`CheckpointManager` (one node) or :class:`MultiNodeCheckpointManager`.

A job has an ``init_group`` (run once, in the global workspace), an ``epoch_group`` (run
repeatedly until one of the ``stop_signals`` is true), a ``download_group`` and an
``exit_group``. Inside ``with job:``, new tasks join the epoch group::

    >>> from caffe2.python.checkpoint import Job
    >>> from caffe2.python.net_builder import ops
    >>> from caffe2.python.task import Task
    >>> with Job() as job:
    ...     with job.init_group:
    ...         with Task():
    ...             _ = ops.Const(1)
    ...     with Task():
    ...         _ = ops.Const(2)
    >>> len(job.init_group.tasks()), len(job.epoch_group.tasks())
    (1, 1)
"""

from __future__ import annotations

import logging
import os
from typing import Any

from caffe2.python import context, core
from caffe2.python.net_builder import ops
from caffe2.python.task import Node, Task, TaskGroup, TaskOutput, WorkspaceType

__all__ = [
    "CheckpointManager",
    "Job",
    "JobRunner",
    "MultiNodeCheckpointManager",
    "UploadTaskGroupBuilder",
    "db_name",
    "epoch_limiter",
    "get_ckpt_filename",
]

_log = logging.getLogger(__name__)


@context.define_context()
class Job:
    """The task groups of a training run, and the outputs that stop its epochs."""

    def __init__(
        self,
        init_group: Any = None,
        epoch_group: Any = None,
        download_group: Any = None,
        exit_group: Any = None,
        stop_signals: list[Any] | None = None,
        nodes_to_checkpoint: list[str] | None = None,
    ):
        given = {"epoch_group": epoch_group, "download_group": download_group, "exit_group": exit_group}
        self.init_group = init_group if init_group else TaskGroup(workspace_type=WorkspaceType.GLOBAL)
        for attr, group in given.items():
            setattr(self, attr, group if group else TaskGroup())
        self.stop_signals = list(stop_signals) if stop_signals else []
        self._checkpointed = nodes_to_checkpoint

    def nodes_to_checkpoint(self) -> list[str]:
        """The nodes given, else those the init group uses."""
        return self._checkpointed or self.init_group.used_nodes()

    def compile(self, session_class: Any) -> Job:
        """This job with each group compiled for ``session_class``."""
        groups = [self.init_group, self.epoch_group, self.download_group, self.exit_group]
        compiled = [session_class.compile(g) for g in groups]
        return Job(*compiled, stop_signals=self.stop_signals, nodes_to_checkpoint=self.nodes_to_checkpoint())

    def __enter__(self) -> Job:
        TaskGroup.__enter__(self.epoch_group)
        return self

    def __exit__(self, *args: Any) -> None:
        self.epoch_group.__exit__(*args)

    def add_stop_signal(self, output: Any) -> None:
        """Stop the epochs once ``output`` (a TaskOutput, or a blob of the epoch group) is true."""
        signal = output
        if isinstance(signal, core.BlobReference):
            signal = Task(outputs=[signal], group=self.epoch_group).outputs()[0]
        if not isinstance(signal, TaskOutput):
            raise AssertionError(f"a stop signal is a TaskOutput or a BlobReference, got {type(signal).__name__}")
        self.stop_signals += [signal]


def get_ckpt_filename(node_name: str, epoch: int) -> str:
    """The checkpoint file name of a node at an epoch: ``<node>.<epoch>``."""
    return f"{node_name}.{epoch}"


def db_name(epoch: int, node_name: str, db_prefix: str, path_prefix: str | None = None) -> str:
    """Where a node's checkpoint of an epoch is saved."""
    name = get_ckpt_filename(node_name, epoch)
    return path_prefix + name if path_prefix else os.path.join(db_prefix, name)


def _names(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def _task_running(op_type: str, *args: Any, **kwargs: Any) -> Task:
    """A task of one ``op_type`` operator."""
    task = Task()
    with task:
        getattr(ops, op_type)(*args, **kwargs)
    return task


class _Metadata:
    """What both checkpoint managers do with their optional metadata handler (an object that
    records, in storage of its choice, which checkpoints exist)."""

    _db_prefix: str
    _db_type: str
    _handler: Any
    _path_prefix: str | None
    _path_type: str | None

    def write_checkpoint_metadata(self, epoch: int) -> None:
        """Record that the checkpoint of ``epoch`` was written."""
        if self._handler is not None:
            self._handler.write(epoch=epoch)

    def get_resume_from_epoch_id(self, user_epoch: int | None = None) -> int | None:
        """The epoch to resume from: ``user_epoch``, or what the metadata handler says."""
        return user_epoch if self._handler is None else self._handler.last_epoch(user_epoch=user_epoch)

    def cp_accessible(self, epoch: int | None = None) -> bool:
        """Whether the checkpoints can be reached (always, without a metadata handler)."""
        return self._handler is None or self._handler.cp_accessible(epoch)

    def _set_paths(self, node_names: list[str], path_prefix: Any, path_type: Any) -> None:
        self._path_prefix = path_prefix or self._path_prefix
        self._path_type = path_type or self._path_type
        if not self._handler:
            return
        settings = {"db_prefix": self._db_prefix, "db_type": self._db_type, "node_names": node_names}
        self._handler.set_params(**settings, path_prefix=self._path_prefix, path_type=self._path_type)


class CheckpointManager(_Metadata):
    """Saves and loads the global blobs of one node at epoch boundaries, in
    ``<db_prefix>/<node>.<epoch>`` databases of ``db_type``.

    :meth:`init` gives a task recording which blobs to keep (all blobs of the workspace after
    the job's init group, or the list saved in a checkpoint); :meth:`save` and :meth:`load` give
    tasks writing and reading them.
    """

    def __init__(self, db_prefix: str, node_name: str, db_type: str, metadata_handler: Any = None):
        self._db_prefix, self._node_name, self._db_type = db_prefix, node_name, db_type
        self._handler = metadata_handler
        self._path_prefix = self._path_type = None
        holder = core.Net("!!checkpoint_mngr")
        self._list_blob = holder.AddExternalInput("blob_names")
        self._list_output: Any = None

    def _db(self, epoch: int, path_prefix: str | None = None) -> str:
        return db_name(epoch, self._node_name, self._db_prefix, path_prefix)

    def _db_args(self, epoch: int, path_prefix: Any = None, path_type: Any = None) -> dict[str, Any]:
        return {"db": self._db(epoch, path_prefix), "db_type": path_type or self._db_type, "absolute_path": True}

    def init(
        self, nodes: Any = None, retrieve_from_epoch: int | None = None, path_prefix: Any = None, path_type: Any = None
    ) -> Task:
        """A task recording the names of the blobs to checkpoint (read from the checkpoint of
        ``retrieve_from_epoch`` when given)."""
        if nodes is not None and len(nodes) != 1:
            raise AssertionError("CheckpointManager only supports single node.")
        task = Task(outputs=[self._list_blob])
        with task:
            if retrieve_from_epoch is not None:
                where = self._db_args(retrieve_from_epoch, path_prefix, path_type)
                _log.info("Initializing checkpoints from = %s", where["db"])
                ops.Load([], self._list_blob, **where)
            else:
                ops.GetAllBlobNames([], self._list_blob, include_shared=False)
        self._list_output = task.outputs()[0]
        return task

    def blob_list(self) -> list[str]:
        """The names of the blobs checkpointed (after the :meth:`init` task ran)."""
        if not self._list_output:
            raise AssertionError("init must run first")
        return _names(self._list_output.fetch().tolist())

    def load(self, epoch: int, path_prefix: Any = None, path_type: Any = None) -> Task:
        """A task loading every checkpointed blob from the checkpoint of ``epoch``."""
        return _task_running("Load", [], self.blob_list(), **self._db_args(epoch, path_prefix, path_type))

    def load_blobs_from_checkpoint(self, blob_names: list[str], epoch: int) -> Task:
        """A task loading ``blob_names`` (those it finds) from the checkpoint of ``epoch``."""
        return _task_running("Load", [], blob_names, allow_incomplete=True, **self._db_args(epoch))

    def check_db_exists(self, epoch: int) -> Task:
        """A task whose output says whether the checkpoint of ``epoch`` exists."""
        task = Task()
        with task:
            found = ops.Const(False)
            where = self._db_args(epoch)
            ops.DBExists([], [found], db_name=where.pop("db"), **where)
            task.add_output(found)
        return task

    def save(self, epoch: int) -> Task:
        """A task saving the checkpointed blobs as the checkpoint of ``epoch``."""
        _log.info("Saving to %s", self._db(epoch))
        return _task_running("Save", self.blob_list(), [], **self._db_args(epoch))

    def set_params(self, nodes: Any, path_prefix: Any = None, path_type: Any = None) -> None:
        self._set_paths([str(self._node_name)], path_prefix, path_type)


class MultiNodeCheckpointManager(_Metadata):
    """A :class:`CheckpointManager` per node; its tasks are task groups with a task per node."""

    def __init__(self, db_prefix: str, db_type: str, metadata_handler: Any = None):
        self._db_prefix, self._db_type = db_prefix, db_type
        self._handler = metadata_handler
        self._path_prefix = self._path_type = None
        self._node_managers: list[tuple[Any, CheckpointManager]] | None = None
        self._node_names: list[str] = []

    def _make_managers(self, nodes: Any) -> bool:
        """Set up a manager per node; False when they were set up before (for the same nodes)."""
        if self._node_managers is not None:
            if [n for n, _ in self._node_managers] != list(nodes):
                raise AssertionError("the checkpoint manager was set up for other nodes")
            return False
        self._node_managers = []
        for node in nodes:
            with Node(node):
                self._node_managers.append((node, CheckpointManager(self._db_prefix, str(node), self._db_type)))
        return True

    def _per_node(self, build: Any) -> TaskGroup:
        if self._node_managers is None:
            raise AssertionError("init must be called first.")
        with TaskGroup(WorkspaceType.GLOBAL) as group:
            for node, manager in self._node_managers:
                with Node(node):
                    build(manager)
        return group

    def init(self, nodes: Any, retrieve_from_epoch: Any = None, path_prefix: Any = None, path_type: Any = None) -> Any:
        """The init tasks of every node (an empty group when already set up)."""
        if not self._make_managers(nodes):
            return TaskGroup(WorkspaceType.GLOBAL)
        return self._per_node(lambda m: m.init([m._node_name], retrieve_from_epoch, path_prefix, path_type))

    def load(self, epoch: int, path_prefix: Any = None, path_type: Any = None) -> TaskGroup:
        return self._per_node(lambda m: m.load(epoch, path_prefix, path_type))

    def load_blobs_locally(self, nodes: Any, blob_names: list[str], epoch: int, session: Any) -> bool:
        """Load ``blob_names`` from every node's checkpoint of ``epoch`` into the session's
        workspace; False (nothing more loaded) at the first node without that checkpoint."""
        self._make_managers(nodes)
        for _, manager in self._node_managers or []:
            probe = manager.check_db_exists(epoch)
            session.run(probe)
            if not probe.outputs()[0].fetch():
                _log.info("DB %s does not exist!", manager._db(epoch))
                return False
            session.run(manager.load_blobs_from_checkpoint(blob_names, epoch))
        return True

    def get_ckpt_db_name(self, node_name: str, epoch: int) -> str | None:
        """The checkpoint path of node ``node_name`` at ``epoch``."""
        found = [m for n, m in self._node_managers or [] if str(n) == node_name]
        return found[0]._db(epoch) if found else None

    def save(self, epoch: int) -> TaskGroup:
        return self._per_node(lambda m: m.save(epoch))

    def set_params(self, nodes: Any, path_prefix: Any = None, path_type: Any = None) -> None:
        self._node_names = [str(n) for n in nodes]
        self._set_paths(self._node_names, path_prefix, path_type)


class UploadTaskGroupBuilder:
    """Builds the task group that uploads the checkpoints of an epoch (subclasses implement it)."""

    def build(self, epoch: int, checkpoint_manager: Any) -> TaskGroup:
        raise NotImplementedError(f"{type(self).__name__} must define build")


class JobRunner:
    """Runs a :class:`Job` in a session: the init group (unless resuming from a checkpoint),
    then epochs until a stop signal is true, then the download and exit groups; with a
    checkpoint manager, the blobs are saved after the init group (epoch 0) and after every
    epoch (a failed save is logged and the job goes on). Calling it returns the last epoch."""

    def __init__(
        self,
        job: Job,
        checkpoint_manager: Any = None,
        resume_from_epoch: int | None = None,
        upload_task_group_builder: Any = None,
    ):
        self.job = job
        self.checkpoint_manager = checkpoint_manager
        self.resume_from_epoch = resume_from_epoch
        self.upload_task_group_builder = upload_task_group_builder

    def _start(self, session: Any) -> int:
        """Run the init group or load the checkpoint resumed from; the first epoch to run."""
        manager, nodes = self.checkpoint_manager, self.job.nodes_to_checkpoint()
        if manager:
            manager.set_params(nodes=nodes)
            self.resume_from_epoch = manager.get_resume_from_epoch_id(self.resume_from_epoch)
        resume = self.resume_from_epoch
        if resume is None:
            session.run(self.job.init_group)
        if manager:
            session.run(manager.init(nodes, retrieve_from_epoch=resume))
            if resume is None:
                self.save_checkpoints(0, session)
            else:
                _log.info("Loading checkpoints for epoch %d ...", resume)
                session.run(manager.load(resume))
        return 1 if resume is None else resume + 1

    def __call__(self, session: Any) -> int:
        epoch = self._start(session)
        while True:
            session.run(self.job.epoch_group)
            stop = any(signal.fetch() for signal in self.job.stop_signals)
            if self.checkpoint_manager:
                self.save_checkpoints(epoch, session)
            if stop:
                break
            epoch += 1
        if self.upload_task_group_builder:
            session.run(self.upload_task_group_builder.build(epoch, self.checkpoint_manager))
        for group in (self.job.download_group, self.job.exit_group):
            session.run(group)
        return epoch

    def load_blobs_from_checkpoints(self, blob_names: list[str], epoch: int, session: Any) -> bool:
        """Load ``blob_names`` from the checkpoints of ``epoch`` of every node; False when a
        node has no such checkpoint."""
        if not self.checkpoint_manager:
            raise ValueError("Checkpoint manager is None")
        return self.checkpoint_manager.load_blobs_locally(self.job.nodes_to_checkpoint(), blob_names, epoch, session)

    def save_checkpoints(self, epoch: int, session: Any) -> None:
        """Save the checkpoint of ``epoch``; a failure is logged, not raised."""
        manager = self.checkpoint_manager
        if not manager:
            raise ValueError("Checkpoint manager is None")
        try:
            if not manager.cp_accessible(epoch=None):
                _log.warning("Checkpoint files cannot be accessed!")
                return
            session.run(manager.save(epoch))
            manager.write_checkpoint_metadata(epoch)
        except Exception as exc:  # noqa: BLE001 - a lost checkpoint must not stop the training
            _log.warning("Unable to write checkpoint for epoch %d. Error=%s", epoch, exc)


def epoch_limiter(job: Job, num_epochs: int) -> None:
    """Make ``job`` stop after ``num_epochs`` epochs (a counter counted down each epoch)."""
    with job.init_group:
        setup = core.Net("epoch_counter_init")
        counter = setup.CreateCounter([], init_count=num_epochs - 1)
        Task(step=setup)
    with job.epoch_group:
        tick = core.Net("epoch_countdown")
        done = tick.CountDown(counter)
        signal = Task(step=tick, outputs=done).outputs()[0]
    job.add_stop_signal(signal)
