"""``asyncnet.onnx``: an alias of :mod:`asyncnet.interop.onnx` (import, backend, export of ONNX models).

Importing asyncnet does not import onnx; ``asyncnet.onnx`` (attribute or import) does."""

from asyncnet.interop.onnx import *  # noqa: F403
from asyncnet.interop.onnx import __all__, __getattr__  # noqa: F401
