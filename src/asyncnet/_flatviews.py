"""Views of one flat buffer: whether numpy arrays lie one after another in one C-contiguous base.

A gradient bucket keeps its gradients as consecutive views of one flat buffer (DDP's
``gradient_as_bucket_view``); the core's bound outputs and the sync backends both need to
recognise such a run of views and get the flat 1-D view over it. It is plain numpy, below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["contiguous_run"]


def contiguous_run(arrays: Sequence[Any]) -> np.ndarray | None:
    """One 1-D view over ``arrays`` when they are C-contiguous numpy views of one C-contiguous
    base array, each starting where the previous one ends (a gradient bucket's views); else None.

        >>> flat = np.arange(5.0)
        >>> contiguous_run([flat[:2].reshape(2, 1), flat[2:4]]).tolist()
        [0.0, 1.0, 2.0, 3.0]
        >>> contiguous_run([flat[2:4], flat[:2]]) is None
        True
    """
    if not arrays or type(arrays[0]) is not np.ndarray:
        return None
    base = arrays[0].base
    if type(base) is not np.ndarray or not base.flags.c_contiguous:
        return None
    start = end = arrays[0].__array_interface__["data"][0]
    for a in arrays:
        if (
            type(a) is not np.ndarray
            or a.base is not base
            or not a.flags.c_contiguous
            or a.__array_interface__["data"][0] != end
        ):
            return None
        end += a.nbytes
    origin, k = base.__array_interface__["data"][0], base.itemsize
    return base.reshape(-1)[(start - origin) // k : (end - origin) // k]
