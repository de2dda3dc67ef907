"""Gradient buckets in a train net, so the all-reduce overlaps the backward pass (DDP's design).

The gradients are taken in the order the backward pass produces them (the index of the last
op writing each one; ties, from one op, in reverse parameter order, as DDP's reverse
``model.parameters()`` order) and packed into buckets: a bucket takes gradients until it
holds at least ``bucket_bytes`` (25 MiB by default, DDP's ``bucket_cap_mb``), then closes.
Each bucket gets an ``AllreduceStart`` right after the op producing its last gradient, so
its reduction runs while the executor goes on with the rest of the backward pass, and an
``AllreduceWait`` before the optimizer ops. Starts are chained through ``control_inputs``
(bucket k+1 starts after bucket k): every worker issues its collectives in the same order,
whatever order the async executor runs independent ops in.

    >>> import asyncnet as an
    >>> net = an.Net("t")
    >>> _ = net.Scale("x", "g2"); _ = net.Scale("x", "g1")
    >>> gradient_buckets(net, ["g1", "g2"], {"g1": 8, "g2": 8}, bucket_bytes=8)
    [['g2'], ['g1']]
    >>> add_bucketed_allreduce(net, "sync", [["g2"], ["g1"]])
    >>> [op.type for op in net.ops]
    ['Scale', 'AllreduceStart', 'Scale', 'AllreduceStart', 'AllreduceWait', 'AllreduceWait']

An ``FCGradient`` computes a layer's weight gradient and its input gradient in one op, so
its bucket could start only once both were done, with little backward pass left to hide the
all-reduce behind (the wide MLP's 4 MiB layer is its second to last). :func:`split_input_gradients`
(on by default in :func:`add_bucketed_allreduce`) splits such an op: ``FCGradient`` writes
``dW`` and ``db`` only, and ``MatMul(dY, W)`` (then an in-place ``Reshape`` to X's shape)
computes ``dX`` with the same BLAS call, so the bucket starts while ``dX`` and the layers below
are computed.

With ``bucket_view`` (on by default, DDP's ``gradient_as_bucket_view``) and a sync that
reduces a bucket as one flat buffer (torch.distributed) a bucket's gradients become
consecutive views of one flat buffer at its first ``AllreduceStart``; from then on the
gradient ops that support it (numpy ``FCGradient``) write into those views
(:mod:`asyncnet.core.bound`), and the all-reduce runs on the buffer itself: no concatenation
before it, no copy back after it, the same bits. Where some producers return fresh arrays
instead, the bucket is not bound again (the sync concatenates it, as without views). The
gradient blobs are then overwritten in place each step: copy a fetched gradient you want to keep.

Gradient accumulation (DDP's ``no_sync``) is :func:`add_accumulate` and :func:`add_accumulated_mean`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from asyncnet.errors import NetDefinitionError
from asyncnet.model.fc_split import (
    split_input_gradients,
)  # moved to model/ (DLRM's net uses it too); kept importable here

__all__ = [
    "DEFAULT_BUCKET_MB",
    "gradient_buckets",
    "add_bucketed_allreduce",
    "split_input_gradients",
    "add_accumulate",
    "add_accumulated_mean",
    "accumulator_name",
]

DEFAULT_BUCKET_MB = 25.0


def _last_writers(net: object, grads: Sequence[str]) -> dict[str, int]:
    wanted = set(grads)
    last: dict[str, int] = {}
    for i, op in enumerate(net.ops):  # type: ignore[attr-defined]
        for o in op.outputs:
            if o in wanted:
                last[o] = i
    missing = [g for g in grads if g not in last]
    if missing:
        raise NetDefinitionError(
            f"expected every gradient to be written by an op of net {net.name!r}; "  # type: ignore[attr-defined]
            f"no op writes {missing}",
            "gradients",
        )
    return last


def gradient_buckets(
    net: object, grads: Sequence[str], nbytes: Mapping[str, int], bucket_bytes: int
) -> list[list[str]]:
    """``grads`` (in parameter order) packed into buckets in production order (see the module doc)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    last = _last_writers(net, grads)
    order = sorted(range(len(grads)), key=lambda k: (last[grads[k]], -k))
    buckets: list[list[str]] = [[]]
    size = 0
    for k in order:
        buckets[-1].append(grads[k])
        size += nbytes[grads[k]]
        if size >= bucket_bytes:
            buckets.append([])
            size = 0
    return [b for b in buckets if b]


def add_bucketed_allreduce(
    net: object,
    sync_blob: str,
    buckets: Sequence[Sequence[str]],
    timeout: float = 300.0,
    split_inputs: bool = True,
    bucket_view: bool = True,
) -> None:
    """Insert one ``AllreduceStart`` per bucket after its last producer, and the waits at the end;
    ``split_inputs`` first splits the FC gradient ops (:func:`split_input_gradients`);
    ``bucket_view`` keeps each bucket's gradients as views of one flat buffer (see the module doc)."""
    all_grads = [g for b in buckets for g in b]
    if split_inputs:
        split_input_gradients(net, all_grads)
    last = _last_writers(net, all_grads)
    starts = []
    prev_work = None
    for k, bucket in enumerate(buckets):
        work = f"{sync_blob}/work{k}"
        net.add_op(
            "AllreduceStart",
            [sync_blob, *bucket],
            [*bucket, work],  # type: ignore[attr-defined]
            control_inputs=[prev_work] if prev_work else None,
            bucket_view=int(bucket_view),
        )
        starts.append((max(last[g] for g in bucket), net.ops.pop()))  # type: ignore[attr-defined]
        prev_work = work
    for pos, op in reversed(starts):  # positions never decrease with k: insert from the end
        net.ops.insert(pos + 1, op)  # type: ignore[attr-defined]
    for k, bucket in enumerate(buckets):
        # ready only once the last bucket started: a wait taken earlier would hold its thread
        # (on one core the only one) while the backward pass still has work to do
        net.add_op(
            "AllreduceWait",
            [f"{sync_blob}/work{k}", *bucket],
            list(bucket),
            timeout=timeout,  # type: ignore[attr-defined]
            control_inputs=[prev_work] if prev_work and k < len(buckets) - 1 else None,
        )


def accumulator_name(grad: str) -> str:
    """The blob accumulating ``grad`` over micro-batches."""
    return f"{grad}_acc"


def add_accumulate(net: object, grads: Sequence[str], first: bool) -> None:
    """Micro-batch step: ``acc = grad`` (``first``) or ``acc = acc + grad``."""
    for g in grads:
        acc = accumulator_name(g)
        if first:
            net.add_op("Copy", [g], [acc])  # type: ignore[attr-defined]
        else:
            net.add_op("Sum", [acc, g], [acc])  # type: ignore[attr-defined]


def add_accumulated_mean(net: object, grads: Sequence[str], micro_batches: int) -> None:
    """Last micro-batch: each ``grad`` becomes the mean of its ``micro_batches`` values, each op
    placed right after the gradient's last producer (so the buckets still overlap)."""
    last = _last_writers(net, grads)
    made = []
    for g in grads:
        acc = accumulator_name(g)
        net.add_op("Sum", [g, acc], [g])  # type: ignore[attr-defined]
        net.add_op("Scale", [g], [g], scale=1.0 / micro_batches)  # type: ignore[attr-defined]
        scale_op, sum_op = net.ops.pop(), net.ops.pop()  # type: ignore[attr-defined]
        made.append((last[g], sum_op, scale_op))
    for pos, sum_op, scale_op in sorted(made, key=lambda m: m[0], reverse=True):
        net.ops[pos + 1 : pos + 1] = [sum_op, scale_op]  # type: ignore[attr-defined]
