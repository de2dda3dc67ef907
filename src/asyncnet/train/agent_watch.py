"""A torchrun rank that outlives its agent stops.

torchrun starts each rank in a process group of its own, and only a living agent stops them: a
SIGKILL of the agent would leave the ranks training as orphans. :func:`watch_parent` makes a
rank watch its parent (the agent) and, once it is gone, stop the way SIGTERM stops a command
(``asyncnet.cli`` raises it in the main thread, so every ``finally`` runs: the process group is
destroyed, the run directory keeps its last complete epoch); a rank still alive ``grace``
seconds later (stuck in a call that ignores the signal) exits outright.

    >>> import os
    >>> with watch_parent() as w:
    ...     w.parent == os.getppid()
    True
"""

from __future__ import annotations

import os
import select
import signal
import threading
from types import TracebackType

EXIT_TERMINATED = 128 + signal.SIGTERM  # what a rank stopped by SIGTERM exits with


class ParentWatch:
    """A daemon thread that stops this process when ``parent`` is gone (see :func:`watch_parent`)."""

    def __init__(self, parent: int, grace: float = 5.0, poll: float = 0.2):
        self.parent = parent
        self.grace = grace
        self.poll = poll
        self.fired = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="asyncnet-agent-watchdog", daemon=True)

    def __enter__(self) -> "ParentWatch":
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.fired.is_set():
            return  # this process is stopping: the grace bound holds until it has ended
        self._stop.set()
        self._thread.join(self.poll * 5)

    def gone(self) -> bool:
        """True once this process has been handed to another parent (the watched one died)."""
        return os.getppid() != self.parent

    def _run(self) -> None:
        if self._wait_gone():
            self.fired.set()
            os.kill(os.getpid(), signal.SIGTERM)
            if not self._stop.wait(self.grace):
                os._exit(EXIT_TERMINATED)

    def _wait_gone(self) -> bool:
        """Block until the parent is gone (True) or the watch is stopped (False)."""
        fd = _pidfd(self.parent)
        try:
            while not self._stop.is_set():
                if self.gone():
                    return True
                if fd is not None:
                    if select.select([fd], [], [], self.poll)[0]:
                        return True
                else:
                    self._stop.wait(self.poll)
            return False
        finally:
            if fd is not None:
                os.close(fd)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


def watch_parent(grace: float = 5.0) -> ParentWatch:
    """Watch this process's parent for as long as the ``with`` block runs; when it dies, SIGTERM
    this process, and end it with status 143 if it is still alive ``grace`` seconds later."""
    return ParentWatch(os.getppid(), grace)
