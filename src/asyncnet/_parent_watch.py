"""A torchrun rank that outlives its agent stops (this module imports nothing from asyncnet).

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

import contextlib
import os
import select
import signal
import threading
from collections.abc import Iterator
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

    def __enter__(self) -> ParentWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.fired.is_set():
            return  # this process is stopping: the grace bound holds until it has ended
        self._stop.set()
        self._thread.join(self.poll * 5)

    @contextlib.contextmanager
    def hard(self) -> Iterator[None]:
        """Inside this block the kernel kills this process (SIGKILL) the moment its parent dies
        (Linux ``PR_SET_PDEATHSIG``): for calls that hold the GIL while they wait (a
        ``torch.distributed`` store connecting to a dead agent), where the watching thread
        cannot run. Nothing of the run exists yet there, so there is nothing to release."""
        armed = _pdeathsig(signal.SIGKILL)
        if armed and self.gone():
            os._exit(EXIT_TERMINATED)  # the parent died before the kernel was asked to watch
        try:
            yield
        finally:
            if armed:
                _pdeathsig(0)

    def gone(self) -> bool:
        """True once this process has been handed to another parent (the watched one died), or
        when the parent it was given is init although torchrun is not init (the agent died
        before this process could read its pid)."""
        return os.getppid() != self.parent or (self.parent == 1 and not _init_is_torchrun())

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


def _init_is_torchrun() -> bool:
    """Whether pid 1 is torchrun's agent (a container started with torchrun as its command)."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return b"torch" in f.read()
    except OSError:
        return True  # cannot tell: never take init for a dead agent


def _pdeathsig(sig: int) -> bool:
    """Ask the kernel to send ``sig`` (0: nothing) to this process when its parent dies."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


_process_watch: ParentWatch | None = None  # the watch started by watch_torchrun_agent, for the process's life


def watch_parent(grace: float = 5.0) -> ParentWatch | contextlib.nullcontext:
    """Watch this process's parent for as long as the ``with`` block runs; when it dies, SIGTERM
    this process, and end it with status 143 if it is still alive ``grace`` seconds later. A
    no-op when :func:`watch_torchrun_agent` already watches it for the whole process."""
    if _process_watch is not None:
        return contextlib.nullcontext(_process_watch)
    return ParentWatch(os.getppid(), grace)


def watch_torchrun_agent(parent: int, grace: float = 5.0) -> ParentWatch | None:
    """In a torchrun rank (torchrun's environment is set), watch ``parent`` (the agent: the
    parent pid read first thing at start-up, so an agent that died meanwhile is seen as gone)
    until the process ends; returns the watch, or None outside torchrun."""
    global _process_watch
    if "TORCHELASTIC_RUN_ID" not in os.environ or _process_watch is not None:
        return _process_watch
    _process_watch = ParentWatch(parent, grace).__enter__()
    return _process_watch
