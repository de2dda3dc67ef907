"""``TorchDistributedGradientSync``: gradient sync over an initialized torch.distributed group.

This is how asyncnet runs past one machine: under ``torchrun`` (or any launcher that calls
``torch.distributed.init_process_group``), gloo on CPU, nccl on CUDA. A call flattens the
tensors into buckets of at most ``bucket_mb`` MiB (25 by default, as DDP), all-reduces each
bucket with SUM, divides by the world size and copies the result back. A single contiguous
tensor is reduced in place, with no copy.

Before reducing, the ranks compare a fingerprint of their layouts with one tiny all-reduce (MAX
of ``d`` and of ``-d``); if they differ, every rank gathers every rank's shapes and raises the
same :class:`~asyncnet.errors.SyncMismatchError` naming each rank's shapes, instead of hanging
or returning wrong values. ``check="first"`` does this only on the first call.

    # torchrun --nproc-per-node 2 train.py
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    sync = TorchDistributedGradientSync()
    grads = [p.grad for p in model.parameters()]
    sync.sync_gradients(grads)

Timeouts are torch's: pass ``timeout=`` to ``init_process_group``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet._flatviews import contiguous_run
from asyncnet.errors import SyncError, SyncMismatchError
from asyncnet.sync._bucket import as_list, format_layout, is_torch_tensor

__all__ = ["TorchDistributedGradientSync"]

DEFAULT_BUCKET_MB = 25.0


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("TorchDistributedGradientSync needs torch: pip install 'asyncnet[torch]'") from exc
    return torch, dist


class TorchDistributedGradientSync:
    """One rank's handle on a torch.distributed process group (the default group if None)."""

    #: a list is reduced as one flat buffer: gradients that are consecutive views of one
    #: buffer (``AllreduceStart(bucket_view=1)``) save its concatenation and copy back
    flattens_buckets = True

    def __init__(self, group: Any = None, bucket_mb: float = DEFAULT_BUCKET_MB, check: str = "always"):
        torch, dist = _torch()
        if not (dist.is_available() and dist.is_initialized()):
            raise SyncError(
                "torch.distributed is not initialized: call torch.distributed.init_process_group "
                "(or run under torchrun) before creating TorchDistributedGradientSync"
            )
        if not bucket_mb > 0:
            raise ValueError(f"bucket_mb must be > 0, got {bucket_mb!r}")
        if check not in ("always", "first", "never"):
            raise ValueError(f"check must be 'always', 'first' or 'never', got {check!r}")
        self._group = group
        self._rank = dist.get_rank(group)
        self._ws = dist.get_world_size(group)
        self._bucket_bytes = int(bucket_mb * 2**20)
        self._check = check
        self._checked = False
        self._calls = 0

    @property
    def is_distributed(self) -> bool:
        return self._ws > 1

    @property
    def num_workers(self) -> int:
        return self._ws

    @property
    def worker_id(self) -> int:
        return self._rank

    @property
    def bucket_bytes(self) -> int:
        return self._bucket_bytes

    def sync_gradients(self, grads: Any) -> None:
        """Replace ``grads`` (tensor, numpy array, or a list) in place with the mean over ranks."""
        tensors = self._tensors(grads)
        self._check_layout(tensors, "mean")
        self._calls += 1
        if self._ws == 1:
            return
        _, dist = _torch()
        for flat, bucket in self._flats(grads, tensors):
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self._group)
            flat.div_(self._ws)
            _copy_back(flat, bucket)

    def start_sync_gradients(self, grads: Any) -> TorchSyncWork:
        """Start :meth:`sync_gradients` with ``async_op=True``: one all-reduce per bucket is in
        flight when this returns; the work's ``wait(timeout)`` divides by the world size and
        copies flattened buckets back, giving the same bits as :meth:`sync_gradients`. Calls
        must start in the same order on every rank (the layout check still blocks)."""
        tensors = self._tensors(grads)
        self._check_layout(tensors, "mean")
        self._calls += 1
        if self._ws == 1:
            return TorchSyncWork([], self._ws, self._rank)
        _, dist = _torch()
        pending = []
        for flat, bucket in self._flats(grads, tensors):
            work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self._group, async_op=True)
            pending.append((work, flat, bucket))
        return TorchSyncWork(pending, self._ws, self._rank)

    def broadcast(self, tensors: Any, root: int = 0) -> None:
        """Overwrite ``tensors`` on every rank with rank ``root``'s values."""
        if not 0 <= root < self._ws:
            raise ValueError(f"root must be in [0, {self._ws}), got {root}")
        ts = self._tensors(tensors)
        self._check_layout(ts, f"broadcast:{root}")
        self._calls += 1
        if self._ws == 1:
            return
        _, dist = _torch()
        src = root if self._group is None else dist.get_global_rank(self._group, root)
        for bucket in self._buckets(ts):
            self._apply(bucket, lambda flat: dist.broadcast(flat, src=src, group=self._group))

    def barrier(self) -> None:
        """``torch.distributed.barrier`` of the group."""
        if self._ws > 1:
            _, dist = _torch()
            dist.barrier(group=self._group)

    def all_reduce_mean(self, values: Any) -> None:
        """Replace the figures ``values`` (numpy or torch) in place with their mean over ranks."""
        self.sync_gradients(values)

    # -- internals ------------------------------------------------------------------------------

    def _tensors(self, grads: Any) -> list[Any]:
        torch, _ = _torch()
        out = []
        for i, g in enumerate(as_list(grads)):
            if isinstance(g, np.ndarray):
                g = torch.from_numpy(g)
            elif not is_torch_tensor(g):
                raise TypeError(f"gradient {i}: expected a torch tensor or numpy array, got {type(g).__name__}")
            if not g.is_floating_point():
                raise TypeError(f"gradient {i}: expected a floating-point dtype, got {g.dtype}")
            out.append(g.detach())
        return out

    def _check_layout(self, tensors: list[Any], op: str) -> None:
        if self._ws == 1 or self._check == "never" or (self._check == "first" and self._checked):
            return
        torch, dist = _torch()
        layout = tuple((str(t.dtype).replace("torch.", ""), tuple(t.shape)) for t in tensors)
        key = repr((op, layout))
        import hashlib

        d = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 2
        device = tensors[0].device if tensors and self._backend_needs_device() else torch.device("cpu")
        probe = torch.tensor([d, -d], dtype=torch.int64, device=device)
        dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=self._group)
        self._checked = True
        if int(probe[0]) == -int(probe[1]):
            return
        layouts: list[Any] = [None] * self._ws
        dist.all_gather_object(layouts, (op, format_layout(layout)), group=self._group)
        desc = "; ".join(f"rank {r}: {lay} ({o})" for r, (o, lay) in enumerate(layouts))
        raise SyncMismatchError(
            f"call {self._calls}: ranks passed different gradients; {desc}. No gradient was changed."
        )

    def _backend_needs_device(self) -> bool:
        _, dist = _torch()
        return dist.get_backend(self._group) == "nccl"

    def _buckets(self, tensors: list[Any]) -> list[list[Any]]:
        """Consecutive tensors of one dtype and device, at most ``bucket_bytes`` per bucket."""
        buckets: list[list[Any]] = []
        size = 0
        for t in tensors:
            nbytes = t.numel() * t.element_size()
            last = buckets[-1] if buckets else None
            if (
                last is None
                or last[0].dtype != t.dtype
                or last[0].device != t.device
                or size + nbytes > self._bucket_bytes
            ):
                buckets.append([t])
                size = nbytes
            else:
                last.append(t)
                size += nbytes
        return buckets

    def _flats(self, grads: Any, tensors: list[Any]) -> list[tuple[Any, list[Any]]]:
        """(flat tensor, its tensors) per bucket. Gradients that are consecutive views of one
        buffer (a gradient bucket's, DDP's gradient_as_bucket_view) and form one bucket are
        reduced as that buffer: no concatenation, no copy back."""
        torch, _ = _torch()
        if len(tensors) > 1 and sum(t.numel() * t.element_size() for t in tensors) <= self._bucket_bytes:
            run = contiguous_run(as_list(grads))
            if run is not None:
                return [(torch.from_numpy(run), tensors)]
        return [(self._flat(b), b) for b in self._buckets(tensors)]

    @staticmethod
    def _flat(bucket: list[Any]) -> Any:
        """The bucket as one 1-D tensor: the tensor itself when it is alone and contiguous."""
        torch, _ = _torch()
        if len(bucket) == 1 and bucket[0].is_contiguous():
            return bucket[0].view(-1)
        return torch.cat([t.reshape(-1) for t in bucket])

    @staticmethod
    def _apply(bucket: list[Any], collective: Any) -> None:
        torch, _ = _torch()
        if len(bucket) == 1 and bucket[0].is_contiguous():
            collective(bucket[0].view(-1))
            return
        flat = torch.cat([t.reshape(-1) for t in bucket])
        collective(flat)
        offset = 0
        for t in bucket:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n

    def __repr__(self) -> str:
        return (
            f"TorchDistributedGradientSync(rank={self._rank}, world_size={self._ws}, bucket_bytes={self._bucket_bytes})"
        )


def _copy_back(flat: Any, bucket: list[Any]) -> None:
    if flat.data_ptr() == bucket[0].data_ptr() and (len(bucket) == 1 or flat.numel() == sum(t.numel() for t in bucket)):
        return  # reduced in place: the tensor itself, or the buffer the bucket's tensors are views of
    offset = 0
    for t in bucket:
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n


class TorchSyncWork:
    """The all-reduces one :meth:`TorchDistributedGradientSync.start_sync_gradients` started."""

    def __init__(self, pending: list[tuple[Any, Any, list[Any]]], world_size: int, rank: int):
        self._pending = pending
        self._ws = world_size
        self._rank = rank

    def wait(self, timeout: float | None = None) -> None:
        """Wait for every bucket (at most ``timeout`` s each), then finish the mean in place."""
        import datetime

        while self._pending:
            work, flat, bucket = self._pending[0]
            try:
                ok = work.wait() if timeout is None else work.wait(timeout=datetime.timedelta(seconds=timeout))
            except RuntimeError as e:
                raise SyncError(f"rank {self._rank}: all-reduce of {len(bucket)} gradient(s) failed: {e}") from e
            if ok is False:
                raise TimeoutError(
                    f"rank {self._rank}: all-reduce of {len(bucket)} gradient(s) not done after {timeout:g} s"
                )
            flat.div_(self._ws)
            _copy_back(flat, bucket)
            self._pending.pop(0)

    def done(self) -> bool:
        return all(work.is_completed() for work, _, _ in self._pending)

    def __repr__(self) -> str:
        return f"TorchSyncWork(rank={self._rank}, pending={len(self._pending)})"
