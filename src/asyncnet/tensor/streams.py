"""CUDA streams and events for the async executor: what Caffe2's async_scheduling did on GPUs.

Policy: every executor thread owns one stream per CUDA device (created the first time it runs a
chain there), so chains on two threads never serialise on one stream. A chain placed on
``cuda:i`` runs with device ``i`` current and its thread's stream current; before its first op
it makes that stream wait on the *event* recorded at the end of each parent chain that ran on
another stream (no host synchronisation: the GPU orders the work), and after its last op it
records its own event. When the run ends, the streams it used are synchronised, so ``wait()``
returns only when the GPU work is done.

State, per run (a :class:`RunStreams`)::

    events  dict[int, (stream, event)]  the stream each chain ran on and the event it recorded
    used    dict[int, stream]           every stream the run used (by id), synchronised at the end

The backend (``torch.cuda`` by default) makes streams and device contexts; tests pass a
stand-in with the same four calls, so the bookkeeping is tested on machines without CUDA::

    >>> class Stream:
    ...     def __init__(self, d): self.d, self.waited, self.synced = d, [], 0
    ...     def wait_event(self, e): self.waited.append(e)
    ...     def record_event(self): return ("event", id(self))
    ...     def synchronize(self): self.synced += 1
    >>> class Backend:
    ...     def new_stream(self, device): return Stream(device)
    ...     def context(self, device, stream): import contextlib; return contextlib.nullcontext()
    >>> book = StreamBook(Backend()); run = RunStreams()
    >>> s0 = book.begin(run, 0, parents=[]); book.end(run, 0, s0)
    >>> s1 = book.begin(run, 0, parents=[0]); s1 is s0, s0.waited   # same thread, same stream: no wait
    (True, [])
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["StreamBook", "RunStreams", "TorchCudaBackend", "BACKEND"]

#: The backend new nets use: None means :class:`TorchCudaBackend`; tests put a stand-in here.
BACKEND: Any = None


class TorchCudaBackend:
    """Streams and contexts from ``torch.cuda`` (imported on first use)."""

    def new_stream(self, device: int) -> Any:
        import torch

        return torch.cuda.Stream(device=device)

    def context(self, device: int, stream: Any) -> Any:
        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.device(device))
        stack.enter_context(torch.cuda.stream(stream))
        return stack


class RunStreams:
    """The events and streams of one run (see the module docstring)."""

    __slots__ = ("events", "used")

    def __init__(self) -> None:
        self.events: dict[int, tuple[Any, Any]] = {}
        self.used: dict[int, Any] = {}


class StreamBook:
    """Per-thread streams of one backend, and the per-chain steps of the policy above."""

    def __init__(self, backend: Any = None):
        self.backend = backend if backend is not None else TorchCudaBackend()
        self._local = threading.local()

    def stream(self, device: int) -> Any:
        """This thread's stream on ``device`` (made on first use)."""
        streams = getattr(self._local, "streams", None)
        if streams is None:
            streams = self._local.streams = {}
        s = streams.get(device)
        if s is None:
            s = streams[device] = self.backend.new_stream(device)
        return s

    def begin(self, run: RunStreams, device: int, parents: Iterable[int]) -> Any:
        """This thread's stream on ``device``, made to wait on each parent's event from another stream."""
        s = self.stream(device)
        for p in parents:
            rec = run.events.get(p)
            if rec is not None and rec[0] is not s:
                s.wait_event(rec[1])
        return s

    def end(self, run: RunStreams, chain: int, stream: Any) -> None:
        """Chain ``chain`` queued its last op on ``stream``: record its event (dict writes: atomic under the GIL)."""
        run.events[chain] = (stream, stream.record_event())
        run.used[id(stream)] = stream

    def context(self, device: int, stream: Any) -> Any:
        """A context with ``device`` and ``stream`` current."""
        return self.backend.context(device, stream)

    @staticmethod
    def synchronize(run: RunStreams) -> None:
        """Wait on the host for every stream the run used."""
        for s in list(run.used.values()):
            s.synchronize()
