"""barrier() and all_reduce_mean(): the epoch-end rounds of the trainers, named operations of
every gradient sync (local, threads, processes), checked against numpy's mean."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from asyncnet.sync import GradientSync, LocalGradientSync, ThreadedGradientSync, run_parallel_workers

pytestmark = pytest.mark.timeout(120)


def _figures(sync) -> np.ndarray:
    values = np.array([1.5 * sync.worker_id, 2.0**sync.worker_id, 7.0], np.float64)
    sync.all_reduce_mean(values)
    sync.barrier()
    return values


def _want(n: int) -> np.ndarray:
    return np.mean([[1.5 * i, 2.0**i, 7.0] for i in range(n)], axis=0)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_all_reduce_mean_gives_every_worker_the_mean(backend: str) -> None:
    results = run_parallel_workers(3, _figures, backend=backend, timeout=60)
    for r in results:
        np.testing.assert_allclose(r, _want(3), rtol=1e-15)


def test_the_barrier_waits_for_the_last_worker() -> None:
    syncs = ThreadedGradientSync.new_workers(3, timeout=30)
    passed: list[float] = []
    start = time.monotonic()

    def work(s) -> None:
        if s.worker_id == 2:
            time.sleep(0.3)
        s.barrier()
        passed.append(time.monotonic() - start)

    threads = [threading.Thread(target=work, args=(s,)) for s in syncs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(passed) == 3 and min(passed) >= 0.29


def test_local_rounds_and_the_protocol() -> None:
    s = LocalGradientSync()
    v = np.array([3.0])
    s.barrier()
    s.all_reduce_mean(v)
    assert (
        v[0] == 3.0 and isinstance(s, GradientSync) and isinstance(ThreadedGradientSync.new_workers(1)[0], GradientSync)
    )
