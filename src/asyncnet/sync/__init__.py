"""Gradient synchronization for data-parallel training.

One protocol, :class:`GradientSync` (``sync_gradients(grads)`` replaces ``grads`` in place with
the mean over the workers; ``broadcast(tensors, root)``), and four backends:

- :class:`LocalGradientSync`: one worker, the identity;
- :class:`ThreadedGradientSync`: threads of one process, a parallel in-place all-reduce;
- :class:`ProcessGradientSync`: spawned processes exchanging gradients through shared memory;
- :class:`TorchDistributedGradientSync`: an initialized ``torch.distributed`` process group
  (gloo on CPU, nccl on CUDA), bucketed.

:func:`run_parallel_workers` runs one function per worker with the threaded or the process
backend and joins everything before it returns or raises. This package imports nothing from
``asyncnet.core``; torch is imported only by the torch backend, when it is used.
"""

from asyncnet.errors import SyncAbortedError, SyncError, SyncMismatchError, SyncTimeoutError
from asyncnet.sync.base import GradientSync, LocalGradientSync
from asyncnet.sync.helpers import (
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
from asyncnet.sync.process import ProcessGradientSync, WorkerDiedError
from asyncnet.sync.runner import run_parallel_workers
from asyncnet.sync.threaded import ThreadedGradientSync
from asyncnet.sync.torch_dist import TorchDistributedGradientSync

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
