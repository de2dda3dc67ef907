"""NumPy names that Caffe2's 2018 programs and tests still use and NumPy 1.24 removed:
``np.float``, ``np.int``, ``np.object``, ``np.str``, ``np.complex`` (each the builtin type it
aliased) and ``np.asscalar`` (removed in 1.23). :func:`restore` puts back the missing ones and
leaves every name NumPy still has untouched.

    >>> import numpy as np
    >>> from caffe2.python import _legacy_numpy
    >>> _legacy_numpy.restore(); np.float is float
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["restore"]

_BUILTIN_ALIASES = {"int": int, "float": float, "object": object, "str": str, "complex": complex}


def _asscalar(a: Any) -> Any:
    """The one element of ``a`` as a Python scalar (NumPy's former ``np.asscalar``)."""
    return np.asarray(a).item()


def restore() -> None:
    """Set each removed alias on the ``numpy`` module unless NumPy defines that name."""
    for name, value in {**_BUILTIN_ALIASES, "asscalar": _asscalar}.items():
        if name not in np.__dict__:
            setattr(np, name, value)
