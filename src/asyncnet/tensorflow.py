"""``asyncnet.tensorflow`` is :mod:`asyncnet.interop.tensorflow` (the TensorFlow bridge), under the name examples use.

Importing either name gives the same module object, so its state (registered functions and
operators) exists once.
"""

import sys

from asyncnet.interop import tensorflow as _bridge

sys.modules[__name__] = _bridge
