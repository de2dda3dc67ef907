"""caffe2.python.data_workers as Caffe2's module behaves (its own unit tests' checks, rewritten):
batches of exactly batch_size samples along each batch column, input order kept, stop that
never hangs, and a model trained from fed batches equal to one fed by hand."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from caffe2.python import brew, core, data_workers, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0  # s to wait for the worker threads' data (never reached on a working machine)


@pytest.fixture
def coordinators():
    """Stops every coordinator a test leaves running (a failed test must not leave threads)."""
    yield data_workers.global_coordinator
    data_workers.global_coordinator.stop()


def _wait_for(pred) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, "the workers produced no data"
        time.sleep(0.01)


def test_batches_have_batch_size_samples_and_keep_rows_together(coordinators):
    rng_lock, rng = threading.Lock(), np.random.default_rng(0)

    def fetch(worker_id, batch_size):
        with rng_lock:
            n = int(rng.integers(1, 65))
        values = np.arange(n, dtype=np.float64) + 1000 * worker_id
        return [np.repeat(values[:, None], 3, axis=1), values.copy()]

    model = model_helper.ModelHelper(name="feed")
    before = coordinators._fetcher_id_seq
    coordinator = data_workers.init_data_input_workers(model, ["data", "label"], fetch, 32, 2, input_source_name="t1")
    assert coordinators._fetcher_id_seq == before + 2
    assert [op.type for op in model.net.Proto().op] == ["DequeueBlobs", "DequeueBlobs"]
    coordinator.start()
    workspace.CreateNet(model.net)
    for _ in range(200):
        workspace.RunNet(model.net.Proto().name)
        data, label = workspace.FetchBlob("data"), workspace.FetchBlob("label")
        assert data.shape == (32, 3) and label.shape == (32,)
        np.testing.assert_array_equal(data, np.repeat(label[:, None], 3, axis=1))
    coordinator.stop_coordinator("t1")
    assert coordinator._coordinators == []


def test_batch_columns_rebatch_along_time_major_inputs(coordinators):
    def fetch(worker_id, batch_size):
        n = 5 + worker_id
        data = np.broadcast_to(np.arange(n, dtype=np.float32)[None, :, None], (4, n, 2)).copy()
        return [data, np.arange(n, dtype=np.int32)]

    model = model_helper.ModelHelper(name="rnn_feed")
    coordinator = data_workers.init_data_input_workers(
        model, ["seq", "lengths"], fetch, 8, 2, input_source_name="t2", batch_columns=[1, 0]
    )
    coordinator.start()
    workspace.CreateNet(model.net)
    for _ in range(20):
        workspace.RunNet(model.net)
        seq, lengths = workspace.FetchBlob("seq"), workspace.FetchBlob("lengths")
        assert seq.shape == (4, 8, 2) and lengths.shape == (8,)
        np.testing.assert_array_equal(seq[0, :, 0], lengths.astype(np.float32))
    assert coordinator.stop()


def test_stop_ends_an_enqueuer_blocked_on_a_full_queue_and_a_blocked_dequeue(coordinators):
    model = model_helper.ModelHelper(name="blocked")
    coordinator = data_workers.init_data_input_workers(
        model, ["x"], lambda w, b: [np.ones((b, 2), np.float32)], 4, 1, input_source_name="t3"
    )
    coordinator.start()
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net)
    _wait_for(lambda: len(workspace.FetchBlob("x_c2queue_t3")) == 4)  # the Caffe2 queue is full
    t0 = time.monotonic()
    assert coordinator.stop()
    assert time.monotonic() - t0 < WAIT
    for _ in range(4):  # a closed queue still hands out what it holds
        assert workspace.RunNet(model.net)
    assert not workspace.RunNet(model.net, allow_fail=True)  # then the dequeue fails, no hang


def test_two_sources_with_the_same_blob_names_keep_their_order(coordinators):
    counters = {}

    def make_fetch(start):
        def fetch(worker_id, batch_size):
            k = counters.setdefault(worker_id, start)
            counters[worker_id] = k + 1
            return [np.full((batch_size, 1), k, np.float32)]

        return fetch

    train = model_helper.ModelHelper(name="train_order")
    val = model_helper.ModelHelper(name="val_order")
    coordinator = data_workers.init_data_input_workers(
        train, ["d"], make_fetch(0), 3, 1, input_source_name="train_o", dont_rebatch=True
    )
    data_workers.init_data_input_workers(
        val, ["d"], make_fetch(500), 3, 1, input_source_name="val_o", dont_rebatch=True
    )
    coordinator.start()
    for m in (train, val):
        workspace.CreateNet(m.net)
        workspace.RunNet(m.net)
        last = workspace.FetchBlob("d")[0, 0]
        for _ in range(10):
            workspace.RunNet(m.net)
            now = workspace.FetchBlob("d")[0, 0]
            assert now == last + 1
            last = now
    assert coordinator.stop()


def _classifier(name: str) -> model_helper.ModelHelper:
    m = model_helper.ModelHelper(name=name)
    return m


def _train_ops(m: model_helper.ModelHelper) -> None:
    fc = brew.fc(m, "x", "fc", dim_in=4, dim_out=2)
    _, loss = m.net.SoftmaxWithLoss([fc, "y"], ["prob", "loss"])
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, base_learning_rate=0.5)


def _batches(n: int, batch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    w = np.array([1.5, -2.0, 0.5, 1.0])
    out = []
    for _ in range(n):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        out.append((x, (x @ w > 0).astype(np.int32)))
    return out


def test_a_model_trained_on_fed_batches_equals_one_fed_by_hand(coordinators):
    batches = _batches(60, 16)
    fed = iter(batches)

    def fetch(worker_id, batch_size):
        try:
            x, y = next(fed)
        except StopIteration:
            time.sleep(0.01)
            return None
        return [x, y]

    m = _classifier("fed")
    coordinator = data_workers.init_data_input_workers(m, ["x", "y"], fetch, 16, 1, input_source_name="fit")
    _train_ops(m)
    workspace.RunNetOnce(m.param_init_net)
    w0, b0 = np.zeros((2, 4), np.float32), np.zeros(2, np.float32)  # a known start: loss ln 2
    workspace.FeedBlob("fc_w", w0)
    workspace.FeedBlob("fc_b", b0)
    coordinator.start()
    workspace.CreateNet(m.net)
    losses = []
    for _ in batches:
        workspace.RunNet(m.net)
        losses.append(float(workspace.FetchBlob("loss")))
    assert coordinator.stop()
    w_fed, b_fed = workspace.FetchBlob("fc_w"), workspace.FetchBlob("fc_b")

    workspace.ResetWorkspace()
    ref = _classifier("by_hand")
    _train_ops(ref)
    workspace.RunNetOnce(ref.param_init_net)
    workspace.FeedBlob("fc_w", w0)
    workspace.FeedBlob("fc_b", b0)
    workspace.FeedBlob("x", batches[0][0])
    workspace.FeedBlob("y", batches[0][1])
    workspace.CreateNet(ref.net)
    for x, y in batches:
        workspace.FeedBlob("x", x)
        workspace.FeedBlob("y", y)
        workspace.RunNet(ref.net)
    np.testing.assert_array_equal(w_fed, workspace.FetchBlob("fc_w"))
    np.testing.assert_array_equal(b_fed, workspace.FetchBlob("fc_b"))
    assert abs(losses[0] - np.log(2)) < 1e-6
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10])
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    acc = ((x @ w_fed.T + b_fed).argmax(1) == y).mean()
    assert acc > 0.9


def test_fetcher_returning_wrong_counts_stops_its_coordinator(coordinators):
    model = model_helper.ModelHelper(name="bad")
    coordinator = data_workers.init_data_input_workers(
        model, ["a", "b"], lambda w, b: [np.zeros((3, 1)), np.zeros((2, 1))], 4, 1, input_source_name="t5"
    )
    coordinator.start()
    state = coordinator._coordinators[-1]
    _wait_for(lambda: not state.is_active())
    assert coordinator.stop()


def test_queue_ops_from_core_net_like_caffe2_scripts():
    init = core.Net("queue_init")
    q = init.CreateBlobsQueue([], "inputqueue", num_blobs=1, capacity=3)
    workspace.RunNetOnce(init)
    put = core.Net("put")
    put.EnqueueBlobs([q, "scratch"], ["scratch"])
    for k in range(3):
        workspace.FeedBlob("scratch", np.full(2, k, np.float32))
        workspace.RunNetOnce(put.Proto())
    get = core.Net("get")
    get.DequeueBlobs(q, "x")
    workspace.CreateNet(get)
    seen = []
    for _ in range(3):
        workspace.RunNet(get.Proto().name)
        seen.append(workspace.FetchBlob("x").tolist())
    assert seen == [[0, 0], [1, 1], [2, 2]]


@pytest.mark.parametrize("name", ["caffe2.python.data_workers", "caffe2.python.parallel_workers"])
def test_docstring_examples(name, coordinators):
    import doctest
    import importlib

    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
