"""Copies between devices, with Caffe2's names and meaning (caffe2/operators/copy_op.cc,
ensure_cpu_output_op.cc). Data moves between devices only through these ops (and ``Copy`` on a
cuda op, and ``ws.feed(name, value, device=...)``); every other op refuses inputs on two devices.

| Op | op's device | input | output |
|---|---|---|---|
| CopyCPUToGPU | cuda:i | on the host | torch tensor on cuda:i |
| CopyGPUToCPU | cuda:i | on cuda:i | torch tensor on the host |
| CopyFromCPUInput | any | on the host | on the op's device (a copy) |
| EnsureCPUOutput | any | on the op's device or the host | on the host (a copy) |

The host side keeps its library: a numpy array stays numpy; a copy to the host of a torch
tensor is a torch CPU tensor (``ws.fetch(name, host=True)`` or
:func:`asyncnet.tensor.to_numpy` give numpy). CopyCPUToGPU and CopyGPUToCPU are each other's
gradient, as in Caffe2; CopyFromCPUInput and EnsureCPUOutput have none.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(3.0))
    >>> net = an.Net("n"); _ = net.EnsureCPUOutput("x", "y")
    >>> ws.run_net_once(net); ws.fetch("y")
    array([0., 1., 2.])
"""

from __future__ import annotations

from typing import Any

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op
from asyncnet.errors import DeviceError
from asyncnet.ops._check import array
from asyncnet.tensor.namespace import device_of, library_of, namespace
from asyncnet.tensor.place import device_name, place

__all__ = ["copy_cpu_to_gpu", "copy_gpu_to_cpu", "copy_from_cpu_input", "ensure_cpu_output"]


def _on(ctx: Any, x: Any, *devices: str) -> Any:
    """``x`` if it is an array on one of ``devices``, else a DeviceError naming input 0."""
    x = array(ctx, x, 0)
    if device_of(x) not in devices:
        want = " or ".join(repr(d) for d in devices)
        raise DeviceError(f"expected input 0 {ctx.op.inputs[0]!r} on {want}, got {library_of(x)} on {device_of(x)!r}")
    return x


def _host_copy(x: Any) -> Any:
    """A copy of ``x`` on the host, in ``x``'s library."""
    return x.to("cpu", copy=True) if library_of(x) == "torch" else x.copy()


@register_op(
    "CopyCPUToGPU",
    inputs=1,
    outputs=1,
    devices=("cuda",),
    inputs_doc=("X on the host",),
    outputs_doc=("Y on the op's cuda device",),
    doc="Copy a host tensor to the op's GPU (a torch tensor on cuda:i).",
)
def copy_cpu_to_gpu(ctx: Any, x: Any) -> Any:
    return place(_on(ctx, x, "cpu"), device_name(ctx.device), "torch")


@register_op(
    "CopyGPUToCPU",
    inputs=1,
    outputs=1,
    devices=("cuda",),
    inputs_doc=("X on the op's cuda device",),
    outputs_doc=("Y on the host (torch)",),
    doc="Copy a tensor on the op's GPU to the host.",
)
def copy_gpu_to_cpu(ctx: Any, x: Any) -> Any:
    return _host_copy(_on(ctx, x, device_name(ctx.device)))


@register_op(
    "CopyFromCPUInput",
    inputs=1,
    outputs=1,
    devices=("cpu", "cuda"),
    differentiable=False,
    inputs_doc=("X on the host",),
    outputs_doc=("Y on the op's device",),
    doc="Copy a host tensor to the op's device (a copy on the host when the op runs there).",
)
def copy_from_cpu_input(ctx: Any, x: Any) -> Any:
    x = _on(ctx, x, "cpu")
    if ctx.device.device_type == "cpu":
        return namespace(ctx, x).copy(x)
    return place(x, device_name(ctx.device), "torch")


@register_op(
    "EnsureCPUOutput",
    inputs=1,
    outputs=1,
    devices=("cpu", "cuda"),
    differentiable=False,
    inputs_doc=("X on the op's device or the host",),
    outputs_doc=("Y on the host",),
    doc="A host copy of a tensor on the op's device or the host (Caffe2's EnsureCPUOutput).",
)
def ensure_cpu_output(ctx: Any, x: Any) -> Any:
    return _host_copy(_on(ctx, x, "cpu", device_name(ctx.device)))


def _to(op_type: str):  # type: ignore[no-untyped-def]
    def maker(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
        if gout[0] is None:
            return [], [None]
        return [OperatorDef(op_type, [gout[0]], ["#dx"], {}, device_option=op.device_option)], ["#dx"]

    return maker


register_gradient("CopyCPUToGPU")(_to("CopyGPUToCPU"))
register_gradient("CopyGPUToCPU")(_to("CopyCPUToGPU"))
