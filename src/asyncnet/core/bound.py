"""Bound outputs: arrays a kernel writes into instead of returning a fresh array.

A gradient bucket (DDP's ``gradient_as_bucket_view``) keeps its gradients as consecutive views
of one flat buffer, so the all-reduce runs on the flat buffer itself: no concatenation before
it, no copy back after it. :func:`bind_views` makes such views (the buffer's memory is a
:class:`BoundMemory`, which marks them); a kernel that supports it asks
:meth:`~asyncnet.core.registry.OpContext.bound_output` for its output's current array and, when
one is bound (same shape and dtype), writes its result there with ``out=`` (the same BLAS or
ufunc call, so the same bits). Every other kernel returns a fresh array as always, which simply
unbinds that blob (``AllreduceStart`` then leaves that bucket to the sync's concatenation).

    >>> import numpy as np
    >>> a, b = bind_views([np.ones((2, 2), np.float32), np.zeros(3, np.float32)])
    >>> is_bound(a), bound_flat([a, b]).tolist()
    (True, [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    >>> bound_flat([b, a]) is None  # not in buffer order
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet._flatviews import contiguous_run

__all__ = ["BoundMemory", "bind_views", "bound_flat", "is_bound"]

_nd = np.ndarray


class BoundMemory(bytearray):
    """The memory of a flat buffer whose views are bound outputs (a plain bytearray otherwise)."""


def is_bound(a: Any) -> bool:
    """Whether ``a`` is a numpy view of a flat buffer over a :class:`BoundMemory` (numpy keeps
    that flat array as the view's ``base``, and a memoryview of the memory as the flat array's)."""
    if type(a) is not _nd:
        return False
    flat = a.base
    return type(flat) is _nd and type(flat.base) is memoryview and type(flat.base.obj) is BoundMemory


def bound_flat(arrays: Sequence[Any]) -> np.ndarray | None:
    """The 1-D array over ``arrays`` when they are C-contiguous views of one bound flat buffer
    (so of one dtype), each starting where the previous one ends; else None."""
    return contiguous_run(arrays) if arrays and is_bound(arrays[0]) else None


def bind_views(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copies of ``arrays`` (numpy, one dtype) as consecutive views of one new :class:`BoundMemory`."""
    dtype = arrays[0].dtype
    flat = np.frombuffer(BoundMemory(sum(a.size for a in arrays) * dtype.itemsize), dtype)
    views, offset = [], 0
    for a in arrays:
        v = flat[offset : offset + a.size].reshape(a.shape)
        np.copyto(v, a)
        views.append(v)
        offset += a.size
    return views
