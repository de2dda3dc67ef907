"""The Allreduce operator: in-place averaging through the GradientSync blob."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import NetDefinitionError, OperatorError, SyncMismatchError
from asyncnet.sync import LocalGradientSync, run_parallel_workers

pytestmark = pytest.mark.timeout(30)


def _worker(sync, net_type="simple", size=3):
    ws = an.Workspace()
    ws.feed("sync", sync)
    ws.feed("dw", np.full(size if sync.worker_id == 0 else 3, float(sync.worker_id), np.float32))
    ws.feed("db", np.full(2, 2.0 * sync.worker_id))
    net = an.Net("grads", type=net_type)
    net.Allreduce(["sync", "dw", "db"], ["dw", "db"])
    ws.run_net_once(net)
    return ws.fetch("dw"), ws.fetch("db")


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
def test_allreduce_averages_in_place(net_type):
    results = run_parallel_workers(3, lambda s: _worker(s, net_type), timeout=10)
    for dw, db in results:
        assert np.array_equal(dw, np.full(3, 1.0, np.float32)) and np.array_equal(db, np.full(2, 2.0))


def test_allreduce_mismatch_is_an_operator_error_caused_by_sync():
    def fn(s):
        try:
            _worker(s, size=5)
        except OperatorError as exc:
            return exc
        return None

    errors = run_parallel_workers(2, fn, timeout=10)
    assert all(isinstance(e, OperatorError) and isinstance(e.__cause__, SyncMismatchError) for e in errors)


def test_allreduce_schema_enforces_in_place_and_checks_inputs():
    ws = an.Workspace()
    with pytest.raises(NetDefinitionError, match="in-place"):
        net = an.Net("bad")  # checked when the op is added or, at the latest, when the net is created
        net.Allreduce(["sync", "dw"], ["other"])
        ws.create_net(net)
    ws.feed("sync", "not a sync")
    ws.feed("dw", np.ones(2))
    net2 = an.Net("bad2")
    net2.Allreduce(["sync", "dw"], ["dw"])
    with pytest.raises(OperatorError, match="GradientSync"):
        ws.run_net_once(net2)
    ws.feed("sync", LocalGradientSync())
    ws.run_net_once(net2)
    assert np.array_equal(ws.fetch("dw"), np.ones(2))
    assert not an.get_schema("Allreduce").differentiable
