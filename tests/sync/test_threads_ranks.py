"""W threads x R torch ranks train like W x R threads."""

import _overlap_workers as OW
import numpy as np
import pytest

from asyncnet.simulate.measure import free_port

pytestmark = pytest.mark.timeout(120)


def test_two_threads_on_two_gloo_ranks_match_four_threaded_workers(tmp_path):
    pytest.importorskip("torch")
    import torch.multiprocessing as tmp

    from asyncnet.train.trainers import TrainConfig, train

    tmp.spawn(OW.threads_x_ranks, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    ref = train(TrainConfig(mode="sync", workers=4, backend="threads", epochs=1, trace=False))
    got = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    assert all(int(g["workers"]) == 4 for g in got)
    assert int(got[0]["steps"]) == ref.steps // 4  # one worker's steps; ref counts all four
    for name, value in ref.params.items():
        np.testing.assert_allclose(got[0][name], value, rtol=1e-5, atol=1e-6)


def test_hierarchical_sync_on_threads_alone_is_the_threaded_mean():
    from asyncnet.sync import LocalGradientSync
    from asyncnet.sync.hierarchical import HierarchicalGradientSync, run_hierarchical

    def work(s):
        g = np.full(5, float(s.worker_id), np.float32)
        s.sync_gradients(g)
        b = np.full(2, float(s.worker_id))
        s.broadcast(b, root=2)
        return g, b

    out = run_hierarchical(3, LocalGradientSync(), work, timeout=10)
    for g, b in out:
        assert np.array_equal(g, np.full(5, 1.0, np.float32)) and np.array_equal(b, [2.0, 2.0])
    syncs = HierarchicalGradientSync.new_workers(2, LocalGradientSync(), timeout=1)
    with pytest.raises(ValueError, match="root must be in"):
        syncs[0].broadcast(np.zeros(1), root=2)


@pytest.mark.timeout(60)  # a peer left to its 100 s sync timeout would fail here
def test_a_failing_cross_process_step_aborts_the_other_threads():
    from asyncnet.errors import SyncAbortedError
    from asyncnet.sync.hierarchical import run_hierarchical

    class Broken:
        num_workers, worker_id = 2, 0

        def sync_gradients(self, grads):
            raise RuntimeError("link down")

    with pytest.raises(RuntimeError, match="link down") as info:
        run_hierarchical(2, Broken(), lambda s: s.sync_gradients(np.zeros(3)), timeout=100)
    assert isinstance(info.value.worker_errors[1], SyncAbortedError)
