"""Net observers, as Caffe2's ``Net.AddObserver`` attached them: ``TimeObserver`` times each
run of the created net (``workspace.RunNet``) and reports the average in milliseconds.

    >>> import numpy as np
    >>> from caffe2.python import core, workspace
    >>> net = core.Net("observed")
    >>> _ = net.ConstantFill([], "z", shape=[2], value=0.0)
    >>> workspace.CreateNet(net)
    True
    >>> ob = net.AddObserver("TimeObserver")
    >>> workspace.RunNet(net, num_iter=3)
    True
    >>> ob.average_time() >= 0.0, net.NumObservers()
    (True, 1)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from asyncnet.errors import NetDefinitionError


class TimeObserver:
    """The wall time of each run of one net."""

    def __init__(self) -> None:
        self._total_ms = 0.0
        self._runs = 0

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, started: float, runs: int = 1) -> None:
        self._total_ms += (time.perf_counter() - started) * 1000.0
        self._runs += runs

    def average_time(self) -> float:
        """The average time of one run, in milliseconds (0 before any run)."""
        return self._total_ms / self._runs if self._runs else 0.0

    def debug_info(self) -> str:
        return f"average time: {self.average_time()} msecs"


_TYPES = {"TimeObserver": TimeObserver}
_attached: dict[str, list[TimeObserver]] = {}


def add(net_name: str, observer_type: str) -> TimeObserver:
    if observer_type not in _TYPES:
        raise NetDefinitionError(f"AddObserver: unknown observer type {observer_type!r}; available: {sorted(_TYPES)}")
    ob = _TYPES[observer_type]()
    _attached.setdefault(net_name, []).append(ob)
    return ob


def remove(net_name: str, ob: TimeObserver) -> None:
    obs = _attached.get(net_name, [])
    if ob in obs:
        obs.remove(ob)


def count(net_name: str) -> int:
    return len(_attached.get(net_name, []))


@contextlib.contextmanager
def observing(net_name: str, num_iter: int) -> Iterator[None]:
    """Time a run of ``num_iter`` iterations of net ``net_name`` for its observers."""
    obs = list(_attached.get(net_name, []))
    started = [ob.start() for ob in obs]
    yield
    for ob, t0 in zip(obs, started):
        ob.stop(t0, num_iter)
