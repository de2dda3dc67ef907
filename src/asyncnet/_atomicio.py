"""Crash-safe file writes: a private temp file in the target folder, fsynced, then renamed.

A reader of ``path`` sees the old file or the new one, never half of one, whatever kills the
writer and when. The temp file comes from :func:`tempfile.mkstemp` (an unpredictable name,
created with ``O_EXCL``, so no symlink planted in a shared folder can redirect the write) and
carries the writer's pid, so a later write to the same path removes strays that a killed
writer left behind (never the temp file of a write still in progress in another thread)::

    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = atomic_write_npz(os.path.join(d, "ckpt.npz"), {"w": np.ones(3)})
    >>> sorted(os.listdir(d)), np.load(p)["w"].sum()
    (['ckpt.npz'], np.float64(3.0))

This module imports nothing from asyncnet, so any layer may use it.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np

__all__ = ["atomic_write", "atomic_write_npz", "atomic_write_text", "remove_strays"]

# Temp files this process is writing right now: a stray of this pid (left by an earlier process
# that had the same pid, as in a restarted container) is removed, but not another thread's
# write in progress to the same path.
_writing: set[str] = set()
_writing_lock = threading.Lock()


def _prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def _stray_pid(name: str, prefix: str) -> int | None:
    """The writer pid encoded in a temp name ``.<base>.<pid>.<random>.tmp``, or None."""
    if not (name.startswith(prefix) and name.endswith(".tmp")):
        return None
    m = re.match(r"(\d+)\.", name[len(prefix) :])
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_strays(path: str | os.PathLike[str]) -> list[str]:
    """Delete temp files of earlier writes to ``path`` whose writer process is gone; returns them."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    prefix = _prefix(path)
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        pid = _stray_pid(name, prefix)
        if pid is None or (pid != os.getpid() and _alive(pid)):
            continue
        if pid == os.getpid():
            with _writing_lock:
                if os.path.join(folder, name) in _writing:
                    continue
        try:
            os.remove(os.path.join(folder, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], Any]) -> str:
    """Call ``write(f)`` on a fresh temp file beside ``path``, fsync it, rename it onto ``path``
    and fsync the folder. On any failure the temp file is removed and ``path`` is untouched.
    Returns ``path`` as a string. Raises OSError when the folder is not writable."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    remove_strays(path)
    with _writing_lock:  # registered before it exists: no other thread can see it unregistered
        fd, tmp = tempfile.mkstemp(prefix=f"{_prefix(path)}{os.getpid()}.", suffix=".tmp", dir=folder)
        _writing.add(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    finally:
        with _writing_lock:
            _writing.discard(tmp)
    _fsync_dir(folder)
    return path


def atomic_write_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> str:
    """Write ``arrays`` as an uncompressed npz file (readable with ``allow_pickle=False``)."""
    return atomic_write(path, lambda f: np.savez(f, **dict(arrays)))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> str:
    """Write ``text`` (UTF-8)."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
