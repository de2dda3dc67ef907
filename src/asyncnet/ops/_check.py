"""Input checks shared by operator kernels: messages say what was expected and what was found.

They accept numpy arrays and torch tensors alike (see :mod:`asyncnet.tensor.namespace`)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from asyncnet.tensor.namespace import is_torch

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def array(ctx: Any, x: Any, i: int) -> np.ndarray:
    """``x`` if it is a numpy array or a torch tensor, else a TypeError naming input ``i``."""
    if not isinstance(x, np.ndarray) and not is_torch(x):
        raise TypeError(
            f"expected a numpy array or torch tensor in input {i} {ctx.op.inputs[i]!r}, got {type(x).__name__}"
        )
    return x


def as_array(x: Any) -> np.ndarray:
    """A kernel result as an ndarray: numpy ufuncs return scalars (``np.float64``) for 0-d inputs,
    and a scalar blob would be refused by the next op. Example: ``as_array(np.tanh(np.array(0.5)))``."""
    return x if isinstance(x, np.ndarray) or is_torch(x) else np.asarray(x)


def float_array(ctx: Any, x: Any, i: int) -> np.ndarray:
    """``x`` if it is a floating-point numpy array or torch tensor."""
    if isinstance(x, np.ndarray):
        if x.dtype.type in FLOAT_DTYPES:
            return x
    elif array(ctx, x, i).is_floating_point():
        return x
    raise TypeError(f"expected a float array in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")


def same_dtype(ctx: Any, arrays: list[np.ndarray]) -> None:
    """All ``arrays`` share one dtype."""
    first = arrays[0].dtype
    for a in arrays:
        if a.dtype is not first and a.dtype != first:  # dtype singletons make `is` the fast answer
            break
    else:
        return
    dtypes = [a.dtype for a in arrays]
    if any(d != dtypes[0] for d in dtypes):
        found = ", ".join(f"{n!r}: {d}" for n, d in zip(ctx.op.inputs, dtypes))
        raise TypeError(f"expected inputs of one dtype, got {found}")


def ndim(ctx: Any, x: np.ndarray, i: int, expected: int) -> None:
    if x.ndim != expected:
        raise ValueError(f"expected a {expected}-D array in input {i} {ctx.op.inputs[i]!r}, got shape {x.shape}")


def broadcast_shape(ctx: Any, a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"shapes {a.shape} ({ctx.op.inputs[0]!r}) and {b.shape} ({ctx.op.inputs[1]!r}) do not broadcast"
        ) from None


def flatten_2d(x: np.ndarray, axis: int) -> np.ndarray:
    """View ``x`` as 2-D: dims before ``axis`` become rows, the rest columns (Caffe2's rule)."""
    shape = x.shape
    if axis == 1 and len(shape) == 2:
        return x  # already 2-D: the common FC case costs nothing
    return x.reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))  # explicit cols: [0, K] keeps its K


def axis_of(ctx: Any, x: np.ndarray, axis: int, name: str = "axis") -> int:
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a <= x.ndim:
        raise ValueError(f"argument {name}={axis} is out of range for an input of shape {x.shape}")
    return a


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 2**62


RAM_BYTES = _ram_bytes()


def check_alloc(n_elements: int, itemsize: int, what: str) -> None:
    """Refuse an output larger than the machine's RAM (a ValueError naming it) before allocating it,
    rather than swapping for minutes or a MemoryError. Example: ``check_alloc(2**40, 4, "the output")``."""
    need = int(n_elements) * itemsize
    if need > RAM_BYTES:
        raise ValueError(f"{what} needs {need} bytes, more than this machine's {RAM_BYTES} bytes of memory")
