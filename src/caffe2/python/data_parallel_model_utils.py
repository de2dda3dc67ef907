"""Caffe2's ``data_parallel_model_utils``: activation blobs and model-parallel device shifts."""

from __future__ import annotations

from typing import Any

__all__ = ["GetActivationBlobs", "ShiftActivationDevices"]


def GetActivationBlobs(model: Any) -> list[str]:
    """The blobs the first device's forward ops write (not parameters nor gradients)."""
    prefix = f"{model._device_prefix}_{model._devices[0]}/"
    params = {str(p) for p in model.params}
    out: list[str] = []
    for op in model.net.Proto().op:
        if op.is_gradient_op or op.type.endswith("Gradient"):
            break
        out += [o for o in op.output if o.startswith(prefix) and o not in params and o not in out]
    return out


def ShiftActivationDevices(model: Any, activations: Any, shifts: Any) -> None:
    """Model parallelism over GPUs is not supported (asyncnet places ops with DeviceOption('cuda', i))."""
    raise NotImplementedError("ShiftActivationDevices (model parallelism across GPUs) is not supported")
