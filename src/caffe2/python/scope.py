"""Caffe2's name and device scopes (``caffe2.python.scope``), one pair per thread.

>>> from caffe2.python import scope
>>> with scope.NameScope("conv1"):
...     with scope.NameScope("w"):
...         scope.CurrentNameScope()
'conv1/w/'
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from caffe2.proto import caffe2_pb2

__all__ = [
    "CurrentDeviceScope",
    "CurrentNameScope",
    "DeviceScope",
    "EmptyDeviceScope",
    "EmptyNameScope",
    "NameScope",
]

_NAMESCOPE_SEPARATOR = "/"
_threadlocal_scope = threading.local()


def CurrentNameScope() -> str:
    """The current name prefix ("" or ending in "/")."""
    if not hasattr(_threadlocal_scope, "namescope"):
        _threadlocal_scope.namescope = ""
    return _threadlocal_scope.namescope


def CurrentDeviceScope() -> Any:
    """The current ``caffe2_pb2.DeviceOption``, or None outside every DeviceScope."""
    return getattr(_threadlocal_scope, "devicescope", None)


@contextlib.contextmanager
def NameScope(prefix: str | None, reset: bool = False) -> Iterator[None]:
    """Prefix the blob names made inside with ``prefix/`` (nested scopes concatenate; ``reset``
    starts from the root)."""
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"NameScope takes a string (or None), got {type(prefix).__name__}")
    old = CurrentNameScope()
    prefix = prefix + _NAMESCOPE_SEPARATOR if prefix else ""
    _threadlocal_scope.namescope = prefix if reset else old + prefix
    try:
        yield
    finally:
        _threadlocal_scope.namescope = old


@contextlib.contextmanager
def DeviceScope(scope: Any, node_name: str | None = None) -> Iterator[None]:
    """Give the ops created inside this ``caffe2_pb2.DeviceOption`` (nested scopes inherit the
    node name and merge ``extra_info``, as in Caffe2)."""
    new = caffe2_pb2.DeviceOption()
    if scope:
        if not isinstance(scope, caffe2_pb2.DeviceOption):
            raise TypeError(f"DeviceScope takes a caffe2_pb2.DeviceOption, got {type(scope).__name__}")
        new.CopyFrom(scope)
    elif not node_name:
        raise ValueError("DeviceScope needs a device option or a node name")
    if node_name:
        new.node_name = node_name
    old = CurrentDeviceScope()
    if old is not None and old.HasField("node_name") and not new.HasField("node_name"):
        new.node_name = old.node_name
    if old is not None and len(old.extra_info):
        new.extra_info.extend(old.extra_info)
        new.extra_info.sort()
    _threadlocal_scope.devicescope = new
    try:
        yield
    finally:
        _threadlocal_scope.devicescope = old


@contextlib.contextmanager
def EmptyNameScope() -> Iterator[None]:
    """No name prefix inside."""
    old = CurrentNameScope()
    _threadlocal_scope.namescope = ""
    try:
        yield
    finally:
        _threadlocal_scope.namescope = old


@contextlib.contextmanager
def EmptyDeviceScope() -> Iterator[None]:
    """No device scope inside (ops get no device option)."""
    old = CurrentDeviceScope()
    _threadlocal_scope.devicescope = None
    try:
        yield
    finally:
        _threadlocal_scope.devicescope = old
