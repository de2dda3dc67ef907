"""Caffe2's ``caffe2.python.checkpoint``: the :class:`Job`, a training run as task groups.

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

import os
from typing import Any

from caffe2.python import context, core
from caffe2.python.task import Task, TaskGroup, TaskOutput, WorkspaceType

__all__ = ["Job", "db_name", "get_ckpt_filename"]


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
