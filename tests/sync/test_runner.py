"""run_parallel_workers: results in order, failures abort peers, nothing left running."""

import threading
import time

import numpy as np
import pytest

from asyncnet.errors import SyncAbortedError, SyncTimeoutError
from asyncnet.sync import run_parallel_workers

pytestmark = pytest.mark.timeout(30)


def test_results_in_worker_order():
    def fn(sync):
        time.sleep(0.01 * (3 - sync.worker_id))
        g = np.full(4, float(sync.worker_id))
        sync.sync_gradients(g)
        return sync.worker_id, g[0]

    assert run_parallel_workers(4, fn, timeout=10) == [(i, 1.5) for i in range(4)]


def test_bad_arguments():
    with pytest.raises(ValueError):
        run_parallel_workers(0, lambda s: None)
    with pytest.raises(ValueError):
        run_parallel_workers(2, lambda s: None, backend="mpi")


def test_raising_worker_aborts_peers_and_everything_is_joined():
    before = set(threading.enumerate())

    def fn(sync):
        if sync.worker_id == 1:
            time.sleep(0.1)
            raise ValueError("worker one failed")
        sync.sync_gradients(np.ones(8))  # no timeout: only the abort can free them

    start = time.monotonic()
    with pytest.raises(ValueError, match="worker one failed") as info:
        run_parallel_workers(3, fn)
    assert time.monotonic() - start < 20
    err = info.value
    assert err.worker_id == 1
    assert set(err.worker_errors) == {0, 1, 2}
    assert all(isinstance(err.worker_errors[i], SyncAbortedError) for i in (0, 2))
    assert any("worker 0 also failed" in n for n in err.__notes__)
    # only our threads count: a thread of an earlier test that ends meanwhile is not a leak
    assert [t for t in threading.enumerate() if t not in before] == []


def test_worker_that_never_comes_times_out_within_the_timeout():
    def fn(sync):
        if sync.worker_id == 2:
            time.sleep(1.0)
            return "slow"
        sync.sync_gradients(np.ones(3))

    start = time.monotonic()
    with pytest.raises(SyncTimeoutError) as info:
        run_parallel_workers(3, fn, timeout=0.3)
    assert time.monotonic() - start < 20  # no hang: the slow worker returns after 1 s
    assert info.value.missing == [2]


def test_single_worker():
    assert run_parallel_workers(1, lambda s: (s.num_workers, s.is_distributed)) == [(1, False)]
