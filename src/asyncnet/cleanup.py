"""What asyncnet leaves behind only when every one of its processes was killed at once.

Normally nothing is left: a group's creator unlinks its shared-memory segments when it closes,
its workers do it when the creator dies (and then exit), and multiprocessing's resource tracker
unlinks the Hogwild and atomic segments once the process tree is gone. When all of them die
together (``kill -9`` of the whole process group, the OOM killer taking the tracker too), the
segments stay in ``/dev/shm`` until reboot. Every name asyncnet makes carries the process id of
its creator, so :func:`find_stale` can tell what belongs to a process that no longer exists:

- ``/dev/shm/asyncnet_sync_<pid>_*``: gradient-sync groups (:mod:`asyncnet.sync.process`);
- ``/dev/shm/asyncnet_hw_<pid>_*``: Hogwild parameters; ``/dev/shm/asyncnet_atomic_<pid>_*``:
  anonymous shared atomics (named ones belong to whoever named them and are never touched);
- ``<tempdir>/asyncnet_fn_<pid>_*``: the folders the process runner passes ``fn`` through.

``asyncnet clean`` removes them (``--dry-run`` only lists them). Items of a living process, and
names without a pid, are left alone.

    >>> [item.path for item in find_stale(shm_dir="/nonexistent", tmp_dir="/nonexistent")]
    []
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass

__all__ = ["StaleItem", "find_stale", "remove", "pid_gone", "release_segments_of"]

_NAME = re.compile(r"^asyncnet_(sync|hw|atomic|fn)_(\d+)_")


@dataclass(frozen=True)
class StaleItem:
    """A segment (``kind`` "segment") or folder ("folder") whose creator ``pid`` is gone."""

    path: str
    kind: str
    pid: int
    nbytes: int


def pid_gone(pid: int) -> bool:
    """True when no process ``pid`` exists (a zombie counts as gone: it runs no more code)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _size(path: str) -> int:
    try:
        if os.path.isdir(path):
            return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        return os.path.getsize(path)
    except OSError:
        return 0


def find_stale(shm_dir: str = "/dev/shm", tmp_dir: str | None = None) -> list[StaleItem]:
    """Every asyncnet segment and runner folder whose creating process no longer exists."""
    tmp_dir = tempfile.gettempdir() if tmp_dir is None else tmp_dir
    found = []
    for folder, want in ((shm_dir, ("sync", "hw", "atomic")), (tmp_dir, ("fn",))):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            m = _NAME.match(name)
            if m is None or m.group(1) not in want:
                continue
            pid = int(m.group(2))
            if pid_gone(pid):
                path = os.path.join(folder, name)
                found.append(StaleItem(path, "folder" if m.group(1) == "fn" else "segment", pid, _size(path)))
    return found


def remove(item: StaleItem) -> bool:
    """Remove one stale item; False when it was already gone."""
    try:
        if item.kind == "folder":
            shutil.rmtree(item.path)
        else:
            os.unlink(item.path)  # /dev/shm/NAME: the same as shm_unlink("/NAME")
    except FileNotFoundError:
        return False
    return True


def release_segments_of(pid: int, shm_dir: str = "/dev/shm") -> list[str]:
    """Unlink the Hogwild and anonymous atomic segments of the dead process ``pid`` and tell
    multiprocessing's resource tracker, which ``pid`` had registered them with: a worker whose
    parent died cleans up in its place, so the tracker, when the last worker exits, has nothing
    left to unlink and nothing to report as leaked. A name is unregistered only by the process
    that removed it (the tracker prints a traceback for a name it does not hold), and only when
    this process talks to the tracker its parent started (a spawned child). Returns the names
    this call removed.

        >>> release_segments_of(2**22 + 1, shm_dir="/nonexistent")
        []
    """
    try:
        names = sorted(os.listdir(shm_dir))
    except OSError:
        return []
    removed = []
    for name in names:
        m = _NAME.match(name)
        if m is None or m.group(1) not in ("hw", "atomic") or int(m.group(2)) != pid:
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
        except FileNotFoundError:  # a sibling worker removed it first
            continue
        removed.append(name)
        _forget_in_tracker("/" + name)
    return removed


def _forget_in_tracker(name: str) -> None:
    from multiprocessing import resource_tracker

    if getattr(resource_tracker._resource_tracker, "_fd", None) is None:  # no tracker shared with the parent
        return
    try:
        resource_tracker.unregister(name, "shared_memory")
    except OSError:  # the tracker is gone too: it reports nothing then
        pass
