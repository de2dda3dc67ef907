"""Devices and copies between them: where a blob lives and how data moves (always explicitly).

A device is a string as torch spells it: ``"cpu"``, ``"cuda"`` (device 0), ``"cuda:1"``. numpy
arrays live on ``"cpu"``; torch tensors on their ``.device``. :func:`place` moves or converts a
value to a device and library; :func:`asyncnet.tensor.to_numpy` gives a host numpy copy::

    >>> import numpy as np
    >>> from asyncnet.tensor.place import parse_device, place
    >>> parse_device("cuda:1"), parse_device("cpu")
    ('cuda:1', 'cpu')
    >>> place(np.ones(2), "cpu") is not None
    True

CUDA paths import torch and check ``torch.cuda.is_available()`` first: asking for a CUDA device
where none exists is one ``DeviceError`` line, never a torch traceback.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import numpy as np

from asyncnet.errors import DeviceError
from asyncnet.tensor.namespace import is_torch

__all__ = ["DeviceError", "parse_device", "device_name", "place", "place_like", "cuda_available", "require_device"]

_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


def parse_device(device: str) -> str:
    """The canonical name of ``device`` (``"cuda"`` -> ``"cuda:0"``); a DeviceError if malformed."""
    m = _DEVICE.match(str(device).strip().lower())
    if m is None:
        raise DeviceError(f"expected a device 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if m.group(1) == "cpu":
        if m.group(2) not in (None, "0"):
            raise DeviceError(f"expected device 'cpu' (one host device), got {device!r}")
        return "cpu"
    return f"cuda:{int(m.group(2) or 0)}"


def device_name(option: Any) -> str:
    """The device of a :class:`~asyncnet.DeviceOption`: ``"cpu"`` or ``"cuda:<device_id>"``."""
    return "cpu" if option.device_type == "cpu" else f"cuda:{option.device_id}"


def cuda_available() -> int:
    """How many CUDA devices torch sees (0 without torch or without CUDA). Imports torch."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require_device(device: str) -> str:
    """``device`` canonical and present on this machine, else one DeviceError line."""
    name = parse_device(device)
    if name.startswith("cuda"):
        if "torch" not in sys.modules:
            try:
                import torch  # noqa: F401
            except ImportError:
                raise DeviceError(
                    f"device {name!r} needs PyTorch, which is not installed (pip install torch)"
                ) from None
        count = cuda_available()
        index = int(name.split(":")[1])
        if index >= count:
            have = f"{count} CUDA device(s)" if count else "no CUDA (torch.cuda.is_available() is False)"
            raise DeviceError(f"device {name!r} requested but this machine has {have}")
    return name


def place(value: Any, device: str, library: str | None = None) -> Any:
    """``value`` (numpy array or torch tensor) on ``device`` in ``library`` (default: numpy on cpu
    for numpy input, else torch). Already there: the same object. On the CPU a change of library
    shares memory (``torch.from_numpy``, ``Tensor.numpy``); a move between devices copies."""
    name = parse_device(device)
    lib = library or ("numpy" if name == "cpu" and isinstance(value, np.ndarray) else "torch")
    if lib == "numpy":
        if name != "cpu":
            raise DeviceError(f"numpy arrays live on 'cpu'; got device {name!r} (use library 'torch')")
        return value.detach().cpu().numpy() if is_torch(value) else np.asarray(value)
    if lib != "torch":
        raise DeviceError(f"expected library 'numpy' or 'torch', got {lib!r}")
    require_device(name)
    import torch

    # asarray(order="C"), not ascontiguousarray: that one makes a 0-d array 1-d
    t = value if is_torch(value) else torch.from_numpy(np.asarray(value, order="C"))
    return t.to(name)


def place_like(value: np.ndarray, like: Any) -> Any:
    """A fresh numpy array as a torch tensor on ``like``'s device (the fast path of a fill whose
    input is a torch tensor: the device is known to exist)."""
    import torch

    t = torch.from_numpy(value)
    return t if like.device.type == "cpu" else t.to(like.device)
