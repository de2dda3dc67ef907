"""The reference's data-parallel helpers, done right.

- :func:`partition_indices`: round-robin shard of a dataset for one rank;
- :func:`average_gradients`: mean of named buffers over workers, summed in worker order;
- :func:`sgd_step`: ``w -= lr * g`` in place, names without a weight skipped;
- :class:`SharedGradientStore`: ``push(rank, grads)`` then ``all_reduce_mean(rank)``, returning
  as soon as every rank has pushed (one thread may push for several), self-draining, with
  ``clear()``, a timeout and ``abort()``;
- :class:`DataParallelModel`: one replica of the weights per rank, kept identical by a real
  ``broadcast_weights`` and by applying the same averaged step everywhere (every gradient,
  biases included, is synced);
- :class:`DistributedConfig`, :class:`GradientStrategy`, :class:`CommBackend`: plain settings;
- :class:`CheckpointManager`: kizzasi's weight + bias checkpoints (npz, crash-safe, last K kept).

    >>> import numpy as np
    >>> partition_indices(10, 3, 1)
    [1, 4, 7]
    >>> average_gradients([{"w": np.array([2.0, 4.0])}, {"w": np.array([4.0, 8.0])}])["w"]
    array([3., 6.])
"""

from __future__ import annotations

import enum
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from asyncnet._atomicio import atomic_write_npz
from asyncnet.errors import CheckpointError, SyncAbortedError, SyncError, SyncMismatchError, SyncTimeoutError
from asyncnet.sync.base import GradientSync, LocalGradientSync

__all__ = [
    "partition_indices",
    "average_gradients",
    "sgd_step",
    "SharedGradientStore",
    "DataParallelModel",
    "DistributedConfig",
    "GradientStrategy",
    "CommBackend",
    "CheckpointManager",
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
    """kizzasi's gradient store: ranks ``push`` named gradients, then ``all_reduce_mean``.

    ``all_reduce_mean(rank)`` returns as soon as every rank has pushed this round (at once if
    they already have, so one thread may push for several ranks), with the mean of each buffer
    summed in rank order (the same bits for every caller); a rank that has not pushed this round
    gets kizzasi's "not all ranks have submitted" :class:`~asyncnet.SyncError` at once (its own
    gradients are missing: waiting could only end in the timeout). The round drains itself once every
    rank has read the mean; :meth:`clear` resets it by hand (kizzasi's escape hatch, and what
    a single thread pushing for every rank calls after its step). A rank pushing again before
    its previous round drained waits. Waits end after ``timeout`` seconds
    (:class:`~asyncnet.SyncTimeoutError` naming the ranks not pushed) or at :meth:`abort`.

        >>> import numpy as np
        >>> store = SharedGradientStore(2, timeout=5)
        >>> store.push(0, {"w": np.array([2.0])}); store.push(1, {"w": np.array([4.0])})
        >>> store.all_reduce_mean(0)["w"]
        array([3.])
        >>> store.clear()
    """

    def __init__(self, world_size: int, timeout: float | None = None):
        _check_rank(0, world_size)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        self._n = world_size
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: list[dict[str, np.ndarray] | None] = [None] * world_size
        self._result: dict[str, np.ndarray] | SyncError | None = None
        self._departed: set[int] = set()
        self._aborted: str | None = None

    @property
    def world_size(self) -> int:
        return self._n

    def push(self, rank: int, grads: Mapping[str, Any]) -> None:
        """Store a copy of ``rank``'s gradients for this round (waits while its previous round drains)."""
        _check_rank(rank, self._n)
        copy = {k: np.array(v, dtype=np.result_type(v, np.float32), copy=True) for k, v in grads.items()}
        with self._cond:
            self._wait(lambda: self._slots[rank] is None, f"rank {rank} push: its previous round has not drained",
                       lambda: sorted(set(range(self._n)) - self._departed))
            self._slots[rank] = copy
            self._cond.notify_all()

    def all_reduce_mean(self, rank: int) -> dict[str, np.ndarray]:
        """The mean of each buffer over the ranks, once every rank has pushed this round."""
        _check_rank(rank, self._n)
        with self._cond:
            if self._result is None and self._slots[rank] is None:  # kizzasi's error, not a wait nobody can end
                missing = [r for r, s in enumerate(self._slots) if s is None]
                raise SyncError(f"rank {rank} all_reduce_mean: not all ranks have submitted gradients (ranks {missing} "
                                f"have not pushed this round, rank {rank} among them)")
            self._wait(lambda: self._result is not None or all(s is not None for s in self._slots),
                       f"rank {rank} all_reduce_mean", lambda: [r for r, s in enumerate(self._slots) if s is None])
            if self._result is None:
                self._result = _mean_of(self._slots)
            result = self._result
            self._departed.add(rank)
            if len(self._departed) == self._n:
                self._reset()
        if isinstance(result, SyncError):
            raise type(result)(str(result))
        return {k: v.copy() for k, v in result.items()}

    def clear(self) -> None:
        """Forget every pushed gradient and the current mean: the next round starts clean."""
        with self._cond:
            self._reset()

    def abort(self, reason: str = "aborted") -> None:
        """Wake every waiting call with :class:`~asyncnet.SyncAbortedError` (and every later one)."""
        with self._cond:
            self._aborted = reason
            self._cond.notify_all()

    def _reset(self) -> None:
        self._slots = [None] * self._n
        self._result = None
        self._departed = set()
        self._cond.notify_all()

    def _wait(self, ready: Callable[[], bool], what: str, missing: Callable[[], list[int]]) -> None:
        """Wait (holding the condition) until ``ready()``, the timeout, or an abort."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while not ready():
            if self._aborted is not None:
                raise SyncAbortedError(f"{what}: the store was aborted ({self._aborted})")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                gone = missing()
                raise SyncTimeoutError(f"{what}: ranks {gone} did not push within {self.timeout} s", gone)
            self._cond.wait(left)
        if self._aborted is not None:
            raise SyncAbortedError(f"{what}: the store was aborted ({self._aborted})")


def _mean_of(slots: Sequence[Mapping[str, np.ndarray] | None]) -> dict[str, np.ndarray] | SyncError:
    """The rank-order mean of every rank's buffers, or the mismatch every rank will see."""
    try:
        return average_gradients([s for s in slots if s is not None])
    except SyncMismatchError as e:
        return e


class DataParallelModel:
    """One rank's replica of a model's weights, synced through a :class:`GradientSync`.

    Ranks start from the same weights by :meth:`broadcast_weights` (a real broadcast from
    ``root``), then :meth:`step` averages every gradient over the ranks and applies the same SGD
    step to each replica, so replicas stay bit-identical. With ``sync=None`` (or a
    :class:`LocalGradientSync`) it is a plain single-rank model that never blocks.

    kizzasi's form ``DataParallelModel(weights, DistributedConfig(...))`` is accepted: world size
    1 (or ``NO_SYNC``) gives a local model; a larger world size needs the rank's sync handle
    (``config=`` plus ``sync=``), because a model built from the settings alone cannot reach its
    peers (kizzasi's blocks forever in ``step``; ours refuses at construction).

        >>> import numpy as np
        >>> m = DataParallelModel({"w": np.ones(2)})
        >>> _ = m.step({"w": np.array([1.0, 2.0])}, lr=0.5)
        >>> m.weights["w"]
        array([0.5, 0. ])
    """

    def __init__(self, weights: Mapping[str, np.ndarray], sync: "GradientSync | DistributedConfig | None" = None,
                 config: "DistributedConfig | None" = None):
        if isinstance(sync, DistributedConfig):
            if config is not None:
                raise ValueError("DataParallelModel: a DistributedConfig given twice (positionally and as config=)")
            sync, config = None, sync
        self.config = config
        self.sync: GradientSync = _sync_for(sync, config)
        self._no_sync = config is not None and config.strategy is GradientStrategy.NO_SYNC
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
        if not self._no_sync:
            self.sync.sync_gradients(synced)
        avg = dict(zip(self._names, synced))
        sgd_step(self.weights, avg, lr)
        return avg


def _sync_for(sync: GradientSync | None, config: "DistributedConfig | None") -> GradientSync:
    """The sync handle a DataParallelModel uses, checked against ``config`` (kizzasi's meaning)."""
    if config is None:
        return sync if sync is not None else LocalGradientSync()
    if config.strategy is GradientStrategy.REDUCE_TO_ROOT:
        raise ValueError("DataParallelModel: strategy REDUCE_TO_ROOT would leave the replicas different; "
                         "expected ALL_REDUCE or NO_SYNC")
    if sync is None:
        if config.world_size > 1 and config.strategy is GradientStrategy.ALL_REDUCE:
            raise SyncError(f"DataParallelModel: DistributedConfig(world_size={config.world_size}, rank={config.rank}) "
                            "needs this rank's sync handle (sync=ThreadedGradientSync.new_workers(n)[rank], or a "
                            "process or torch handle); the settings alone cannot reach the other ranks")
        return LocalGradientSync()
    if (sync.num_workers, sync.worker_id) != (config.world_size, config.rank):
        raise SyncMismatchError(f"DataParallelModel: config says world_size={config.world_size}, rank={config.rank}; "
                                f"the sync handle is worker {sync.worker_id} of {sync.num_workers}")
    return sync


class GradientStrategy(enum.Enum):
    """How gradients are combined: all-reduce (everyone gets the mean), to the root only, or not at all."""

    ALL_REDUCE = "all_reduce"
    REDUCE_TO_ROOT = "reduce_to_root"
    NO_SYNC = "no_sync"
    AllReduce = "all_reduce"  # kizzasi's names, aliases of the members above
    ReduceToRoot = "reduce_to_root"
    NoSync = "no_sync"


class CommBackend(enum.Enum):
    """Where workers live: in this machine (threads or processes), or torch.distributed."""

    IN_PROCESS = "in_process"
    EXTERNAL = "external"
    InProcess = "in_process"  # kizzasi's names, aliases of the members above
    External = "external"


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

    @property
    def grad_strategy(self) -> GradientStrategy:
        """kizzasi's name of :attr:`strategy`."""
        return self.strategy

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


class CheckpointManager:
    """kizzasi's CheckpointManager for a weight vector and a bias: npz files in one folder.

    ``save_weights(weights, bias, step)`` writes ``weights_step_<step>.npz`` crash-safely and
    returns its path, keeping the newest ``max_checkpoints`` files (kizzasi's default 5) by
    step; ``load_weights(path)`` gives ``(weights, bias)`` back; :meth:`latest` and
    :meth:`load_latest` find the newest. Files are plain npz, read without pickle.

        >>> import numpy as np, tempfile
        >>> manager = CheckpointManager(tempfile.mkdtemp(), max_checkpoints=2)
        >>> path = manager.save_weights(np.array([1.0, 2.0], np.float32), 0.42, step=100)
        >>> weights, bias = CheckpointManager.load_weights(path)
        >>> weights, round(bias, 6), manager.latest() == path
        (array([1., 2.], dtype=float32), 0.42, True)
    """

    _NAME = re.compile(r"^weights_step_(\d+)\.npz$")

    def __init__(self, checkpoint_dir: str | os.PathLike[str], max_checkpoints: int = 5):
        if isinstance(max_checkpoints, bool) or not isinstance(max_checkpoints, int) or max_checkpoints < 1:
            raise ValueError(f"max_checkpoints must be an int >= 1, got {max_checkpoints!r}")
        self.checkpoint_dir = os.fspath(checkpoint_dir)
        self.max_checkpoints = max_checkpoints

    def checkpoint_path(self, step: int) -> str:
        """Where the checkpoint of ``step`` goes."""
        return os.path.join(self.checkpoint_dir, f"weights_step_{step:010d}.npz")

    def save_weights(self, weights: Any, bias: Any, step: int) -> str:
        """Write ``weights`` (an array) and ``bias`` (a scalar or array) for ``step``; returns the path."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        w = np.asarray(weights)
        b = np.asarray(bias)
        for name, a in (("weights", w), ("bias", b)):
            if a.dtype.kind not in "biuf":
                raise CheckpointError(f"save_weights: expected numeric {name}, got dtype {a.dtype}")
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = atomic_write_npz(self.checkpoint_path(int(step)), {"weights": w, "bias": b, "step": np.asarray(int(step), np.int64)})
        for old in self.checkpoints()[:-self.max_checkpoints]:
            os.remove(old)
        return path

    @staticmethod
    def load_weights(path: str | os.PathLike[str]) -> tuple[np.ndarray, Any]:
        """``(weights, bias)`` from a file :meth:`save_weights` wrote (a 0-d bias comes back as a float)."""
        data = _read_checkpoint(path)
        bias = data["bias"]
        return data["weights"], (bias.item() if bias.ndim == 0 else bias)

    def checkpoints(self) -> list[str]:
        """Paths of the checkpoints in the folder, oldest step first."""
        try:
            names = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return []
        found = sorted((int(m.group(1)), n) for n in names if (m := self._NAME.match(n)))
        return [os.path.join(self.checkpoint_dir, n) for _, n in found]

    def latest(self) -> str | None:
        """The newest checkpoint's path, or None when there is none."""
        paths = self.checkpoints()
        return paths[-1] if paths else None

    def load_latest(self) -> tuple[np.ndarray, Any, int]:
        """``(weights, bias, step)`` of the newest checkpoint; :class:`~asyncnet.CheckpointError` if none."""
        path = self.latest()
        if path is None:
            raise CheckpointError(f"no checkpoint (weights_step_*.npz) in {self.checkpoint_dir!r}")
        weights, bias = self.load_weights(path)
        return weights, bias, int(_read_checkpoint(path)["step"])


def _read_checkpoint(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    try:
        with np.load(os.fspath(path), allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {os.fspath(path)!r} does not exist") from None
    except (OSError, ValueError, EOFError) as e:  # not an npz, truncated, or an object array
        raise CheckpointError(f"checkpoint {os.fspath(path)!r} is not a readable npz file: {e}") from None
    missing = {"weights", "bias", "step"} - set(data)
    if missing:
        raise CheckpointError(f"checkpoint {os.fspath(path)!r} lacks {sorted(missing)}; expected weights, bias and step")
    return data
