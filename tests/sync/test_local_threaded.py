"""LocalGradientSync and ThreadedGradientSync: the reference scenarios and the fixes."""

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet.sync._reduce as reduce_mod
import asyncnet.sync.threaded as threaded_mod
from asyncnet.errors import SyncAbortedError, SyncMismatchError, SyncTimeoutError
from asyncnet.sync import GradientSync, LocalGradientSync, ThreadedGradientSync

pytestmark = pytest.mark.timeout(30)


def run_threads(syncs, fn):
    """Run fn(sync) on one thread per handle; return (results, errors) by worker id."""
    results, errors = [None] * len(syncs), [None] * len(syncs)

    def body(i):
        try:
            results[i] = fn(syncs[i])
        except BaseException as exc:  # noqa: BLE001
            errors[i] = exc

    ts = [threading.Thread(target=body, args=(i,)) for i in range(len(syncs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
        assert not t.is_alive(), "a worker hung"
    return results, errors


def test_local_is_identity_and_allocates_nothing():
    sync = LocalGradientSync()
    g = np.array([1.0, 2.0])
    before = g.copy()
    sync.sync_gradients(g)
    sync.sync_gradients([g, g])
    assert np.array_equal(g, before)
    assert (sync.is_distributed, sync.num_workers, sync.worker_id) == (False, 1, 0)
    assert isinstance(sync, GradientSync)
    with pytest.raises(TypeError):
        sync.sync_gradients("not a gradient")


def test_reference_average_two_workers():
    syncs = ThreadedGradientSync.new_workers(2, timeout=10)
    grads = [np.array([2.0, 4.0]), np.array([4.0, 8.0])]
    run_threads(syncs, lambda s: s.sync_gradients(grads[s.worker_id]))
    assert grads[0].tolist() == [3.0, 6.0] and grads[1].tolist() == [3.0, 6.0]


@pytest.mark.parametrize("n", [0, -1])
def test_reference_zero_workers_is_an_error(n):
    with pytest.raises(ValueError):
        ThreadedGradientSync.new_workers(n)


def test_properties():
    syncs = ThreadedGradientSync.new_workers(3)
    assert [s.worker_id for s in syncs] == [0, 1, 2]
    assert all(s.num_workers == 3 and s.is_distributed for s in syncs)
    assert not ThreadedGradientSync.new_workers(1)[0].is_distributed
    assert isinstance(syncs[0], GradientSync)


def test_reference_length_mismatch_errors_everyone_then_recovers():
    syncs = ThreadedGradientSync.new_workers(3, timeout=10)
    grads = [np.full(k, float(i), np.float32) for i, k in enumerate([4, 7, 4])]
    originals = [g.copy() for g in grads]
    _, errors = run_threads(syncs, lambda s: s.sync_gradients(grads[s.worker_id]))
    assert all(isinstance(e, SyncMismatchError) for e in errors)
    assert len({str(e) for e in errors}) == 1
    msg = str(errors[0])
    for part in ("worker 0: float32[4]", "worker 1: float32[7]", "worker 2: float32[4]"):
        assert part in msg
    for g, o in zip(grads, originals):
        assert np.array_equal(g, o)
    again = [np.full(5, float(i)) for i in range(3)]
    _, errors = run_threads(syncs, lambda s: s.sync_gradients(again[s.worker_id]))
    assert errors == [None] * 3
    assert all(np.array_equal(a, np.full(5, 1.0)) for a in again)


def test_dtype_mismatch_is_a_mismatch():
    syncs = ThreadedGradientSync.new_workers(2, timeout=10)
    grads = [np.zeros(4, np.float32), np.zeros(4, np.float64)]
    _, errors = run_threads(syncs, lambda s: s.sync_gradients(grads[s.worker_id]))
    assert all(isinstance(e, SyncMismatchError) for e in errors)
    assert "float64" in str(errors[0]) and "float32" in str(errors[0])


def test_missing_worker_times_out_naming_it_and_late_arrival_errors():
    syncs = ThreadedGradientSync.new_workers(3, timeout=0.3)
    grads = [np.full(4, float(i)) for i in range(3)]
    late_go = threading.Event()

    def fn(s):
        if s.worker_id == 2:
            late_go.wait(5)
        try:
            s.sync_gradients(grads[s.worker_id])
        finally:
            if s.worker_id != 2:
                late_go.set()

    start = time.monotonic()
    _, errors = run_threads(syncs, fn)
    assert time.monotonic() - start < 20
    for i in (0, 1):
        assert isinstance(errors[i], SyncTimeoutError) and errors[i].missing == [2]
        assert "[2]" in str(errors[i])
    assert isinstance(errors[2], SyncTimeoutError) and "late" in str(errors[2])
    for i, g in enumerate(grads):
        assert np.array_equal(g, np.full(4, float(i))), "an aborted round changed a gradient"
    # the next round works for everyone, the late worker included
    _, errors = run_threads(syncs, lambda s: s.sync_gradients(grads[s.worker_id]))
    assert errors == [None] * 3
    assert all(np.array_equal(g, np.full(4, 1.0)) for g in grads)


def test_abort_wakes_pending_workers():
    syncs = ThreadedGradientSync.new_workers(3)  # no timeout: only the abort can wake them
    threading.Timer(0.2, lambda: syncs[2].abort("stop")).start()
    _, errors = run_threads(syncs[:2], lambda s: s.sync_gradients(np.ones(3)))
    assert all(isinstance(e, SyncAbortedError) and "stop" in str(e) for e in errors)
    with pytest.raises(SyncAbortedError):
        syncs[2].sync_gradients(np.ones(3))


def _worker_order_mean(grads):
    acc = grads[0].copy()
    for g in grads[1:]:
        acc = acc + g
    return acc / len(grads)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 4),
    size=st.integers(1, 3000),
    delays=st.lists(st.floats(0, 0.004), min_size=4, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_bitwise_identical_whatever_the_arrival_order(n, size, delays, seed):
    rng = np.random.default_rng(seed)
    base = [(rng.standard_normal(size) * 10 ** rng.uniform(-3, 3, size)).astype(np.float32) for _ in range(n)]
    expected = _worker_order_mean(base)
    for order in (delays, delays[::-1]):
        grads = [b.copy() for b in base]
        syncs = ThreadedGradientSync.new_workers(n, timeout=10)

        def fn(s):
            time.sleep(order[s.worker_id])
            s.sync_gradients(grads[s.worker_id])

        _, errors = run_threads(syncs, fn)
        assert errors == [None] * n
        for g in grads:
            assert g.tobytes() == expected.tobytes()


def test_reduction_is_parallel_and_covers_disjoint_slices(monkeypatch):
    calls = []
    real = reduce_mod.reduce_slice

    def spy(sources, targets, lo, hi, *a, **k):
        calls.append((threading.get_ident(), lo, hi))
        return real(sources, targets, lo, hi, *a, **k)

    monkeypatch.setattr(threaded_mod, "reduce_slice", spy)
    n, size = 4, 100_000
    syncs = ThreadedGradientSync.new_workers(n, timeout=10)
    grads = [np.full(size, float(i), np.float32) for i in range(n)]
    run_threads(syncs, lambda s: s.sync_gradients(grads[s.worker_id]))
    assert len(calls) == n and len({c[0] for c in calls}) == n
    spans = sorted((lo, hi) for _, lo, hi in calls)
    assert spans[0][0] == 0 and spans[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(np.array_equal(g, np.full(size, 1.5, np.float32)) for g in grads)


def test_blocks_are_cache_sized_and_no_full_copy(monkeypatch):
    sizes = []
    real_add = np.add

    def add(a, b, out=None):
        sizes.append(a.size)
        return real_add(a, b, out=out)

    monkeypatch.setattr(reduce_mod.np, "add", add)
    try:
        syncs = ThreadedGradientSync.new_workers(2, timeout=10)
        grads = [np.ones(1_000_000, np.float32) for _ in range(2)]
        run_threads(syncs, lambda s: s.sync_gradients(grads[s.worker_id]))
    finally:
        monkeypatch.undo()
    assert max(sizes) * 4 <= reduce_mod.BLOCK_BYTES
    assert all(g.tolist()[:3] == [1.0, 1.0, 1.0] for g in grads)


def test_list_bucket_noncontiguous_and_torch_tensors():
    torch = pytest.importorskip("torch")
    syncs = ThreadedGradientSync.new_workers(2, timeout=10)
    mats = [np.arange(12.0).reshape(3, 4) * (i + 1) for i in range(2)]
    tens = [torch.full((5,), float(i)) for i in range(2)]
    buckets = [[mats[i].T, tens[i], np.full((2, 2), 4.0 * i, np.float32)] for i in range(2)]
    _, errors = run_threads(syncs, lambda s: s.sync_gradients(buckets[s.worker_id]))
    assert errors == [None, None]
    for i in range(2):
        assert np.array_equal(mats[i], np.arange(12.0).reshape(3, 4) * 1.5)
        assert torch.equal(tens[i], torch.full((5,), 0.5))
        assert np.array_equal(buckets[i][2], np.full((2, 2), 2.0, np.float32))


def test_bad_gradients_are_type_errors():
    s = ThreadedGradientSync.new_workers(1)[0]
    with pytest.raises(TypeError, match="floating-point"):
        s.sync_gradients(np.ones(3, np.int64))
    with pytest.raises(TypeError):
        s.sync_gradients(["x"])


def test_broadcast_copies_root_everywhere():
    syncs = ThreadedGradientSync.new_workers(3, timeout=10)
    arrays = [np.full(7, float(i)) for i in range(3)]
    run_threads(syncs, lambda s: s.broadcast(arrays[s.worker_id], root=1))
    assert all(np.array_equal(a, np.full(7, 1.0)) for a in arrays)


def test_many_rounds_no_race():
    n, rounds = 4, 200
    syncs = ThreadedGradientSync.new_workers(n, timeout=10)

    def fn(s):
        out = []
        for r in range(rounds):
            g = np.full(33, float(s.worker_id + r))
            s.sync_gradients(g)
            out.append(g[0])
        return out

    results, errors = run_threads(syncs, fn)
    assert errors == [None] * n
    expected = [r + 1.5 for r in range(rounds)]
    assert all(res == expected for res in results)
