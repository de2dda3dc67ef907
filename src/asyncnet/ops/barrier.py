"""AsyncNetBarrier: an op that computes nothing but orders an async net.

It reads and writes every listed blob, so the async scheduler finishes every earlier producer
of those blobs before any later consumer starts. Used in place (``outputs == inputs``) it
hands each blob through as the same object; to a different name it stores a copy (numpy
arrays are copied, torch tensors cloned, other objects such as mutexes passed by reference).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("a", np.ones(2)); ws.feed("b", np.zeros(2))
    >>> net = an.Net("n", type="async_scheduling")
    >>> _ = net.AsyncNetBarrier(["a", "b"], ["a", "b"])
    >>> ws.run_net_once(net); ws.fetch("a")
    array([1., 1.])

With ``cross_device=1`` input ``i`` is placed on device ``i`` of the op's device type (Caffe2's
placement, :func:`barrier_devices`); otherwise every input is on the op's device.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from asyncnet.core.defs import DeviceOption, OperatorDef
from asyncnet.core.registry import Arg, register_op

__all__ = ["barrier_devices"]


def barrier_devices(
    op: OperatorDef, net_device: DeviceOption | None = None
) -> tuple[list[DeviceOption], list[DeviceOption]]:
    """Device of each input and output of an AsyncNetBarrier (Caffe2's ``asyncBarrierOpDevInfer``).

    >>> from asyncnet.core.defs import OperatorDef, DeviceOption
    >>> op = OperatorDef("AsyncNetBarrier", ["a", "b"], ["a", "b"], {"cross_device": 1},
    ...                  device_option=DeviceOption("cuda", 0))
    >>> [str(d) for d in barrier_devices(op)[0]]
    ['cuda:0', 'cuda:1']
    """
    device = op.device_option or net_device or DeviceOption()
    if int(op.args.get("cross_device", 0)) == 1:
        placed = [DeviceOption(device.device_type, i, device.numa_node_id) for i in range(len(op.inputs))]
    else:
        placed = [device] * len(op.inputs)
    return placed, list(placed)


def _copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    clone = getattr(value, "clone", None)
    if clone is not None and type(value).__module__.startswith("torch"):
        return clone()
    if isinstance(value, (int, float, complex, str, bytes, bool, np.generic)):
        return copy.copy(value)
    return value


def _check_cross_device(ctx: Any, inputs: tuple[Any, ...]) -> None:
    """With cross_device=1 on cuda, array input i must live on cuda:i (data is never moved here)."""
    from asyncnet.errors import DeviceError
    from asyncnet.tensor.namespace import device_of, is_array, library_of

    for i, x in enumerate(inputs):
        if is_array(x) and device_of(x) != f"cuda:{i}":
            raise DeviceError(
                f"expected input {i} {ctx.op.inputs[i]!r} on 'cuda:{i}' (cross_device=1 places input i "
                f"on device i), got {library_of(x)} on {device_of(x)!r}"
            )


def _same_count(op: OperatorDef) -> None:
    if len(op.outputs) != len(op.inputs):
        raise ValueError(f"expected as many outputs as inputs ({len(op.inputs)}), got {len(op.outputs)}")


@register_op(
    "AsyncNetBarrier",
    inputs=(1, None),
    outputs=(1, None),
    allow_inplace=lambda i, o: i == o,
    args=[Arg("cross_device", int, 0, "1: input i lives on device i of the op's device type", choices=(0, 1))],
    devices=("cpu", "cuda"),
    differentiable=False,
    validate=_same_count,
    doc=(
        "Pass N inputs through to N outputs (in place when names match, a copy otherwise). It reads and "
        "writes every listed blob, so the async scheduler finishes every earlier producer of those blobs "
        "before any later consumer starts. No gradient."
    ),
)
def async_net_barrier(ctx: Any, *inputs: Any) -> Any:
    op = ctx.op
    if ctx.args["cross_device"] == 1 and ctx.device.device_type == "cuda":
        _check_cross_device(ctx, inputs)
    values = [x if op.inputs[i] == op.outputs[i] else _copy(x) for i, x in enumerate(inputs)]
    return values[0] if len(values) == 1 else tuple(values)
