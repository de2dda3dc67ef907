"""Shared-memory segments that asyncnet cleans up itself.

``multiprocessing.shared_memory.SharedMemory`` registers every segment it opens with the
resource tracker (before Python 3.13 even when it only attaches), which then warns about
"leaked" segments and unlinks segments still in use by other processes. The process backend
owns its segments instead: the group's creator unlinks every one of them when the group closes,
even after a worker crashed, so these helpers open and unlink segments without the tracker.

    >>> seg = open_segment("asyncnet_doc_demo", create=True, size=16)
    >>> seg.size >= 16
    True
    >>> seg.close(); unlink_segment("asyncnet_doc_demo")
    True
"""

from __future__ import annotations

import sys
import threading
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

_patch_lock = threading.Lock()


def _untracked(fn, *args, **kwargs):
    # Before 3.13 there is no track=False: silence the tracker for this one call.
    with _patch_lock:
        reg, unreg = resource_tracker.register, resource_tracker.unregister
        resource_tracker.register = resource_tracker.unregister = lambda *a, **k: None
        try:
            return fn(*args, **kwargs)
        finally:
            resource_tracker.register, resource_tracker.unregister = reg, unreg


def open_segment(name: str, create: bool = False, size: int = 0) -> SharedMemory:
    """Create (``create=True``) or attach the segment ``name``, untracked."""
    if sys.version_info >= (3, 13):
        return SharedMemory(name, create=create, size=size, track=False)  # type: ignore[call-arg]
    return _untracked(SharedMemory, name, create=create, size=size)


def unlink_segment(name: str) -> bool:
    """Remove the segment ``name``; False when it did not exist."""
    try:
        seg = open_segment(name)
    except FileNotFoundError:
        return False
    try:
        if sys.version_info >= (3, 13):
            seg.unlink()
        else:
            _untracked(seg.unlink)
    except FileNotFoundError:
        return False
    finally:
        seg.close()
    return True


def close_segment(seg: SharedMemory | None) -> None:
    """Unmap ``seg``; if numpy views still point into it, leave the unmapping to the GC."""
    if seg is None:
        return
    try:
        seg.close()
    except BufferError:
        pass
