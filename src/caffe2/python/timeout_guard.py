"""Caffe2's ``timeout_guard``: end the process when a block runs longer than a deadline.

:func:`CompleteInTimeOrDie` starts a watcher thread for the block and joins it when the block
ends; if the deadline passes first, the watcher logs every thread's stack and ends the process
with exit status 1 (Caffe2's behaviour: a hung data-parallel step should not hang the job)::

    >>> from caffe2.python import timeout_guard
    >>> with timeout_guard.CompleteInTimeOrDie(60):
    ...     pass
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Iterator

__all__ = ["CompleteInTimeOrDie", "EuthanizeIfNecessary", "WatcherThread"]

log = logging.getLogger("timeout_guard")


class WatcherThread(threading.Thread):
    """Waits ``timeout_secs`` for :meth:`completed`; otherwise dumps the stacks and exits the process."""

    def __init__(self, timeout_secs: float):
        super().__init__(name="caffe2-timeout-guard", daemon=True)
        self.timeout_secs = timeout_secs
        self._done = threading.Event()

    def run(self) -> None:
        if self._done.wait(self.timeout_secs):
            return
        log.error("Call did not finish in time (%.1f s). Stacks of all threads:", self.timeout_secs)
        for tid, frame in sys._current_frames().items():
            log.error("Thread %s:\n%s", tid, "".join(traceback.format_stack(frame)))
        logging.shutdown()
        os._exit(1)

    def completed(self) -> None:
        self._done.set()


@contextlib.contextmanager
def CompleteInTimeOrDie(timeout_secs: float) -> Iterator[WatcherThread]:
    """Run the block; if it lasts longer than ``timeout_secs``, end the process (exit status 1)."""
    watcher = WatcherThread(timeout_secs)
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.completed()
        watcher.join()


def EuthanizeIfNecessary(timeout_secs: float = 120) -> WatcherThread:
    """Start a watcher that ends the process unless ``.completed()`` is called within ``timeout_secs``."""
    watcher = WatcherThread(timeout_secs)
    watcher.start()
    return watcher
