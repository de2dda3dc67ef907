"""The reference's helpers: partition_indices, average_gradients, sgd_step, SharedGradientStore,
DataParallelModel, DistributedConfig."""

import threading

import numpy as np
import pytest

from asyncnet.errors import SyncMismatchError, SyncTimeoutError
from asyncnet.sync import (
    CommBackend,
    DataParallelModel,
    DistributedConfig,
    GradientStrategy,
    SharedGradientStore,
    ThreadedGradientSync,
    average_gradients,
    partition_indices,
    run_parallel_workers,
    sgd_step,
)

pytestmark = pytest.mark.timeout(30)


def test_partition_indices_round_robin_covers_everything_once():
    parts = [partition_indices(10, 3, r) for r in range(3)]
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(sum(parts, [])) == list(range(10))
    for bad in [(10, 0, 0), (10, 2, 2), (10, 2, -1), (-1, 2, 0)]:
        with pytest.raises(ValueError):
            partition_indices(*bad)


def test_average_gradients_reference_and_mismatch():
    avg = average_gradients(
        [{"w": np.array([2.0, 4.0]), "b": np.array([1.0])}, {"w": np.array([4.0, 8.0]), "b": np.array([3.0])}]
    )
    assert avg["w"].tolist() == [3.0, 6.0] and avg["b"].tolist() == [2.0]
    with pytest.raises(SyncMismatchError, match="worker 1"):
        average_gradients([{"w": np.zeros(4)}, {"w": np.zeros(7)}, {"w": np.zeros(4)}])
    with pytest.raises(ValueError):
        average_gradients([])


def test_sgd_step_skips_unknown_names():
    w = {"w": np.array([1.0, 1.0])}
    assert sgd_step(w, {"w": np.array([1.0, 2.0]), "ghost": np.ones(3)}, 0.5) == ["w"]
    assert w["w"].tolist() == [0.5, 0.0]
    with pytest.raises(ValueError, match="shape"):
        sgd_step(w, {"w": np.ones(3)}, 0.1)


def _threads(n, fn):
    out, errs = [None] * n, [None] * n

    def body(i):
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001
            errs[i] = e

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    return out, errs


def test_shared_gradient_store_rounds_and_mismatch():
    store = SharedGradientStore(3, timeout=5)

    def rank(r):
        results = []
        for k in range(5):  # the store drains itself: several rounds in a row
            store.push(r, {"w": np.full(2, float(r + k)), "b": np.array([float(r)])})
            results.append(store.all_reduce_mean(r))
        return results

    out, errs = _threads(3, rank)
    assert errs == [None] * 3
    for k in range(5):
        assert all(o[k]["w"].tolist() == [1.0 + k] * 2 and o[k]["b"].tolist() == [1.0] for o in out)
    # different names with the same shapes are a mismatch too
    store2 = SharedGradientStore(2, timeout=5)

    def named(r):
        store2.push(r, {"w" if r == 0 else "v": np.ones(2)})
        return store2.all_reduce_mean(r)

    _, errs = _threads(2, named)
    assert all(isinstance(e, SyncMismatchError) for e in errs)


def test_shared_gradient_store_missing_rank_times_out():
    store = SharedGradientStore(2, timeout=0.2)
    store.push(0, {"w": np.ones(2)})
    with pytest.raises(SyncTimeoutError) as info:
        store.all_reduce_mean(0)
    assert info.value.missing == [1]


def test_data_parallel_model_replicas_stay_identical_and_sync_biases():
    rng = np.random.default_rng(0)
    init = [{"w": rng.standard_normal(3), "b": rng.standard_normal(1)} for _ in range(3)]

    def worker(sync):
        model = DataParallelModel(init[sync.worker_id], sync)  # replicas start different
        model.broadcast_weights(root=0)  # a real broadcast
        assert np.array_equal(model.weights["w"], init[0]["w"])
        for step in range(3):
            g = {"w": np.full(3, float(sync.worker_id + step)), "b": np.array([float(sync.worker_id)])}
            model.step(g, lr=0.1)
        return model.weights

    results = run_parallel_workers(3, worker, timeout=10)
    for r in results[1:]:
        for k in ("w", "b"):
            assert r[k].tobytes() == results[0][k].tobytes()
    expected_b = init[0]["b"] - 3 * 0.1 * 1.0
    assert np.allclose(results[0]["b"], expected_b)


def test_data_parallel_model_single_rank_never_blocks():
    m = DataParallelModel({"w": np.ones(2)})
    m.broadcast_weights()
    m.step({"w": np.ones(2)}, lr=1.0)
    assert m.weights["w"].tolist() == [0.0, 0.0] and m.world_size == 1
    with pytest.raises(ValueError):
        m.step({"x": np.ones(2)}, lr=1.0)


def test_distributed_config(monkeypatch):
    c = DistributedConfig(world_size=4, rank=3, strategy="no_sync")
    assert c.is_distributed and c.strategy is GradientStrategy.NO_SYNC
    with pytest.raises(ValueError):
        DistributedConfig(world_size=2, rank=2)
    with pytest.raises(ValueError):
        DistributedConfig(world_size=0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    env = DistributedConfig.from_env()
    assert (env.world_size, env.rank, env.backend) == (2, 1, CommBackend.EXTERNAL)


def test_distributed_config_default_with_kizzasis_names():
    cfg = DistributedConfig()  # kizzasi's test_distributed_config_default
    assert (cfg.world_size, cfg.rank) == (1, 0)
    assert cfg.grad_strategy is GradientStrategy.AllReduce is GradientStrategy.ALL_REDUCE
    assert cfg.backend is CommBackend.InProcess is CommBackend.IN_PROCESS
    assert DistributedConfig(strategy=GradientStrategy.NoSync).strategy is GradientStrategy.NO_SYNC
    assert [m.name for m in GradientStrategy] == ["ALL_REDUCE", "REDUCE_TO_ROOT", "NO_SYNC"]  # aliases are not members


def test_threaded_handles_usable_by_store_and_model_types():
    assert ThreadedGradientSync.new_workers(2)[1].worker_id == 1


# -- kizzasi's semantics (kizzasi-model distributed.rs and checkpoint.rs, and their tests) --------
def test_store_one_thread_pushes_for_every_rank_then_clears():
    from asyncnet.errors import SyncError

    store = SharedGradientStore(2)  # no timeout: the refused push must not wait
    store.push(0, {"w": np.array([1.0, 2.0])})
    store.push(1, {"w": np.array([3.0, 4.0])})
    assert store.all_reduce_mean(0)["w"].tolist() == [2.0, 3.0]  # kizzasi's test: returns at once
    assert store.all_reduce_mean(0)["w"].tolist() == [2.0, 3.0]  # asked again: the same mean
    with pytest.raises(SyncError, match="waiting would never end"):  # rank 1 has not read: only this thread could
        store.push(0, {"w": np.zeros(2)})
    store.clear()  # kizzasi's clear() after the step
    store.push(0, {"w": np.array([5.0, 5.0])})
    store.push(1, {"w": np.array([7.0, 7.0])})
    assert store.all_reduce_mean(1)["w"].tolist() == [6.0, 6.0]


def test_store_cleared_round_is_kizzasis_error_not_a_wait():
    from asyncnet.errors import SyncError

    store = SharedGradientStore(1)  # no timeout: a wait here would never end
    store.push(0, {"w": np.array([1.0])})
    store.clear()
    with pytest.raises(SyncError, match="not all ranks have submitted"):  # kizzasi's test_shared_gradient_store_clear
        store.all_reduce_mean(0)
    store.push(0, {"w": np.array([2.0])})
    assert store.all_reduce_mean(0)["w"].tolist() == [2.0]
    with pytest.raises(SyncError, match=r"ranks \[0\]"):  # the round drained: asking again is the same error
        store.all_reduce_mean(0)
    two = SharedGradientStore(2, timeout=5)
    two.push(1, {"w": np.ones(1)})
    with pytest.raises(SyncError, match="rank 0 all_reduce_mean"):
        two.all_reduce_mean(0)


def test_store_mismatch_reaches_every_rank_and_the_next_round_works():
    store = SharedGradientStore(2, timeout=5)

    def body(r):
        store.push(r, {"w": np.ones(2 + r)})
        try:
            store.all_reduce_mean(r)
        except SyncMismatchError as e:
            first = e
        else:
            first = None
        store.push(r, {"w": np.full(2, float(r))})
        return first, store.all_reduce_mean(r)["w"].tolist()

    out, errs = _threads(2, body)
    assert errs == [None, None]
    assert all(isinstance(o[0], SyncMismatchError) and o[1] == [0.5, 0.5] for o in out)


def test_store_abort_wakes_a_waiting_rank():
    from asyncnet.errors import SyncAbortedError

    store = SharedGradientStore(2)  # no timeout: only the abort can end the wait
    started = threading.Event()

    def waiter(r):
        store.push(0, {"w": np.ones(1)})
        started.set()
        return store.all_reduce_mean(0)

    box = {}
    t = threading.Thread(target=lambda: box.setdefault("out", _threads(1, waiter)))
    t.start()
    assert started.wait(10)
    store.abort("test over")
    t.join(10)
    assert not t.is_alive()
    assert isinstance(box["out"][1][0], SyncAbortedError)


def test_data_parallel_model_from_kizzasi_config():
    from asyncnet.errors import SyncError

    m = DataParallelModel({"w": np.array([1.0, 2.0], np.float32)}, DistributedConfig())
    m.step({"w": np.array([0.5, 0.5], np.float32)}, lr=0.1)  # kizzasi's single-worker test
    np.testing.assert_allclose(m.weights["w"], [0.95, 1.95], rtol=1e-6)
    unreachable = DataParallelModel({"w": np.ones(2)}, DistributedConfig(world_size=4, rank=1))
    with pytest.raises(SyncError, match="world_size=4, rank=1.*sync handle"):  # at once, not kizzasi's endless wait
        unreachable.step({"w": np.ones(2)}, lr=0.1)
    assert unreachable.weights["w"].tolist() == [1.0, 1.0]
    local = DataParallelModel({"w": np.ones(2)}, DistributedConfig(world_size=4, rank=1, strategy="no_sync"))
    local.step({"w": np.ones(2)}, lr=1.0)  # NO_SYNC: steps on the local gradient, never blocks
    assert local.weights["w"].tolist() == [0.0, 0.0]
    handles = ThreadedGradientSync.new_workers(2, timeout=10)
    with pytest.raises(SyncMismatchError, match="rank=0"):
        DataParallelModel({"w": np.ones(2)}, handles[1], config=DistributedConfig(world_size=2, rank=0))

    def worker(sync):
        cfg = DistributedConfig(world_size=2, rank=sync.worker_id)
        model = DataParallelModel({"w": np.zeros(2)}, sync, config=cfg)
        model.step({"w": np.full(2, float(sync.worker_id + 1))}, lr=1.0)
        return model.weights["w"].tolist()

    assert run_parallel_workers(2, worker, timeout=10) == [[-1.5, -1.5], [-1.5, -1.5]]


def test_checkpoint_manager_round_trip_keep_last_and_latest(tmp_path):
    from asyncnet.errors import CheckpointError
    from asyncnet.sync import CheckpointManager

    manager = CheckpointManager(tmp_path / "ckpt", max_checkpoints=3)
    assert manager.latest() is None
    with pytest.raises(CheckpointError, match="no checkpoint"):
        manager.load_latest()
    weights = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    path = manager.save_weights(weights, np.float32(0.42), 100)  # kizzasi's test values
    loaded, bias = CheckpointManager.load_weights(path)
    assert loaded.dtype == np.float32 and loaded.tolist() == weights.tolist() and abs(bias - 0.42) < 1e-6
    for step in (7, 200, 300, 400):
        manager.save_weights(weights * step, np.ones(2), step)
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["weights_step_200.npz", "weights_step_300.npz", "weights_step_400.npz"]
    w, b, step = manager.load_latest()
    assert step == 400 and w.tolist() == (weights * 400).tolist() and b.tolist() == [1.0, 1.0]
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for bad in (tmp_path / "bad.npz", tmp_path / "missing.npz", tmp_path / "obj.npy"):
        with pytest.raises(CheckpointError):
            CheckpointManager.load_weights(bad)
    with pytest.raises(ValueError):
        manager.save_weights(weights, 0.0, -1)
