"""NumPy's aliases of the builtin types (``np.str``, ``np.int``, ``np.float``, ``np.object``,
``np.complex``, removed in NumPy 1.24) which Caffe2's record code and tests still use, restored
as the builtins they were when NumPy lacks them.

    >>> import numpy as np
    >>> restore_numpy_aliases()
    >>> np.dtype(np.str) == np.dtype(str)
    True
"""

from __future__ import annotations

import numpy as np

__all__ = ["restore_numpy_aliases"]

_ALIASES = {"int": int, "float": float, "object": object, "str": str, "complex": complex}


def restore_numpy_aliases() -> None:
    """Give ``numpy`` back each removed alias it does not define."""
    for name, builtin in _ALIASES.items():
        if name not in np.__dict__:
            setattr(np, name, builtin)
