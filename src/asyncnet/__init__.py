"""asyncnet: parallel and asynchronous neural-network execution and training.

>>> import numpy as np, asyncnet as an
>>> ws = an.Workspace()
>>> ws.feed("x", np.ones((2, 3), np.float32))
>>> net = an.Net("forward")
>>> _ = net.Relu("x", "y")
>>> ws.run_net_once(net)
>>> ws.fetch("y").sum()
np.float32(6.0)
"""

import asyncnet.exec
import asyncnet.ops  # noqa: F401  (registers the operators)
from asyncnet.autodiff import add_gradient_ops
from asyncnet.core.defs import DeviceOption, NetDef, OperatorDef
from asyncnet.core.net import BlobRef, Net
from asyncnet.core.registry import Arg, get_schema, register_gradient, register_op, registered_ops
from asyncnet.core.workspace import Workspace
from asyncnet.errors import (
    AsyncNetError,
    BlobNotFoundError,
    CheckpointError,
    ExecutionError,
    NetBusyError,
    NetDefinitionError,
    OperatorError,
    SyncAbortedError,
    SyncError,
    SyncMismatchError,
    SyncTimeoutError,
)
from asyncnet.exec import ExecutionStep, Plan, execution_step

__version__ = "0.1.0"


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name == "onnx":  # lazy: importing asyncnet must not import onnx
        import importlib

        return importlib.import_module("asyncnet.onnx")
    raise AttributeError(f"module 'asyncnet' has no attribute {name!r}")


__all__ = [
    "AsyncNetError",
    "BlobNotFoundError",
    "CheckpointError",
    "ExecutionError",
    "NetBusyError",
    "NetDefinitionError",
    "OperatorError",
    "SyncAbortedError",
    "SyncError",
    "SyncMismatchError",
    "SyncTimeoutError",
    "DeviceOption",
    "NetDef",
    "OperatorDef",
    "Arg",
    "get_schema",
    "register_gradient",
    "register_op",
    "registered_ops",
    "Workspace",
    "BlobRef",
    "Net",
    "add_gradient_ops",
    "ExecutionStep",
    "Plan",
    "execution_step",
    "__version__",
]
