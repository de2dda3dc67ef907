"""``asyncnet.torch`` is :mod:`asyncnet.interop.torch` (the PyTorch bridge), under the name examples use.

Importing either name gives the same module object, so its state (registered functions and
operators) exists once.
"""

import sys

from asyncnet.interop import torch as _bridge

sys.modules[__name__] = _bridge
