"""Allreduce: gradient synchronization inside a net.

Inputs ``(sync, grad_1, ..., grad_N)``, outputs the same ``N`` gradients, in place (output ``i``
must be input ``i + 1``). Input 0 is a blob holding a :class:`~asyncnet.sync.GradientSync`
(threaded, process, torch.distributed, or local), or any object with its ``sync_gradients``
method (the only one the ops call); the op replaces the gradients with their mean
over the workers, in one bucket. It has no gradient.

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.sync import LocalGradientSync
    >>> ws = an.Workspace()
    >>> ws.feed("sync", LocalGradientSync()); ws.feed("dw", np.ones(3, np.float32))
    >>> net = an.Net("sync_grads")
    >>> _ = net.Allreduce(["sync", "dw"], ["dw"])
    >>> ws.run_net_once(net); ws.fetch("dw")
    array([1., 1., 1.], dtype=float32)

Each data-parallel worker runs its own net with its own handle in its ``sync`` blob; the op
blocks until every worker reached its Allreduce (bounded by the sync's timeout), and a
``SyncError`` (mismatch, timeout, abort) surfaces as the op's ``OperatorError`` cause.

Overlap with the backward pass splits the op in two (see :mod:`asyncnet.train.buckets`):
``AllreduceStart([sync, g_1..g_N], [g_1..g_N, work])`` starts the mean of one bucket and puts
its work handle in blob ``work`` (:func:`~asyncnet.sync.base.start_sync`: torch.distributed
returns at once with ``async_op=True`` handles, the other backends reduce before returning);
``AllreduceWait([work, g_1..g_N], [g_1..g_N])`` waits for it (at most ``timeout`` s), so the
ops reading the gradients depend on the wait. Every worker must start its buckets in the same
order: chain the starts (``control_inputs``) as the train-net builder does.

With ``bucket_view=1`` (what the train-net builder sets) and a sync that reduces a bucket as
one flat buffer (``flattens_buckets``: torch.distributed; the threaded and process backends
reduce each member in place and need no views), ``AllreduceStart`` keeps its gradients as
consecutive views of one flat buffer (DDP's ``gradient_as_bucket_view``,
:mod:`asyncnet.core.bound`): it binds them on its first run (one copy) and from then on the
gradient ops write into the views and the buffer is reduced as one tensor, with no
concatenation or copy back, for the same bits.

    >>> net = an.Net("overlap")
    >>> _ = net.AllreduceStart(["sync", "dw"], ["dw", "dw_work"])
    >>> _ = net.AllreduceWait(["dw_work", "dw"], ["dw"])
    >>> ws.run_net_once(net); ws.fetch("dw")
    array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.bound import bind_views, is_bound
from asyncnet.core.registry import Arg, register_op
from asyncnet.sync.base import start_sync


def _grad_pair(i: int, o: int) -> bool:
    return i == o + 1


@register_op(
    "Allreduce",
    inputs=(2, None),
    outputs=(1, None),
    allow_inplace=_grad_pair,
    enforce_inplace=_grad_pair,
    devices=("cpu", "cuda"),
    differentiable=False,
    doc="Average gradients over data-parallel workers, in place, through the GradientSync held "
    "in input 0: inputs (sync, grad_1..grad_N) -> outputs (grad_1..grad_N), output i == input i+1.",
)
def allreduce(ctx: Any, sync: Any, *grads: Any) -> Any:
    _check_sync(ctx, sync)
    if len(ctx.op.outputs) != len(grads):
        raise ValueError(
            f"Allreduce needs one output per gradient: {len(grads)} gradient inputs, {len(ctx.op.outputs)} outputs"
        )
    sync.sync_gradients(list(grads))
    return grads[0] if len(grads) == 1 else tuple(grads)


def _check_sync(ctx: Any, sync: Any) -> None:
    """The ops call only ``sync_gradients`` (or ``start_sync_gradients``, through
    :func:`~asyncnet.sync.base.start_sync`): any object with it will do, not only a full
    :class:`~asyncnet.sync.GradientSync`."""
    if not callable(getattr(sync, "sync_gradients", None)):
        raise TypeError(
            f"expected a gradient sync (an object with a sync_gradients(grads) method, such as an "
            f"asyncnet.sync.GradientSync) in input 0 {ctx.op.inputs[0]!r}, got {type(sync).__name__}"
        )


def _start_counts(op: Any) -> None:
    if len(op.outputs) != len(op.inputs):
        raise ValueError(
            f"AllreduceStart takes (sync, grad_1..grad_N) and gives (grad_1..grad_N, work): "
            f"{len(op.inputs) - 1} gradients need {len(op.inputs)} outputs, got {len(op.outputs)}"
        )


def _wait_counts(op: Any) -> None:
    if len(op.outputs) != len(op.inputs) - 1:
        raise ValueError(
            f"AllreduceWait takes (work, grad_1..grad_N) and gives (grad_1..grad_N): "
            f"{len(op.inputs) - 1} gradients need {len(op.inputs) - 1} outputs, got {len(op.outputs)}"
        )


@register_op(
    "AllreduceStart",
    inputs=(2, None),
    outputs=(2, None),
    allow_inplace=_grad_pair,
    enforce_inplace=lambda i, o: i == o + 1 and i > 0,
    devices=("cpu", "cuda"),
    differentiable=False,
    validate=_start_counts,
    args=[
        Arg(
            "bucket_view",
            int,
            0,
            "1: keep the gradients as views of one flat buffer (DDP's "
            "gradient_as_bucket_view), reduced as one tensor, no concatenation or copy back",
        )
    ],
    doc="Start averaging gradients over the workers (one bucket): inputs (sync, grad_1..grad_N) -> "
    "outputs (grad_1..grad_N in place, work handle); AllreduceWait finishes it.",
)
def allreduce_start(ctx: Any, sync: Any, *grads: Any) -> Any:
    _check_sync(ctx, sync)
    if ctx.args["bucket_view"] and getattr(sync, "flattens_buckets", False) and _bindable(grads):
        grads = tuple(bind_views(grads))  # the first run (or every producer made a fresh array): one copy
    work = start_sync(sync, list(grads))
    return (*grads, work)


def _bindable(grads: tuple[Any, ...]) -> bool:
    """numpy float arrays of one dtype, none a bucket view yet: some still bound means some
    producers write into their views and others do not, and binding again each step would
    copy every time (the sync then concatenates, as without views)."""
    dtype = getattr(grads[0], "dtype", None)
    return all(type(g) is np.ndarray and g.dtype == dtype and not is_bound(g) for g in grads) and dtype.kind == "f"  # type: ignore[union-attr]


@register_op(
    "AllreduceWait",
    inputs=(2, None),
    outputs=(1, None),
    allow_inplace=_grad_pair,
    enforce_inplace=_grad_pair,
    devices=("cpu", "cuda"),
    differentiable=False,
    validate=_wait_counts,
    args=[Arg("timeout", float, 300.0, "seconds to wait for the all-reduce")],
    doc="Wait for the AllreduceStart whose work handle is input 0: inputs (work, grad_1..grad_N) -> "
    "outputs (grad_1..grad_N), in place, holding the mean over the workers.",
)
def allreduce_wait(ctx: Any, work: Any, *grads: Any) -> Any:
    if not callable(getattr(work, "wait", None)):
        raise TypeError(
            f"expected a work handle (made by AllreduceStart) in input 0 {ctx.op.inputs[0]!r}, "
            f"got {type(work).__name__}"
        )
    work.wait(ctx.args["timeout"])
    return grads[0] if len(grads) == 1 else tuple(grads)
