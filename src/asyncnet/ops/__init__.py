"""Operators, one module per family. Importing this package registers all of them."""

import importlib

_FAMILIES = ["fill", "math", "nn", "grad", "atomic", "barrier", "collective", "loss", "optim"]

for _name in _FAMILIES:
    try:
        importlib.import_module(f"asyncnet.ops.{_name}")
    except ModuleNotFoundError as _e:  # a family not written yet; any other import error is real
        if _e.name != f"asyncnet.ops.{_name}":
            raise
