"""float32 -> float16 rounding for the kernels' mixed-precision paths.

numpy rounds to nearest even, but it raises the underflow flag element by element, and a
result in float16's subnormal range (|x| < 6.1e-5: small gradients, weight-decay terms) costs
about 25 times a normal one. torch rounds the same way (bit for bit) without that cost; it is
used when it is already imported (this module never imports it).

    >>> to_half(np.array([1.0, 1e-6, 70000.0], np.float32)).tolist()
    [1.0, 1.0132789611816406e-06, inf]
"""

from __future__ import annotations

import numpy as np

from asyncnet.tensor.namespace import loaded_torch

__all__ = ["to_half"]

#: below this many elements numpy's conversion is cheaper than a call into torch
_TORCH_FROM = 4096


def to_half(x: np.ndarray) -> np.ndarray:
    """``x`` (a float32 numpy array) rounded to float16, as ``x.astype(np.float16)`` gives it."""
    torch = loaded_torch() if x.size >= _TORCH_FROM and x.dtype == np.float32 else None
    if torch is None:
        with np.errstate(over="ignore", under="ignore"):
            return x.astype(np.float16)
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float16).numpy().reshape(x.shape)
