"""The reference's data-parallel helpers, done right.

- :func:`partition_indices`: round-robin shard of a dataset for one rank;
- :func:`average_gradients`: mean of named buffers over workers, summed in worker order;
- :func:`sgd_step`: ``w -= lr * g`` in place, names without a weight skipped;
- :class:`SharedGradientStore`: ``push(rank, grads)`` then ``all_reduce_mean(rank)``, a reusable
  barrier with a timeout (built on :class:`ThreadedGradientSync`);
- :class:`DataParallelModel`: one replica of the weights per rank, kept identical by a real
  ``broadcast_weights`` and by applying the same averaged step everywhere (every gradient,
  biases included, is synced);
- :class:`DistributedConfig`, :class:`GradientStrategy`, :class:`CommBackend`: plain settings.

    >>> import numpy as np
    >>> partition_indices(10, 3, 1)
    [1, 4, 7]
    >>> average_gradients([{"w": np.array([2.0, 4.0])}, {"w": np.array([4.0, 8.0])}])["w"]
    array([3., 6.])
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from asyncnet.errors import SyncMismatchError
from asyncnet.sync.base import GradientSync, LocalGradientSync
from asyncnet.sync.threaded import ThreadedGradientSync

__all__ = [
    "partition_indices",
    "average_gradients",
    "sgd_step",
    "SharedGradientStore",
    "DataParallelModel",
    "DistributedConfig",
    "GradientStrategy",
    "CommBackend",
]


def _check_rank(rank: int, world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


def partition_indices(total: int, world_size: int, rank: int) -> list[int]:
    """Indices ``rank, rank + world_size, ...`` below ``total``: a round-robin shard.

        >>> partition_indices(7, 2, 0)
        [0, 2, 4, 6]
    """
    _check_rank(rank, world_size)
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be an int >= 0, got {total!r}")
    return list(range(rank, total, world_size))


def average_gradients(per_worker: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The mean of each named buffer over the workers (summed in worker order).

    Every worker must have the same names with the same shapes; otherwise a
    ``SyncMismatchError`` names each worker's buffers. Inputs are not modified.
    """
    if len(per_worker) == 0:
        raise ValueError("average_gradients needs at least one worker's gradients")
    layouts = [{k: np.shape(v) for k, v in g.items()} for g in per_worker]
    if any(lay != layouts[0] for lay in layouts[1:]):
        desc = "; ".join(f"worker {i}: {lay}" for i, lay in enumerate(layouts))
        raise SyncMismatchError(f"workers have different gradient buffers: {desc}")
    out = {}
    for name in per_worker[0]:
        acc = np.array(per_worker[0][name], dtype=np.result_type(per_worker[0][name], np.float32), copy=True)
        for g in per_worker[1:]:
            acc += g[name]
        acc /= len(per_worker)
        out[name] = acc
    return out


def sgd_step(weights: Mapping[str, np.ndarray], grads: Mapping[str, Any], lr: float) -> list[str]:
    """``weights[name] -= lr * grads[name]`` in place; returns the names updated.

    Gradients whose name has no weight are skipped (the reference's rule); a shape mismatch is a
    ``ValueError``.
    """
    updated = []
    for name, g in grads.items():
        w = weights.get(name)
        if w is None:
            continue
        if np.shape(w) != np.shape(g):
            raise ValueError(f"sgd_step: weight {name!r} has shape {np.shape(w)}, gradient {np.shape(g)}")
        w -= lr * np.asarray(g, dtype=w.dtype)
        updated.append(name)
    return updated


class SharedGradientStore:
    """Ranks in threads ``push`` named gradients, then each calls ``all_reduce_mean``.

    ``all_reduce_mean(rank)`` blocks until every rank pushed in this round (at most ``timeout``
    seconds), returns the mean dict (the same bits on every rank), and clears the rank's slot, so
    the store is ready for the next round.

        >>> import threading, numpy as np
        >>> store = SharedGradientStore(2, timeout=5)
        >>> out = [None, None]
        >>> def rank(r):
        ...     store.push(r, {"w": np.array([2.0 + 2 * r])})
        ...     out[r] = store.all_reduce_mean(r)["w"]
        >>> ts = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        >>> for t in ts: t.start()
        >>> for t in ts: t.join()
        >>> out
        [array([3.]), array([3.])]
    """

    def __init__(self, world_size: int, timeout: float | None = None):
        self._syncs = ThreadedGradientSync.new_workers(world_size, timeout)
        self._pending: list[dict[str, np.ndarray] | None] = [None] * world_size

    @property
    def world_size(self) -> int:
        return len(self._syncs)

    def push(self, rank: int, grads: Mapping[str, Any]) -> None:
        """Store a copy of ``rank``'s gradients for the next ``all_reduce_mean``."""
        _check_rank(rank, self.world_size)
        self._pending[rank] = {k: np.array(v, dtype=np.result_type(v, np.float32), copy=True) for k, v in grads.items()}

    def all_reduce_mean(self, rank: int) -> dict[str, np.ndarray]:
        """Wait for every rank's push, return the mean of each buffer, clear this rank's slot."""
        _check_rank(rank, self.world_size)
        mine = self._pending[rank]
        if mine is None:
            raise RuntimeError(f"rank {rank} called all_reduce_mean without push")
        self._pending[rank] = None
        names = sorted(mine)
        arrays = [mine[k] for k in names]
        # The names join the layout check, so ranks pushing different names get a SyncMismatchError.
        self._syncs[rank]._collective(arrays, "mean", 0, label=f"names={names}")
        return dict(zip(names, arrays))


class DataParallelModel:
    """One rank's replica of a model's weights, synced through a :class:`GradientSync`.

    Ranks start from the same weights by :meth:`broadcast_weights` (a real broadcast from
    ``root``), then :meth:`step` averages every gradient over the ranks and applies the same SGD
    step to each replica, so replicas stay bit-identical. With ``sync=None`` (or a
    :class:`LocalGradientSync`) it is a plain single-rank model that never blocks.

        >>> import numpy as np
        >>> m = DataParallelModel({"w": np.ones(2)})
        >>> _ = m.step({"w": np.array([1.0, 2.0])}, lr=0.5)
        >>> m.weights["w"]
        array([0.5, 0. ])
    """

    def __init__(self, weights: Mapping[str, np.ndarray], sync: GradientSync | None = None):
        self.sync: GradientSync = sync if sync is not None else LocalGradientSync()
        self.weights = {k: np.array(v, copy=True) for k, v in weights.items()}
        self._names = sorted(self.weights)

    @property
    def rank(self) -> int:
        return self.sync.worker_id

    @property
    def world_size(self) -> int:
        return self.sync.num_workers

    def broadcast_weights(self, root: int = 0) -> None:
        """Copy rank ``root``'s weights into every replica (every rank must call it)."""
        self.sync.broadcast([self.weights[k] for k in self._names], root=root)

    def step(self, grads: Mapping[str, Any], lr: float) -> dict[str, np.ndarray]:
        """Average ``grads`` (every weight's gradient) over the ranks, then apply ``w -= lr * g``."""
        if sorted(grads) != self._names:
            raise ValueError(f"step needs a gradient for every weight {self._names}, got {sorted(grads)}")
        synced = [np.array(grads[k], dtype=self.weights[k].dtype, copy=True) for k in self._names]
        self.sync.sync_gradients(synced)
        avg = dict(zip(self._names, synced))
        sgd_step(self.weights, avg, lr)
        return avg


class GradientStrategy(enum.Enum):
    """How gradients are combined: all-reduce (everyone gets the mean), to the root only, or not at all."""

    ALL_REDUCE = "all_reduce"
    REDUCE_TO_ROOT = "reduce_to_root"
    NO_SYNC = "no_sync"


class CommBackend(enum.Enum):
    """Where workers live: in this machine (threads or processes), or torch.distributed."""

    IN_PROCESS = "in_process"
    EXTERNAL = "external"


@dataclass(frozen=True)
class DistributedConfig:
    """Settings of a data-parallel run, validated on creation.

        >>> DistributedConfig(world_size=4, rank=1).is_distributed
        True
    """

    world_size: int = 1
    rank: int = 0
    strategy: GradientStrategy = GradientStrategy.ALL_REDUCE
    backend: CommBackend = CommBackend.IN_PROCESS
    timeout: float | None = None
    bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        _check_rank(self.rank, self.world_size)
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 or None, got {self.timeout!r}")
        if not self.bucket_mb > 0:
            raise ValueError(f"bucket_mb must be > 0, got {self.bucket_mb!r}")
        if not isinstance(self.strategy, GradientStrategy):
            object.__setattr__(self, "strategy", GradientStrategy(self.strategy))
        if not isinstance(self.backend, CommBackend):
            object.__setattr__(self, "backend", CommBackend(self.backend))

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, **overrides: Any) -> "DistributedConfig":
        """Read ``WORLD_SIZE`` and ``RANK`` as ``torchrun`` sets them (external backend when > 1)."""
        ws = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        kw: dict[str, Any] = {"world_size": ws, "rank": rank}
        if ws > 1:
            kw["backend"] = CommBackend.EXTERNAL
        kw.update(overrides)
        return cls(**kw)
