"""multiprocessing's resource tracker, told again what this process owns when it was killed.

The shared-memory segments asyncnet creates (atomics, Hogwild's shared parameters) are
registered with the resource tracker, a helper process that unlinks them if their creator is
killed. If the tracker itself is killed (a fault campaign or an ``kill`` aimed at the process
tree can hit it), Python starts a new one at the next call, warns "Some resources might leak",
and the new tracker knows none of the old names: each later unregister prints a ``KeyError``
traceback from the tracker on our stderr, and a crash would leave the segments behind.

:func:`register` and :func:`unregister` check the tracker first; if it died they start the new
one themselves (no warning: nothing is lost) and register again every name this process still
owns, so cleanup-on-crash keeps working and nothing is printed::

    >>> from asyncnet import _tracker
    >>> _tracker.register("/asyncnet_doc_example"); "/asyncnet_doc_example" in _tracker.owned()
    True
    >>> _tracker.unregister("/asyncnet_doc_example"); _tracker.owned()
    []
"""

from __future__ import annotations

import os
import threading
import warnings
from multiprocessing import resource_tracker

__all__ = ["register", "unregister", "owned"]

_lock = threading.Lock()
_names: dict[str, str] = {}  # name -> resource type, registered by this process (pid below)
_pid = os.getpid()


def register(name: str, rtype: str = "shared_memory") -> None:
    """Have the tracker unlink ``name`` if this process dies without unregistering it."""
    with _lock:
        _revive()
        resource_tracker.register(name, rtype)
        _names[name] = rtype


def unregister(name: str, rtype: str = "shared_memory") -> None:
    """This process removed ``name`` itself: the tracker forgets it."""
    with _lock:
        _revive()
        _names.pop(name, None)
        resource_tracker.unregister(name, rtype)


def owned() -> list[str]:
    """The names this process has registered and not unregistered."""
    with _lock:
        _forget_if_forked()
        return sorted(_names)


def _forget_if_forked() -> None:
    """A forked child inherits the dict but owns none of the names."""
    global _pid
    if os.getpid() != _pid:
        _names.clear()
        _pid = os.getpid()


def _revive() -> None:
    """If the tracker this process talks to has died, start a new one and register our names again."""
    _forget_if_forked()
    tracker = resource_tracker._resource_tracker
    alive = getattr(tracker, "_check_alive", None)  # private since 3.8; without it, Python's own behaviour
    if getattr(tracker, "_fd", None) is None or alive is None or alive():
        return
    with warnings.catch_warnings():  # its "might leak" warning: the names are registered again below
        warnings.filterwarnings("ignore", message="resource_tracker: process died unexpectedly", category=UserWarning)
        tracker.ensure_running()
    for name, rtype in _names.items():
        resource_tracker.register(name, rtype)
