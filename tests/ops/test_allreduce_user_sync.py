"""The Allreduce ops need only what they call (``sync_gradients``): a user's own sync without the
rest of the GradientSync protocol works in a net; an object without it is refused in one line.
The trainers, which also meet, average figures and broadcast, name every method a sync lacks."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import OperatorError, TrainConfigError

pytestmark = pytest.mark.timeout(60)


class HalvingSync:
    """A user's sync written for the op alone: the "mean" over two workers whose peer sent zeros."""

    def __init__(self) -> None:
        self.calls = 0

    def sync_gradients(self, grads):
        self.calls += 1
        for g in grads:
            g *= 0.5


def _run(net: an.Net, sync) -> tuple[np.ndarray, np.ndarray]:
    with an.Workspace() as ws:
        ws.feed("sync", sync)
        ws.feed("dw", np.array([2.0, 4.0], np.float32))
        ws.feed("db", np.array([6.0], np.float32))
        ws.run_net_once(net)
        return ws.fetch("dw"), ws.fetch("db")


def test_allreduce_runs_a_sync_that_has_only_sync_gradients():
    net = an.Net("sync_grads")
    net.Allreduce(["sync", "dw", "db"], ["dw", "db"])
    sync = HalvingSync()
    dw, db = _run(net, sync)
    np.testing.assert_array_equal(dw, [1.0, 2.0])
    np.testing.assert_array_equal(db, [3.0])
    assert sync.calls == 1


def test_allreduce_start_and_wait_run_a_sync_that_has_only_sync_gradients():
    net = an.Net("overlap")
    net.AllreduceStart(["sync", "dw", "db"], ["dw", "db", "work"], bucket_view=1)
    net.AllreduceWait(["work", "dw", "db"], ["dw", "db"])
    dw, db = _run(net, HalvingSync())
    np.testing.assert_array_equal(dw, [1.0, 2.0])
    np.testing.assert_array_equal(db, [3.0])


@pytest.mark.parametrize("op", ["Allreduce", "AllreduceStart"])
def test_an_object_without_sync_gradients_is_refused_naming_the_method(op):
    net = an.Net("bad")
    outs = ["dw", "work"] if op == "AllreduceStart" else ["dw"]
    getattr(net, op)(["sync", "dw"], outs)
    with pytest.raises(OperatorError) as info:
        _run(net, object())
    assert "sync_gradients(grads)" in str(info.value) and "'sync'" in str(info.value)


class OpOnlySync(HalvingSync):
    num_workers, worker_id = 2, 0


def test_the_trainers_name_every_method_a_sync_lacks_in_one_error():
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import from_arrays
    from asyncnet.train.loop import SyncStrategy
    from asyncnet.train.program import mlp_program

    x = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    ds = from_arrays((x, (x[:, 0] > 0).astype(np.int32)))
    with pytest.raises(TrainConfigError) as info:
        SyncStrategy(TrainConfig(), ds, mlp_program(4, (3,), 2), OpOnlySync())
    message = str(info.value)
    assert "\n" not in message
    assert "OpOnlySync lacks barrier, all_reduce_mean, broadcast" in message


def test_every_sync_backend_passes_the_trainers_check():
    from asyncnet.sync import LocalGradientSync, ThreadedGradientSync
    from asyncnet.train.loop import check_trainer_sync

    check_trainer_sync(LocalGradientSync())
    for s in ThreadedGradientSync.new_workers(2):
        check_trainer_sync(s)
