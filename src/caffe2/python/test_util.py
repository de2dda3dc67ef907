"""Caffe2's ``caffe2.python.test_util``: the base TestCase of Caffe2's own unit tests.

Each test starts and ends with an empty current workspace::

    >>> from caffe2.python import test_util
    >>> test_util.rand_array(2, 3).shape
    (2, 3)
"""

from __future__ import annotations

import unittest
from typing import Any

import numpy as np

from caffe2.python import _legacy_numpy, core, workspace

_legacy_numpy.restore()  # Caffe2's tests use np.float and np.asscalar, gone from NumPy 2

__all__ = ["TestCase", "rand_array", "randBlobFloat32", "randBlobsFloat32", "numOps", "str_compare"]


def rand_array(*dims: int) -> np.ndarray:
    """A float32 array of ``dims`` with values uniform in [-0.5, 0.5) (0-d when no dims)."""
    return np.asarray(np.random.rand(*dims) - 0.5).astype(np.float32)


def randBlobFloat32(name: str, *dims: int, **kwargs: Any) -> core.BlobReference:
    """Feed ``rand_array(*dims)`` as blob ``name``; returns its reference."""
    offset = kwargs.pop("offset", 0)
    workspace.FeedBlob(name, rand_array(*dims) + np.float32(offset))
    return core.BlobReference(name)


def randBlobsFloat32(names: list[str], *dims: int, **kwargs: Any) -> list[core.BlobReference]:
    """:func:`randBlobFloat32` for each of ``names``."""
    return [randBlobFloat32(name, *dims, **kwargs) for name in names]


def numOps(net: Any) -> int:
    """The number of operators of ``net`` (a ``core.Net`` or a NetDef proto)."""
    proto = net.Proto() if hasattr(net, "Proto") else net
    return len(proto.op)


def str_compare(a: Any, b: Any, encoding: str = "utf8") -> bool:
    """Whether ``a`` and ``b`` are the same text (bytes are decoded with ``encoding``)."""

    def text(s: Any) -> str:
        return s.decode(encoding) if isinstance(s, bytes) else str(s)

    return text(a) == text(b)


class TestCase(unittest.TestCase):
    """A unittest case that resets the current Caffe2 workspace before and after each test."""

    @classmethod
    def setUpClass(cls) -> None:
        workspace.GlobalInit(["caffe2", "--caffe2_log_level=0"])
        core.SetEnginePref({}, {})

    def setUp(self) -> None:
        self.ws = workspace.C.Workspace()
        workspace.ResetWorkspace()

    def tearDown(self) -> None:
        workspace.ResetWorkspace()
