"""Gradient synchronization for data-parallel training.

One protocol, :class:`GradientSync` (``sync_gradients(grads)`` replaces ``grads`` in place with
the mean over the workers; ``broadcast(tensors, root)``), and four backends:

- :class:`LocalGradientSync`: one worker, the identity;
- :class:`ThreadedGradientSync`: threads of one process, a parallel in-place all-reduce;
- :class:`ProcessGradientSync`: spawned processes exchanging gradients through shared memory;
- :class:`TorchDistributedGradientSync`: an initialized ``torch.distributed`` process group
  (gloo on CPU, nccl on CUDA), bucketed.

:func:`run_parallel_workers` (:mod:`asyncnet.sync.launch`, with the supervisor of worker
processes) runs one function per worker with the threaded or the process backend and joins
everything before it returns or raises. This package imports nothing from ``asyncnet.core``;
the backends load on first use, torch only by the torch backend. kizzasi's helpers
(:mod:`asyncnet.compat.kizzasi`: ``partition_indices``, ``DataParallelModel``, ...) are
importable from here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asyncnet.errors import SyncAbortedError, SyncError, SyncMismatchError, SyncTimeoutError
from asyncnet.sync.base import GradientSync, LocalGradientSync

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and the API docs
    from asyncnet.compat.kizzasi import (
        CheckpointManager,
        CheckpointMetadata,
        CommBackend,
        DataParallelModel,
        DistributedConfig,
        GradientStrategy,
        SharedGradientStore,
        average_gradients,
        partition_indices,
        sgd_step,
    )
    from asyncnet.sync.launch import run_parallel_workers
    from asyncnet.sync.process import ProcessGradientSync, WorkerDiedError
    from asyncnet.sync.threaded import ThreadedGradientSync
    from asyncnet.sync.torch_dist import TorchDistributedGradientSync

# Loaded on first use (``from asyncnet.sync import X`` works as for any name): the backends pull
# in multiprocessing and shared memory, which ``import asyncnet`` does not need. kizzasi's helpers
# live in asyncnet.compat.kizzasi and are served here under the names users import.
_LAZY = {
    "ThreadedGradientSync": "asyncnet.sync.threaded",
    "ProcessGradientSync": "asyncnet.sync.process",
    "WorkerDiedError": "asyncnet.sync.process",
    "TorchDistributedGradientSync": "asyncnet.sync.torch_dist",
    "run_parallel_workers": "asyncnet.sync.launch",
    **{
        name: "asyncnet.compat.kizzasi"
        for name in (
            "partition_indices",
            "average_gradients",
            "sgd_step",
            "SharedGradientStore",
            "DataParallelModel",
            "DistributedConfig",
            "GradientStrategy",
            "CommBackend",
            "CheckpointManager",
            "CheckpointMetadata",
        )
    },
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'asyncnet.sync' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "GradientSync",
    "LocalGradientSync",
    "ThreadedGradientSync",
    "ProcessGradientSync",
    "TorchDistributedGradientSync",
    "run_parallel_workers",
    "partition_indices",
    "average_gradients",
    "sgd_step",
    "SharedGradientStore",
    "DataParallelModel",
    "DistributedConfig",
    "GradientStrategy",
    "CommBackend",
    "CheckpointManager",
    "CheckpointMetadata",
    "SyncError",
    "SyncMismatchError",
    "SyncTimeoutError",
    "SyncAbortedError",
    "WorkerDiedError",
]
