"""Caffe2's ``muji``: all-reduce of one blob per GPU, built as ops added to a net. After the net
runs, blob ``b + reduced_affix`` on each GPU holds the sum of all the blobs, on that GPU.

Two shapes of reduction:

* **Tree** (``Allreduce2``, ``Allreduce4``, ``Allreduce8``, and ``Allreduce`` when every pair of
  the GPUs has peer access): in rounds of distance 1, 2, 4, ... the device at position ``i``
  (a multiple of twice the distance) copies in the partial sum of position ``i + distance`` and
  adds it to its own, so position 0 ends with the total; the rounds then run backwards, each
  receiver copying the total from its sender.
* **Fallback** (``AllreduceFallback``): every blob is copied to the first GPU, summed there, and
  the sum copied back to each GPU.

Data moves only through ``Copy`` ops run on the receiving device (Copy on a CUDA op brings its
input to that device). Without GPUs the nets are built the same; running them needs CUDA.

    >>> from caffe2.python import core, muji
    >>> net = core.Net("ar")
    >>> muji.Allreduce2(net, ["g0", "g1"], "_sum", [0, 1])
    >>> [(op.type, op.device_option.device_id) for op in net.Proto().op]
    [('Copy', 0), ('Add', 0), ('Copy', 1)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from caffe2.proto import caffe2_pb2

__all__ = ["Allreduce", "Allreduce2", "Allreduce4", "Allreduce8", "AllreduceFallback", "OnCPU", "OnGPU"]


def OnGPU(gpu_id: int) -> caffe2_pb2.DeviceOption:
    """The DeviceOption of CUDA device ``gpu_id``."""
    return caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA, device_id=gpu_id)


def OnCPU() -> caffe2_pb2.DeviceOption:
    """The DeviceOption of the host."""
    return caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CPU)


def _indices(blobs: Sequence[Any], gpu_indices: Sequence[int] | None, want: int | None, name: str) -> list[int]:
    gpus = list(range(len(blobs))) if gpu_indices is None else list(gpu_indices)
    if len(gpus) != len(blobs):
        raise ValueError(f"{name}: expected one GPU index per blob, got {len(blobs)} blobs and GPUs {gpus}")
    if want is not None and len(blobs) != want:
        raise ValueError(f"{name}: expected {want} blobs, got {len(blobs)}")
    if not blobs:
        raise ValueError(f"{name}: expected at least one blob")
    return gpus


def _tree(net: Any, blobs: Sequence[Any], affix: str, devices: Sequence[caffe2_pb2.DeviceOption]) -> None:
    """The tree all-reduce of ``blobs`` (blob i on ``devices[i]``) into ``blob + affix``."""
    names = [str(b) for b in blobs]
    partial = list(names)  # what position i holds so far
    n = len(names)
    rounds = []
    distance = 1
    while distance < n:
        rounds.append(distance)
        for i in range(0, n - distance, 2 * distance):
            j = i + distance
            received = net.Copy(partial[j], f"{names[i]}{affix}_from_{j}", device_option=devices[i])
            partial[i] = net.Add([partial[i], received], names[i] + affix, device_option=devices[i])
        distance *= 2
    if n == 1:
        net.Copy(names[0], names[0] + affix, device_option=devices[0])
    for distance in reversed(rounds):
        for i in range(0, n - distance, 2 * distance):
            j = i + distance
            net.Copy(names[i] + affix, names[j] + affix, device_option=devices[j])


def _fallback(net: Any, blobs: Sequence[Any], affix: str, devices: Sequence[caffe2_pb2.DeviceOption]) -> None:
    """Copy every blob to ``devices[0]``, sum there, copy the sum back to each device."""
    names = [str(b) for b in blobs]
    first = devices[0]
    gathered = [names[0]] + [
        net.Copy(name, f"{names[0]}{affix}_from_{k}", device_option=first) for k, name in enumerate(names[1:], 1)
    ]
    net.Sum(gathered, names[0] + affix, device_option=first)
    for k in range(1, len(names)):
        net.Copy(names[0] + affix, names[k] + affix, device_option=devices[k])


def _peer_access(gpus: Sequence[int]) -> bool:
    """Whether every pair of ``gpus`` can reach each other's memory (False without torch CUDA)."""
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available() or max(gpus) >= torch.cuda.device_count():
        return False
    return all(a == b or torch.cuda.can_device_access_peer(a, b) for a in gpus for b in gpus)


def Allreduce(
    net: Any, blobs: Sequence[Any], reduced_affix: str = "_reduced", gpu_indices: Sequence[int] | None = None
) -> None:
    """All-reduce ``blobs`` (blob i on GPU ``gpu_indices[i]``): the tree when the GPUs are all
    peers, else :func:`AllreduceFallback`."""
    gpus = _indices(blobs, gpu_indices, None, "Allreduce")
    if len(gpus) == 1 or _peer_access(gpus):
        _tree(net, blobs, reduced_affix, [OnGPU(g) for g in gpus])
    else:
        _fallback(net, blobs, reduced_affix, [OnGPU(g) for g in gpus])


def Allreduce2(net: Any, blobs: Sequence[Any], reduced_affix: str, gpu_indices: Sequence[int]) -> None:
    """The tree all-reduce of two blobs."""
    _tree(net, blobs, reduced_affix, [OnGPU(g) for g in _indices(blobs, gpu_indices, 2, "Allreduce2")])


def Allreduce4(net: Any, blobs: Sequence[Any], reduced_affix: str, gpu_indices: Sequence[int]) -> None:
    """The tree all-reduce of four blobs."""
    _tree(net, blobs, reduced_affix, [OnGPU(g) for g in _indices(blobs, gpu_indices, 4, "Allreduce4")])


def Allreduce8(net: Any, blobs: Sequence[Any], reduced_affix: str, gpu_indices: Sequence[int]) -> None:
    """The tree all-reduce of eight blobs."""
    _tree(net, blobs, reduced_affix, [OnGPU(g) for g in _indices(blobs, gpu_indices, 8, "Allreduce8")])


def AllreduceFallback(
    net: Any, blobs: Sequence[Any], reduced_affix: str, gpu_indices: Sequence[int] | None = None
) -> None:
    """All-reduce through the first GPU: gather, sum, copy back."""
    gpus = _indices(blobs, gpu_indices, None, "AllreduceFallback")
    _fallback(net, blobs, reduced_affix, [OnGPU(g) for g in gpus])
