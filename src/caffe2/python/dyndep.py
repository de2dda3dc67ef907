"""Caffe2's ``dyndep``: loading C++ operator libraries. asyncnet runs Python operators only.

A library path that does not exist (Caffe2's ``@/caffe2/...`` build targets) is ignored with a
message, as Caffe2 did; an existing shared library is refused with a clear error, since its C++
operators cannot register with asyncnet (register Python kernels with
:func:`asyncnet.register_op` instead)::

    >>> from caffe2.python import dyndep
    >>> dyndep.InitOpsLibrary("@/caffe2/caffe2/distributed:file_store_handler_ops")
    Ignoring @/caffe2/caffe2/distributed:file_store_handler_ops as it is not a valid file.
"""

from __future__ import annotations

import os

__all__ = ["GetImportedOpsLibraries", "InitOpsLibrary", "OpsLibraryError"]


class OpsLibraryError(RuntimeError):
    """A C++ operator library was asked for: asyncnet cannot load one."""


def InitOpsLibrary(name: str, trigger_lazy: bool = True) -> None:
    """Ignore a missing library (as Caffe2 did); refuse an existing one with an explanation."""
    if not os.path.exists(name):
        print(f"Ignoring {name} as it is not a valid file.")
        return
    raise OpsLibraryError(
        f"cannot load the Caffe2 C++ operator library {name}: asyncnet runs Python operators; "
        "register the operators you need with asyncnet.register_op (see docs/caffe2.md)"
    )


def GetImportedOpsLibraries() -> set[str]:
    """The libraries loaded: none."""
    return set()
