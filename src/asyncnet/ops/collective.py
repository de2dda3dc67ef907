"""Allreduce: gradient synchronization inside a net.

Inputs ``(sync, grad_1, ..., grad_N)``, outputs the same ``N`` gradients, in place (output ``i``
must be input ``i + 1``). Input 0 is a blob holding a :class:`~asyncnet.sync.GradientSync`
(threaded, process, torch.distributed, or local); the op replaces the gradients with their mean
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
"""

from __future__ import annotations

from typing import Any

from asyncnet.core.registry import register_op
from asyncnet.sync.base import GradientSync


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
    if not isinstance(sync, GradientSync):
        raise TypeError(f"expected a GradientSync in input 0 {ctx.op.inputs[0]!r}, got {type(sync).__name__}")
    if len(ctx.op.outputs) != len(grads):
        raise ValueError(
            f"Allreduce needs one output per gradient: {len(grads)} gradient inputs, {len(ctx.op.outputs)} outputs"
        )
    sync.sync_gradients(list(grads))
    return grads[0] if len(grads) == 1 else tuple(grads)
