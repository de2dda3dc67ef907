"""asyncnet.tensorflow: sync_gradients against hand averages, SyncOptimizer and broadcast_variables
with Keras, and data-parallel training equal to full-batch training."""

from __future__ import annotations

import numpy as np
import pytest
from _tfcheck import tensorflow_or_skip

tf = tensorflow_or_skip()
keras = pytest.importorskip("keras")

from asyncnet.errors import SyncError, SyncMismatchError
from asyncnet.sync import LocalGradientSync, run_parallel_workers
from asyncnet.tensorflow import SyncOptimizer, broadcast_variables, limit_threads, sync_gradients

pytestmark = pytest.mark.timeout(120)

DTYPES = ["float16", "float32", "float64", "bfloat16"]


def _grads(worker: int) -> list:
    """One gradient per float dtype, a None, and IndexedSlices with a repeated row (as tf.gather's)."""
    rng = np.random.default_rng(10 + worker)
    dense = [tf.constant(rng.standard_normal((3, 2)), dtype=d) for d in DTYPES]
    rows = tf.constant(rng.standard_normal((3, 4)), tf.float32)
    slices = tf.IndexedSlices(rows, tf.constant([worker, 4, worker]), tf.constant([5, 4]))
    return dense + [None, slices]


def _reference(workers: int) -> list:
    means = []
    for i in range(len(DTYPES)):
        means.append(np.mean([_grads(w)[i].numpy().astype(np.float64) for w in range(workers)], axis=0))
    table = np.zeros((5, 4))
    for w in range(workers):
        s = _grads(w)[-1]
        np.add.at(table, s.indices.numpy(), s.values.numpy())
    return means + [None, table / workers]


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])
def test_threaded_sync_matches_hand_average(workers: int, graph: bool) -> None:
    want = _reference(workers)

    def worker(sync):
        fn = tf.function(lambda *g: sync_gradients(list(g[:4]) + [None] + [g[4]], sync)) if graph else None
        g = _grads(sync.worker_id)
        got = fn(*g[:4], g[5]) if graph else sync_gradients(g, sync)
        return [None if t is None else (t.dtype.name, t.shape.as_list(), t.numpy().astype(np.float64)) for t in got]

    if graph and workers > _inter_op_threads():
        with pytest.raises(SyncError, match=f"needs >= {workers} TensorFlow inter-op threads"):
            run_parallel_workers(workers, worker, timeout=30)
        return
    results = run_parallel_workers(workers, worker, timeout=30)
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-6, "float64": 1e-12}
    for got in results:
        assert got[4] is None
        for i, d in enumerate(DTYPES):
            assert got[i][0] == d and got[i][1] == [3, 2]
            np.testing.assert_allclose(got[i][2], want[i], rtol=tol[d], atol=tol[d])
        assert got[5][0] == "float32" and got[5][1] == [5, 4]
        np.testing.assert_allclose(got[5][2], want[5], rtol=1e-6, atol=1e-6)
    for got in results[1:]:  # every worker holds the very same bits
        for a, b in zip(got, results[0]):
            assert (a is None and b is None) or np.array_equal(a[2], b[2])


def _inter_op_threads() -> int:
    from asyncnet.exec.pools import default_pool_size

    return tf.config.threading.get_inter_op_parallelism_threads() or default_pool_size()


def test_local_sync_returns_the_gradients_and_checks_them() -> None:
    g = [tf.constant([1.0, 2.0]), None]
    out = sync_gradients(g, LocalGradientSync())
    assert out[1] is None and out[0].numpy().tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="gradient 0: expected a floating-point dtype, got int32"):
        sync_gradients([tf.constant([1, 2])], LocalGradientSync())


def test_a_layout_mismatch_between_workers_is_raised_and_the_next_round_works() -> None:
    def worker(sync):
        n = 3 if sync.worker_id == 0 else 4
        with pytest.raises(SyncMismatchError):
            sync_gradients([tf.ones(n)], sync)
        return sync_gradients([tf.ones(2) * sync.worker_id], sync)[0].numpy().tolist()

    assert run_parallel_workers(2, worker, timeout=30) == [[0.5, 0.5], [0.5, 0.5]]


def _model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)  # global RNGs: build models before starting threads
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])
    return model


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((48, 8)).astype(np.float32), rng.integers(0, 3, 48)


def _compile(model: keras.Model, sync) -> None:
    opt = keras.optimizers.SGD(0.3, momentum=0.5)
    model.compile(
        optimizer=opt if sync is None else SyncOptimizer(opt, sync),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


@pytest.mark.parametrize("eager", [False, True], ids=["fit-compiled", "fit-eager"])
def test_two_workers_on_half_batches_equal_one_on_full_batches(eager: bool) -> None:
    """model.fit with SyncOptimizer, each worker on its half of every batch of 12, equals one
    worker on the full batches (SGD with momentum, 2 epochs, 8 steps)."""
    x, y = _data()
    ref = _model(0)
    _compile(ref, None)
    ref.run_eagerly = eager
    ref.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    want = [v.numpy() for v in ref.trainable_variables]

    models = [_model(1 + w) for w in range(2)]  # different initial weights: broadcast makes them worker 0's
    start = _model(0)

    def worker(sync):
        model = models[sync.worker_id]
        if sync.worker_id == 0:
            model.set_weights(start.get_weights())
        broadcast_variables(model, sync)
        _compile(model, sync)
        model.run_eagerly = eager
        rows = np.concatenate([np.arange(b + sync.worker_id * 6, b + sync.worker_id * 6 + 6) for b in range(0, 48, 12)])
        model.fit(x[rows], y[rows], batch_size=6, epochs=2, shuffle=False, verbose=0)
        return [v.numpy() for v in model.trainable_variables], int(model.optimizer.iterations.numpy())

    results = run_parallel_workers(2, worker, timeout=60)
    for got, steps in results:
        assert steps == 8
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(results[0][0], results[1][0]):
        assert np.array_equal(a, b)


def test_embedding_gradients_are_densified_and_averaged() -> None:
    """An embedding layer's IndexedSlices gradient: each worker looks up other rows; after one
    synced SGD step both tables equal the table stepped with the mean of the dense gradients."""
    keras.utils.set_random_seed(3)
    models = [keras.Sequential([keras.Input((2,), dtype="int32"), keras.layers.Embedding(6, 3)]) for _ in range(2)]
    for m in models[1:]:
        m.set_weights(models[0].get_weights())
    w0 = models[0].get_weights()[0]
    ids = [np.array([[0, 2]]), np.array([[2, 5]])]

    def worker(sync):
        model = models[sync.worker_id]
        opt = SyncOptimizer(keras.optimizers.SGD(1.0), sync)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(ids[sync.worker_id]))
        grads = tape.gradient(loss, model.trainable_variables)
        assert isinstance(grads[0], tf.IndexedSlices)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return model.get_weights()[0]

    dense = np.zeros((2, 6, 3))
    for w, i in enumerate(ids):
        np.add.at(dense[w], i.ravel(), 1.0)
    want = w0 - dense.mean(axis=0)
    for got in run_parallel_workers(2, worker, timeout=30):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_broadcast_variables_copies_worker_0s_weights_and_leaves_integers() -> None:
    ints = [tf.Variable([7 + w]) for w in range(2)]
    floats = [tf.Variable(np.full((2, 2), float(w), np.float32)) for w in range(2)]

    def worker(sync):
        broadcast_variables([floats[sync.worker_id], ints[sync.worker_id]], sync)
        return floats[sync.worker_id].numpy(), int(ints[sync.worker_id].numpy()[0])

    (a, i0), (b, i1) = run_parallel_workers(2, worker, timeout=30)
    assert np.array_equal(a, np.zeros((2, 2))) and np.array_equal(b, a) and (i0, i1) == (7, 8)


def test_sync_optimizer_rejects_what_it_cannot_wrap() -> None:
    with pytest.raises(TypeError, match="expected a keras.optimizers.Optimizer, got str"):
        SyncOptimizer("sgd", LocalGradientSync())
    opt = keras.optimizers.SGD(0.1)
    opt.build([tf.Variable([1.0])])
    with pytest.raises(ValueError, match="already holds state"):
        SyncOptimizer(opt, LocalGradientSync())
    wrapped = SyncOptimizer(keras.optimizers.Adam(0.01), LocalGradientSync())
    assert isinstance(wrapped, keras.optimizers.Adam) and wrapped.get_config()["learning_rate"] == pytest.approx(0.01)


def test_broadcast_of_an_unbuilt_model_is_refused() -> None:
    model = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="not built yet"):
        broadcast_variables(model, LocalGradientSync())


def test_limit_threads_after_tensorflow_started_refuses_a_change() -> None:
    tf.constant(1.0) + 1.0  # TensorFlow's runtime is up: its pools are fixed from here on
    cfg = tf.config.threading
    have = (cfg.get_intra_op_parallelism_threads(), cfg.get_inter_op_parallelism_threads())
    if 0 not in have:
        assert limit_threads(intra_op=have[0], inter_op=have[1]) == have
    with pytest.raises(RuntimeError, match="call limit_threads before it runs anything"):
        limit_threads(intra_op=have[0] + 3, inter_op=have[1] + 3)
    with pytest.raises(ValueError, match="num_workers must be an int >= 1"):
        limit_threads(0)
    with pytest.raises(ValueError, match="backend must be"):
        limit_threads(2, backend="gloo")


@pytest.mark.timeout(150)
def test_torch_distributed_backend() -> None:
    """2 torchrun ranks (gloo on 127.0.0.1): the same means as the threaded sync, eager and in a graph."""
    import json
    import re
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parents[1] / "train"))
    from _torchrun import run_torchrun, torchrun_cmd

    cmd = torchrun_cmd(
        str(here / "_torchrun_worker.py"),
    )
    proc = run_torchrun(cmd, "RESULT", timeout=140)
    results = [json.loads(m) for m in re.findall(r"RESULT (\{.*?\})", proc.stdout)]
    assert sorted(r["rank"] for r in results) == [0, 1], proc.stdout + proc.stderr[-2000:]
    for r in results:
        assert r["dense"] == [1.5, 2.0] and r["none"] and r["bf16"] == "bfloat16" and r["bf16_value"] == 0.5
        assert r["slices"] == [[0.5, 0.5], [0.5, 0.5], [0.0, 0.0]] and r["graph"] == [0.5] and r["var"] == [5.0]
