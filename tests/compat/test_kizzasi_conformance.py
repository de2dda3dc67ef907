"""kizzasi's own tests of its distributed helpers, ported to asyncnet's names.

Sources: cool-japan/kizzasi, crates/kizzasi-model/src/distributed.rs (``mod tests`` and
``mod dp_tests``, both stored versions: the early check-and-fail store and the later barrier
store with ``DataParallelModel::new_ranks``) and crates/kizzasi-model/src/checkpoint.rs
(``mod tests``, the version with ``save_weights``). Tests already ported in test_helpers.py are
not repeated; each test names the kizzasi test it ports. Where asyncnet deliberately differs
(docs/compatibility.md, "kizzasi's SharedGradientStore"), the test checks asyncnet's safe behaviour instead.
"""

import json
import threading
import time

import numpy as np
import pytest

from asyncnet.errors import CheckpointError, SyncError, SyncMismatchError
from asyncnet.sync import (
    CheckpointManager,
    CheckpointMetadata,
    CommBackend,
    DataParallelModel,
    DistributedConfig,
    GradientStrategy,
    LocalGradientSync,
    SharedGradientStore,
    ThreadedGradientSync,
    average_gradients,
    partition_indices,
    run_parallel_workers,
    sgd_step,
)

pytestmark = pytest.mark.timeout(30)


def _threads(n, fn):
    """Run ``fn(i)`` in ``n`` threads; (results, exceptions), joined with a bound."""
    out, errs = [None] * n, [None] * n

    def body(i):
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001
            errs[i] = e

    ts = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(15)
    assert not any(t.is_alive() for t in ts), "a worker deadlocked"
    return out, errs


# -- distributed.rs, mod tests --------------------------------------------------------------------
def test_local_gradient_sync_noop():
    sync = LocalGradientSync()
    g = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    sync.sync_gradients(g)
    assert g.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert not sync.is_distributed and sync.num_workers == 1


def test_new_workers_zero_returns_err_not_panic():
    with pytest.raises(ValueError):
        ThreadedGradientSync.new_workers(0)


def test_threaded_gradient_sync_averaging():
    worker_grads = [[2.0, 4.0], [4.0, 8.0]]

    def worker(sync):
        g = np.array(worker_grads[sync.worker_id], np.float32)
        sync.sync_gradients(g)
        return g

    for r in run_parallel_workers(2, worker, timeout=10):
        np.testing.assert_allclose(r, [3.0, 6.0], atol=1e-5)


def test_threaded_gradient_sync_dimension_mismatch_does_not_deadlock():
    syncs = ThreadedGradientSync.new_workers(3, timeout=10)

    def worker(i):
        syncs[i].sync_gradients(np.ones(7 if i == 1 else 4, np.float32))

    _, errs = _threads(3, worker)
    assert all(isinstance(e, SyncMismatchError) for e in errs), errs


def test_threaded_gradient_sync_recovers_after_aborted_round():
    syncs = ThreadedGradientSync.new_workers(2, timeout=10)

    def worker(i):
        with pytest.raises(SyncMismatchError):
            syncs[i].sync_gradients(np.ones(2 if i == 0 else 5, np.float32))
        g = np.array([(i + 1.0) * 2.0, 4.0], np.float32)
        syncs[i].sync_gradients(g)
        return float(g[0])

    out, errs = _threads(2, worker)
    assert errs == [None, None] and out == [3.0, 3.0]


# -- distributed.rs, mod dp_tests -----------------------------------------------------------------
def test_average_gradients_two_workers():
    avg = average_gradients([{"w": np.array([1.0, 2.0], np.float32)}, {"w": np.array([3.0, 4.0], np.float32)}])
    np.testing.assert_allclose(avg["w"], [2.0, 3.0], atol=1e-6)


def test_sgd_step_updates_weights():
    weights = {"w": np.array([1.0, 2.0, 3.0], np.float32)}
    sgd_step(weights, {"w": np.array([0.1, 0.2, 0.3], np.float32)}, 1.0)
    np.testing.assert_allclose(weights["w"], [0.9, 1.8, 2.7], atol=1e-6)
    as_lists = {"w": [1.0, 2.0, 3.0]}  # kizzasi's HashMap<String, Vec<f32>>, literally
    assert sgd_step(as_lists, {"w": [0.1, 0.2, 0.3], "missing": [1.0]}, 1.0) == ["w"]
    np.testing.assert_allclose(as_lists["w"], [0.9, 1.8, 2.7], atol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        sgd_step(as_lists, {"w": [1.0]}, 1.0)
    with pytest.raises(TypeError, match="tuple"):
        sgd_step({"w": (1.0, 2.0)}, {"w": [1.0, 1.0]}, 1.0)


def test_data_parallel_model_weights_shared():
    model = DataParallelModel({"embed": [0.1] * 16}, DistributedConfig())
    w = model.weights()  # kizzasi's snapshot method
    assert "embed" in w and len(w["embed"]) == 16
    w["embed"][0] = 9.0  # a snapshot: the model is untouched
    assert model.weights["embed"][0] == pytest.approx(0.1)


def test_partition_indices_single_worker():
    assert partition_indices(5, 1, 0) == [0, 1, 2, 3, 4]


def test_average_gradients_single():
    avg = average_gradients([{"w": np.array([2.0, 4.0], np.float32)}])
    assert avg["w"].tolist() == [2.0, 4.0]


def test_data_parallel_model_step_single_worker_weights_method():
    model = DataParallelModel({"w": [1.0, 2.0]}, DistributedConfig())
    model.step({"w": [0.5, 0.5]}, 0.1)
    np.testing.assert_allclose(model.weights()["w"], [0.95, 1.95], atol=1e-6)


def test_broadcast_weights_noop():
    model = DataParallelModel({}, DistributedConfig())
    assert model.broadcast_weights() is None


def test_shared_gradient_store_clear_discards_the_stale_push():  # the barrier version's test
    store = SharedGradientStore(1)
    store.push(0, {"w": np.array([1.0], np.float32)})
    store.clear()
    store.push(0, {"w": np.array([9.0], np.float32)})
    assert store.all_reduce_mean(0)["w"].tolist() == [9.0]


def test_shared_gradient_store_all_reduce_is_a_real_barrier():
    store = SharedGradientStore(2, timeout=10)
    grads = [[1.0, 2.0], [3.0, 4.0]]

    def rank(r):
        if r == 1:
            time.sleep(0.05)  # rank 0 most likely asks first (not needed for the result)
        store.push(r, {"w": np.array(grads[r], np.float32)})
        return store.all_reduce_mean(r)["w"].tolist()

    out, errs = _threads(2, rank)
    assert errs == [None, None] and out == [[2.0, 3.0], [2.0, 3.0]]


def test_data_parallel_model_new_ranks_two_consecutive_steps_use_fresh_gradients():
    config = DistributedConfig(
        world_size=2, rank=0, grad_strategy=GradientStrategy.AllReduce, backend=CommBackend.InProcess
    )
    ranks = DataParallelModel.new_ranks({"w": [100.0]}, config)
    assert len(ranks) == 2 and [m.config.rank for m in ranks] == [0, 1]
    round1, round2 = [2.0, 4.0], [10.0, 20.0]

    def worker(r):
        model = ranks[r]
        model.step({"w": [round1[model.config.rank]]}, 1.0)
        model.step({"w": [round2[model.config.rank]]}, 1.0)
        return model.weights()["w"][0]

    out, errs = _threads(2, worker)
    assert errs == [None, None]
    assert out == [pytest.approx(82.0, abs=1e-4)] * 2  # 100 - 3 - 15 on every rank's replica


def test_new_ranks_single_rank_and_no_sync():
    [only] = DataParallelModel.new_ranks({"w": [1.0]}, DistributedConfig())
    only.step({"w": [1.0]}, 0.5)
    assert only.weights()["w"].tolist() == [0.5]
    local = DataParallelModel.new_ranks({"w": [1.0]}, DistributedConfig(world_size=3, grad_strategy="no_sync"))
    assert [m.rank for m in local] == [0, 1, 2] and all(m.world_size == 3 for m in local)
    local[2].step({"w": [1.0]}, 1.0)  # NO_SYNC: never waits for the other ranks
    assert local[2].weights["w"].tolist() == [0.0] and local[0].weights["w"].tolist() == [1.0]


# -- kizzasi's guide (docs, "9.3 Data-parallel infrastructure"): new() per rank, then step ----------
def test_guide_example_model_from_settings_alone_fails_at_step_not_forever():
    config = DistributedConfig(world_size=4, rank=0, grad_strategy=GradientStrategy.AllReduce)
    model = DataParallelModel({"embedding.weight": np.zeros(3, np.float32)}, config)  # kizzasi's new()
    assert partition_indices(10, 4, 0) == [0, 4, 8]
    with pytest.raises(SyncError, match="new_ranks"):  # kizzasi's blocks forever here
        model.step({"embedding.weight": np.ones(3, np.float32)}, 0.1)
    with pytest.raises(SyncError):
        model.broadcast_weights()
    assert model.weights()["embedding.weight"].tolist() == [0.0, 0.0, 0.0]


def test_distributed_config_from_env_errors_name_the_variable(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        DistributedConfig.from_env()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="rank"):
        DistributedConfig.from_env()
    monkeypatch.setenv("RANK", "1")
    assert DistributedConfig.from_env(grad_strategy="no_sync").strategy is GradientStrategy.NO_SYNC


def test_distributed_config_spellings():
    assert DistributedConfig(grad_strategy=GradientStrategy.NoSync).grad_strategy is GradientStrategy.NO_SYNC
    with pytest.raises(ValueError, match="not both"):
        DistributedConfig(strategy="no_sync", grad_strategy="all_reduce")
    for bad in ({"world_size": 0}, {"world_size": 2, "rank": 2}, {"rank": -1}):
        with pytest.raises(ValueError):
            DistributedConfig(**bad)
    assert DistributedConfig(world_size=2, rank=1) == DistributedConfig(2, 1)
    model = DataParallelModel({"w": [1.0]}, DistributedConfig(grad_strategy=GradientStrategy.ReduceToRoot))
    model.step({"w": [1.0]}, 1.0)  # one rank: reduce-to-root is the local step
    assert model.weights["w"].tolist() == [0.0]


# -- the store's edge cases (kizzasi's error rules) ---------------------------------------------------
def test_store_rank_validation_and_empty_round():
    store = SharedGradientStore(2, timeout=5)
    with pytest.raises(ValueError):
        store.push(2, {"w": np.ones(1)})  # kizzasi: "rank 2 out of bounds for world_size 2"
    with pytest.raises(ValueError):
        store.all_reduce_mean(5)
    with pytest.raises(ValueError):
        SharedGradientStore(0)  # kizzasi clamps to 1; asyncnet refuses
    store.push(0, {})
    store.push(1, {})
    assert store.all_reduce_mean(0) == {} and store.all_reduce_mean(1) == {}


def test_store_repeated_push_before_reading_is_an_error_not_a_hang():
    store = SharedGradientStore(2)  # no timeout: a wait here would never end
    store.push(0, {"w": np.array([1.0])})
    with pytest.raises(SyncError, match="already pushed"):
        store.push(0, {"w": np.array([5.0])})
    store.push(1, {"w": np.array([3.0])})
    assert store.all_reduce_mean(0)["w"].tolist() == [2.0]  # the first push was kept
    with pytest.raises(SyncError, match="never end"):  # rank 1 has not read; only this thread could
        store.push(0, {"w": np.array([1.0])})
    assert store.all_reduce_mean(1)["w"].tolist() == [2.0]  # drained
    store.push(0, {"w": np.array([4.0])})
    store.push(1, {"w": np.array([6.0])})
    assert store.all_reduce_mean(1)["w"].tolist() == [5.0]


def test_store_fast_rank_still_waits_for_a_slow_reader():
    store = SharedGradientStore(2, timeout=10)
    read = threading.Event()

    def rank(r):
        store.push(r, {"w": np.array([float(r)])})
        if r == 1:
            assert read.wait(10)
            time.sleep(0.05)  # rank 0 is most likely waiting in its second push by now
        first = store.all_reduce_mean(r)["w"].tolist()
        if r == 0:
            read.set()
            store.push(0, {"w": np.array([10.0])})  # waits until rank 1 has read round 1
        else:
            store.push(1, {"w": np.array([20.0])})
        return first, store.all_reduce_mean(r)["w"].tolist()

    out, errs = _threads(2, rank)
    assert errs == [None, None] and out == [([0.5], [15.0])] * 2


def test_store_mismatched_lengths_reach_every_rank():
    store = SharedGradientStore(3, timeout=10)

    def rank(r):
        store.push(r, {"w": np.ones(7 if r == 1 else 4)})
        return store.all_reduce_mean(r)

    _, errs = _threads(3, rank)
    assert all(isinstance(e, SyncMismatchError) for e in errs)


# -- checkpoint.rs, mod tests ---------------------------------------------------------------------
def test_checkpoint_metadata():
    meta = CheckpointMetadata(5, 1000).with_val_loss(0.5).with_train_loss(0.6).with_metric("accuracy", 0.95)
    assert (meta.epoch, meta.step, meta.val_loss, meta.train_loss) == (5, 1000, 0.5, 0.6)
    assert meta.metrics.get("accuracy") == 0.95 and meta.model_type == "unknown" and meta.best_val_loss is None


def test_checkpoint_manager_is_best(tmp_path):
    manager = CheckpointManager(tmp_path / "checkpoints")
    assert (manager.max_checkpoints, manager.keep_best, manager.best_checkpoint) == (5, 3, None)
    assert manager.is_best(1.0)
    manager.update_best(CheckpointMetadata(1, 100).with_val_loss(1.0))
    assert not manager.is_best(1.1)
    assert manager.is_best(0.9)
    manager.update_best(CheckpointMetadata(2, 200))  # no val_loss: ignored
    manager.update_best(CheckpointMetadata(3, 300).with_val_loss(2.0))  # worse: ignored
    assert manager.best_checkpoint.epoch == 1


def test_checkpoint_names_listing_and_kizzasi_json(tmp_path):
    manager = CheckpointManager(tmp_path, max_checkpoints=2)
    assert manager.list_weight_checkpoints() == []
    path = manager.save_weights(np.array([1, 2, 3, 4, 5], np.float32), np.float32(0.42), 100)
    assert path.endswith("weights_step_100.npz")  # kizzasi's stem, asyncnet's npz
    assert manager.checkpoint_path(5).endswith("checkpoint_epoch_5.bin")
    assert manager.best_checkpoint_path().endswith("best_checkpoint.bin")
    kizzasi_file = tmp_path / "weights_step_7.json"  # what kizzasi's save_weights writes
    kizzasi_file.write_text(json.dumps({"step": 7, "bias": 0.42, "weights": [1.0, 2.0, 3.0]}))
    weights, bias = CheckpointManager.load_weights(kizzasi_file)
    assert weights.dtype == np.float32 and weights.tolist() == [1.0, 2.0, 3.0] and abs(bias - 0.42) < 1e-6
    assert [s for s, _ in manager.list_weight_checkpoints()] == [7, 100]
    manager.save_weights(np.zeros(2), 0.0, 9)  # keeps the newest 2 by step
    assert [s for s, _ in manager.list_weight_checkpoints()] == [9, 100]
    assert manager.load_latest()[2] == 100


def test_loading_missing_or_corrupt_checkpoints_is_a_clear_error(tmp_path):
    bad = {
        "truncated.json": '{"step": 1, "bias": 0.5, "weights": [1.0,',
        "no_bias.json": '{"step": 1, "weights": [1.0]}',
        "text_weights.json": '{"step": 1, "bias": 0.5, "weights": ["a"]}',
        "list.json": "[1, 2]",
        "garbage.npz": "not a zip",
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(CheckpointError):
            CheckpointManager.load_weights(tmp_path / name)
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointManager.load_weights(tmp_path / "weights_step_1.json")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        CheckpointManager(tmp_path / "empty").load_latest()
