"""The array namespace of a blob: one kernel, two libraries (numpy arrays and torch tensors).

A kernel asks :func:`namespace` for the namespace ``xp`` of its array inputs and computes with
``xp``'s functions and the arrays' own methods that numpy and torch share (``reshape``, ``.T``,
``@``, ``+``, ``sum(axis=, keepdims=)``, ``mean``, ``shape``, ``ndim``, ``dtype``). The
namespace holds numpy's names (``xp.maximum``, ``xp.exp``, ``xp.where``) with numpy's meaning
on both libraries, plus the few helpers where numpy and torch spell things differently
(``xp.copy``, ``xp.copyto``, ``xp.amax``, ``xp.size``, ``xp.arange(n, like=x)``, ``xp.is_float``,
``xp.kind``, ``xp.item``, ``xp.scalar``, ``xp.scalar_like``, ``xp.take_rows``, ``xp.add_rows``)::

    >>> import numpy as np
    >>> from asyncnet.tensor.namespace import namespace
    >>> x = np.array([-1.0, 2.0], np.float32)
    >>> xp = namespace(None, x)
    >>> xp.name, xp.maximum(x, 0).tolist()
    ('numpy', [0.0, 2.0])

Rules every kernel keeps (so converting an op is mechanical):

- ``xp = namespace(ctx, *arrays)`` once, first; inputs of two libraries or two devices are a
  TypeError naming both inputs (data moves only through the Copy ops or ``ws.feed(device=)``).
- Results keep the inputs' library, dtype and device: new arrays come from ``xp`` with a
  ``like=`` array (``xp.full(shape, v, like=x)``, ``xp.arange(n, like=x)``), never from ``np``.
- In-place updates write into the input's own storage (``xp.copyto``, ``out=``) on both
  libraries, so Hogwild's shared torch CPU tensors see every update as numpy arrays do.
- Where numpy and torch differ, numpy's semantics win: integer division truncates toward zero,
  mixed dtypes are refused (no promotion), Python scalars take the array's dtype.
- Where a library has no function (convolution, pooling, LSTM), the op's file holds one
  implementation per library beside each other, picked by ``xp.name``.
- A hot kernel (the MLP's: FC, Relu, the softmax loss, SGD ...) may open with a *short path*:
  one guard of type and shape tests for its common case (plain ``np.ndarray`` inputs, or
  :func:`cpu_tensors`) that runs the general path's math without its dispatch and per-input
  checks, the same bits on numpy; anything else, errors included, falls through to the general
  path and its messages. ``tests/ops/test_short_paths.py`` holds each to the general path.

torch is never imported here: a torch tensor can only exist once the user imported torch, so
the dispatch looks it up in ``sys.modules``. numpy inputs take a fast path of one type check
per input (the measured cost: ~0.3 us per op; array-api-compat's ``array_namespace`` costs
~4 us, as much as a whole cheap op).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

_ndarray = np.ndarray

__all__ = [
    "NUMPY",
    "namespace",
    "library_of",
    "device_of",
    "is_array",
    "is_torch",
    "to_numpy",
    "torch_namespace",
    "cpu_tensors",
    "loaded_torch",
]


def loaded_torch() -> Any:
    """The torch module once completely imported, else None: not imported, or another thread is
    importing it right now (in ``sys.modules`` but without ``torch.Tensor`` yet; no tensor can
    exist before that import ends). Never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    return torch


def is_torch(x: Any) -> bool:
    """True for a torch tensor (without importing torch)."""
    torch = loaded_torch()
    return torch is not None and isinstance(x, torch.Tensor)


_TENSOR: Any = None  # torch.Tensor once torch is imported


def cpu_tensors(*xs: Any) -> bool:
    """True when every ``x`` is a plain torch CPU tensor (type ``torch.Tensor``, no autograd):
    the case the hot kernels' torch short paths take (fused native calls, no namespace dispatch).

    >>> cpu_tensors(np.zeros(2))
    False
    """
    global _TENSOR
    t = _TENSOR
    if t is None:
        torch = loaded_torch()
        if torch is None:
            return False
        t = _TENSOR = torch.Tensor
    for x in xs:
        if type(x) is not t or not x.is_cpu or x.requires_grad:
            return False
    return True


def is_array(x: Any) -> bool:
    """True for a numpy array or a torch tensor: a blob a kernel computes on."""
    return isinstance(x, _ndarray) or is_torch(x)


def library_of(x: Any) -> str | None:
    """``"numpy"``, ``"torch"``, or None for anything else (an opaque blob).

    >>> library_of(np.zeros(2)), library_of(3)
    ('numpy', None)
    """
    if isinstance(x, _ndarray):
        return "numpy"
    return "torch" if is_torch(x) else None


def device_of(x: Any) -> str:
    """The device a blob lives on, as torch spells it: ``"cpu"``, ``"cuda:0"``.

    >>> device_of(np.zeros(2))
    'cpu'
    """
    if is_torch(x):
        d = x.device
        return f"{d.type}:{d.index}" if d.type == "cuda" and d.index is not None else d.type
    return "cpu"


def to_numpy(x: Any) -> Any:
    """A host numpy copy of a torch tensor (any device); numpy arrays and other objects as they are.

    >>> to_numpy(np.ones(2))
    array([1., 1.])
    """
    if cpu_tensors(x):  # a plain CPU tensor: a copy of its numpy view (no detach, no move)
        return x.numpy().copy()
    if is_torch(x):
        return x.detach().cpu().numpy().copy()
    return x


class _Numpy:
    """numpy's namespace with the helpers numpy and torch spell differently."""

    name = "numpy"
    lib = np
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    sqrt = staticmethod(np.sqrt)
    abs = staticmethod(np.abs)
    tanh = staticmethod(np.tanh)
    where = staticmethod(np.where)
    add = staticmethod(np.add)
    subtract = staticmethod(np.subtract)
    multiply = staticmethod(np.multiply)
    divide = staticmethod(np.divide)
    matmul = staticmethod(np.matmul)
    swapaxes = staticmethod(np.swapaxes)
    floor_divide = staticmethod(np.floor_divide)
    remainder = staticmethod(np.remainder)
    any = staticmethod(np.any)
    broadcast_shapes = staticmethod(np.broadcast_shapes)
    logical_and = staticmethod(np.logical_and)
    logical_or = staticmethod(np.logical_or)
    logical_xor = staticmethod(np.logical_xor)
    logical_not = staticmethod(np.logical_not)
    isnan = staticmethod(np.isnan)

    @staticmethod
    def is_float(x: Any) -> bool:
        return x.dtype.kind == "f"

    @staticmethod
    def kind(x: Any) -> str:
        """numpy's dtype kind letter: f, i, u, b."""
        return x.dtype.kind

    @staticmethod
    def writable(x: Any) -> bool:
        return bool(x.flags.writeable)

    @staticmethod
    def size(x: Any) -> int:
        return x.size

    @staticmethod
    def copy(x: Any) -> Any:
        return x.copy()

    @staticmethod
    def copyto(dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    @staticmethod
    def amax(x: Any, axis: int, keepdims: bool = False) -> Any:
        return x.max(axis=axis, keepdims=keepdims)

    @staticmethod
    def arange(n: int, like: Any = None) -> Any:
        return np.arange(n)

    @staticmethod
    def full(shape: Any, value: Any, like: Any) -> Any:
        return np.full(shape, value, dtype=like.dtype)

    @staticmethod
    def zeros_like(x: Any) -> Any:
        return np.zeros_like(x)

    @staticmethod
    def empty_like(x: Any) -> Any:
        return np.empty_like(x)

    @staticmethod
    def take_rows(x: Any, index: Any) -> Any:
        """``x[i, index[i]]`` for every row i of a 2-D ``x``."""
        return x[np.arange(x.shape[0]), index]

    @staticmethod
    def add_rows(x: Any, index: Any, value: Any) -> None:
        """``x[i, index[i]] += value`` for every row i, in place."""
        x[np.arange(x.shape[0]), index] += value

    @staticmethod
    def scalar(value: Any, dtype: str, like: Any = None) -> Any:
        """A 0-d array of dtype ``dtype`` (a name: "float32", "int64") on ``like``'s device."""
        return np.asarray(value, dtype=dtype)

    @staticmethod
    def scalar_like(value: Any, like: Any) -> Any:
        """A 0-d array of ``like``'s dtype (and device)."""
        return np.asarray(value, dtype=like.dtype)

    @staticmethod
    def item(x: Any) -> Any:
        """Element 0 of an array as a Python number (weakly typed: it takes the other operand's dtype)."""
        return x.item(0)

    @staticmethod
    def astype(x: Any, like: Any) -> Any:
        return x.astype(like.dtype)

    @staticmethod
    def result(x: Any) -> Any:
        """A kernel result as an array: numpy ufuncs give scalars for 0-d inputs."""
        return x if isinstance(x, _ndarray) else np.asarray(x)


NUMPY = _Numpy()

_TORCH: Any = None


def torch_namespace() -> Any:
    """The torch namespace (built on first use: torch is imported only when a tensor exists)."""
    global _TORCH
    if _TORCH is None:
        from asyncnet.tensor import _torch_ns

        _TORCH = _torch_ns.TorchNamespace()
    return _TORCH


def namespace(ctx: Any, *xs: Any) -> Any:
    """The namespace of ``xs``' library (numpy or torch); a TypeError names two inputs that mix
    libraries or devices. Non-array inputs (opaque blobs) are ignored. ``ctx`` (the kernel's
    context, or None) names the inputs in the message."""
    for x in xs:
        if type(x) is not _ndarray:
            return _dispatch(ctx, xs)
    return NUMPY


def _dispatch(ctx: Any, xs: tuple[Any, ...]) -> Any:
    torch = loaded_torch()
    tensor = torch.Tensor if torch is not None else ()
    first, key = -1, None
    for i, x in enumerate(xs):
        if isinstance(x, _ndarray):
            k: Any = "numpy"
        elif isinstance(x, tensor):
            k = x.device  # one torch.device per device: compared by value, cheaply
        else:
            continue
        if first < 0:
            first, key = i, k
        elif k != key:
            raise TypeError(
                f"expected inputs of one library and device, got {_name(ctx, first, xs[first])} and "
                f"{_name(ctx, i, x)}; move data explicitly (the Copy ops, ws.feed(name, value, device=...))"
            )
    return NUMPY if first < 0 or key == "numpy" else torch_namespace()


def _name(ctx: Any, i: int, x: Any) -> str:
    names = getattr(getattr(ctx, "op", None), "inputs", None)
    blob = f" {names[i]!r}" if names is not None and i < len(names) else ""
    return f"input {i}{blob} ({library_of(x)} on {device_of(x)})"
