"""Intra-op splits of big matrix products onto an idle executor thread: same bits as the unsplit
product, never more busy threads than cores, errors raised by the op's own thread."""

import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.tensor import parallel
from asyncnet.tensor import threads as budget

_READ_RUNNABLE = parallel.runnable_threads  # the real reader (the fixture below replaces it)

pytestmark = pytest.mark.timeout(120)

CORES = budget.process_cores()
needs_2_cores = pytest.mark.skipif(CORES < 2, reason="a split needs a second core")


class Spare:
    """A stand-in for the executor's idle worker: one thread that runs what it is offered."""

    def __init__(self, accept: bool = True):
        self.accept = accept
        self.offered = 0
        self.ran = 0
        self._items: list = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def offer(self, fn) -> bool:
        if not self.accept:
            return False
        with self._cv:
            self.offered += 1
            self._items.append(fn)
            self._cv.notify()
        return True

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._items and not self._stop:
                    self._cv.wait(1.0)
                if self._stop and not self._items:
                    return
                fn = self._items.pop(0)
            fn()
            self.ran += 1

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(10)


def _settled(busy: int = 0) -> bool:
    """Every reserved core is back (a spare gives its own back just after its last piece): only
    ``busy`` threads count."""
    deadline = time.monotonic() + 5
    while parallel.cores_in_use() > busy and time.monotonic() < deadline:
        time.sleep(0.005)
    return parallel.cores_in_use() == busy


@pytest.fixture(autouse=True)
def low_threshold(monkeypatch):
    """Splits from 1 M multiply-adds: the tests' products stay small whatever the tuned threshold;
    and the machine counts as having a free core whatever else runs on it (the load of a shared
    machine must not decide a test)."""
    monkeypatch.setattr(parallel, "ENABLED", True)  # off by default (see the module)
    monkeypatch.setattr(parallel, "SPLIT_MIN_MACS", 1_000_000)
    monkeypatch.setattr(parallel, "runnable_threads", lambda: 1)
    monkeypatch.setattr(parallel, "ROOM_TTL", 0.0)  # every offer reads the (patched) machine


@pytest.fixture
def one_thread_blas():
    with budget.claim_threads(workers=CORES):  # the executor's budget: 1 BLAS thread per worker
        yield


@pytest.fixture
def spare():
    s = Spare()
    yield s
    s.close()


def _operands(rng, m, k, n, dtype):
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


@needs_2_cores
@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 300),
    k=st.integers(1, 300),
    n=st.integers(1, 300),
    dtype=st.sampled_from([np.float32, np.float64]),
    transpose_b=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_split_product_has_the_bits_of_numpys(m, k, n, dtype, transpose_b, seed):
    rng = np.random.default_rng(seed)
    a, b = _operands(rng, m, k, n, dtype)
    if transpose_b:  # W.T of an FC: a transposed view
        b = np.ascontiguousarray(b.T).T
    s = Spare()
    try:
        with budget.claim_threads(workers=CORES), parallel.spare_thread(s.offer):
            expected = a @ b  # on the executor's one-thread BLAS (more threads cut the product otherwise)
            for _ in range(3):  # the layout check, then the split runs
                got = parallel.matmul(a, b)
                assert got.dtype == expected.dtype
                np.testing.assert_array_equal(got, expected)
    finally:
        s.close()


@needs_2_cores
def test_big_product_is_split_onto_the_spare(one_thread_blas, spare, monkeypatch):
    monkeypatch.setattr(parallel, "_checked", {})
    rng = np.random.default_rng(0)
    a, b = _operands(rng, 256, 128, 192, np.float32)
    before = parallel.stats()["split"]
    with parallel.spare_thread(spare.offer):
        for _ in range(4):
            assert _settled(busy=1)  # the last share's core is back: the next product may offer one
            np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
    assert spare.offered == 3  # the first call checks the layout, the next three offer a half
    assert parallel.stats()["split"] - before == 3


def test_small_products_and_threads_without_a_spare_run_whole(one_thread_blas, spare):
    rng = np.random.default_rng(1)
    a, b = _operands(rng, 32, 16, 16, np.float64)  # far below SPLIT_MIN_MACS
    with parallel.spare_thread(spare.offer):
        np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
    big = _operands(rng, 256, 256, 256, np.float64)
    np.testing.assert_array_equal(parallel.matmul(*big), big[0] @ big[1])  # no spare here
    assert spare.offered == 0


def test_no_split_when_blas_runs_several_threads(spare, monkeypatch):
    monkeypatch.setattr(parallel, "intra_op_threads", lambda: 2)  # BLAS already uses 2 cores per call
    rng = np.random.default_rng(2)
    a, b = _operands(rng, 256, 256, 256, np.float64)
    monkeypatch.setattr(parallel, "_checked", {})
    with parallel.spare_thread(spare.offer):
        for _ in range(3):
            np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
    assert spare.offered == 0
    assert parallel._checked == {}  # no layout verdict taken with several BLAS threads


def test_busy_threads_plus_halves_never_exceed_the_cores(one_thread_blas, spare, monkeypatch):
    """With every core busy running ops, no half is offered; with one free, the offered half
    reserves it while it runs."""
    monkeypatch.setattr(parallel, "process_cores", lambda: 2)
    monkeypatch.setattr(parallel, "_checked", {})
    seen: list[int] = []

    def watching(fn):
        seen.append(parallel.cores_in_use())  # the reservation is taken before the offer
        return spare.offer(fn)

    rng = np.random.default_rng(3)
    a, b = _operands(rng, 256, 256, 256, np.float64)
    with parallel.spare_thread(watching):
        parallel.matmul(a, b)  # the layout check
        other = parallel.enter(None)  # a second executor thread is running an op: both cores busy
        try:
            assert parallel.cores_in_use() == 2
            np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
            assert seen == []
        finally:
            parallel.leave(other)
        np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
    assert seen == [2] and max(seen) <= 2
    assert _settled()


def test_refused_offer_runs_both_halves_here(one_thread_blas):
    s = Spare(accept=False)
    try:
        rng = np.random.default_rng(4)
        a, b = _operands(rng, 256, 256, 256, np.float32)
        with parallel.spare_thread(s.offer):
            for _ in range(3):
                np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
        assert _settled()
    finally:
        s.close()


def test_a_half_not_started_is_taken_back():
    """The op's thread never waits for a spare that did not start: it computes the half itself."""
    held: list = []
    ran = []
    with parallel.spare_thread(lambda fn: held.append(fn) or True):
        with budget.claim_threads(workers=CORES):
            if budget.intra_op_threads() != 1 or CORES < 2:
                pytest.skip("needs the one-thread budget on 2+ cores")
            assert parallel.run_halves(lambda: ran.append(1), lambda: ran.append(2))
    assert ran == [1, 2] and len(held) == 1
    held[0]()  # the spare gets to it late: nothing runs twice, the reserved core is given back
    assert ran == [1, 2]
    assert _settled()


@needs_2_cores
def test_errors_in_either_half_reach_the_caller(one_thread_blas, spare):
    def boom():
        raise ValueError("half failed")

    ran = []
    with parallel.spare_thread(spare.offer):
        with pytest.raises(ValueError, match="half failed"):
            parallel.run_halves(lambda: ran.append(1), boom)
        with pytest.raises(ZeroDivisionError):
            parallel.run_halves(lambda: 1 / 0, lambda: ran.append(2))
    assert 1 in ran
    assert _settled()


# -- through the executor ------------------------------------------------------------------------
def _fc_net(net_type: str, workers: int = 2) -> an.Net:
    net = an.Net("fcs", type=net_type, num_workers=workers)
    h = net.FC(["x", "w1", "b1"], "h")
    net.Relu(h, h)
    y = net.FC([h, "w2", "b2"], "y")
    net.FCGradient(["h", "w2", y], ["dw2", "db2", "dh"])
    net.MatMul(["h", "w1"], "m")
    return net


def _feed(ws: an.Workspace, dtype) -> None:
    rng = np.random.default_rng(5)
    ws.feed("x", rng.standard_normal((256, 192)).astype(dtype))
    ws.feed("w1", rng.standard_normal((320, 192)).astype(dtype))
    ws.feed("b1", rng.standard_normal(320).astype(dtype))
    ws.feed("w2", rng.standard_normal((160, 320)).astype(dtype))
    ws.feed("b2", rng.standard_normal(160).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_async_executor_offers_splits_and_keeps_the_simple_executors_bits(dtype):
    outs = {}
    tried = 0
    for net_type in ("simple", "async_scheduling"):
        ws = an.Workspace()
        try:
            _feed(ws, dtype)
            ws.create_net(_fc_net(net_type))
            before = parallel.stats()
            for _ in range(6):
                ws.run_net("fcs")
            after = parallel.stats()
            if net_type == "async_scheduling":
                tried = after["split"] + after["whole"] - before["split"] - before["whole"]
            outs[net_type] = {k: np.array(ws.fetch(k)) for k in ("h", "y", "dw2", "db2", "dh", "m")}
        finally:
            ws.close()
    for k, v in outs["simple"].items():
        np.testing.assert_array_equal(outs["async_scheduling"][k], v, err_msg=k)
    if CORES >= 2:
        assert tried > 0  # the big products of the async runs were offered a spare


def test_pool_offer_runs_on_an_idle_worker_only():
    from asyncnet.core.defs import DeviceOption
    from asyncnet.exec.pools import acquire_pool

    lease = acquire_pool(DeviceOption(), size=1, own=True)
    try:
        pool = lease.pool
        assert not pool.offer(lambda: None)  # no thread started yet: none idle
        started = threading.Event()
        pool.submit(lambda ev: ev.set(), started)
        assert started.wait(10)
        ran = threading.Event()
        deadline = 50
        while not pool.offer(ran.set) and deadline:  # the worker turns idle once its item returned
            threading.Event().wait(0.01)
            deadline -= 1
        assert ran.wait(10)
    finally:
        lease.release()


def test_async_executor_on_torch_tensors_keeps_the_simple_executors_bits():
    torch = pytest.importorskip("torch")
    outs = {}
    for net_type in ("simple", "async_scheduling"):
        ws = an.Workspace()
        try:
            _feed(ws, np.float32)
            for name in ("x", "w1", "b1", "w2", "b2"):
                ws.feed(name, torch.from_numpy(np.array(ws.fetch(name))))
            ws.create_net(_fc_net(net_type))
            for _ in range(6):
                ws.run_net("fcs")
            outs[net_type] = {k: ws.fetch(k).numpy() for k in ("h", "y", "dw2", "db2", "dh", "m")}
        finally:
            ws.close()
    for k, v in outs["simple"].items():
        np.testing.assert_array_equal(outs["async_scheduling"][k], v, err_msg=k)


@needs_2_cores
def test_torch_products_split_with_the_unsplit_bits(one_thread_blas, spare, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(parallel, "_checked", {})
    g = torch.Generator().manual_seed(7)
    x, w, bias = torch.randn(256, 200, generator=g), torch.randn(300, 200, generator=g), torch.randn(300, generator=g)
    with parallel.spare_thread(spare.offer):
        for _ in range(3):
            assert torch.equal(parallel.torch_addmm(bias, x, w.t()), bias.addmm(x, w.t()))
            assert torch.equal(parallel.torch_mm(x, w.t()), x.mm(w.t()))
            assert torch.equal(parallel.torch_mm(w.t().t(), x.t()), w.mm(x.t()))
    assert spare.offered > 0


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(parallel, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_autograd_tensors_are_never_split():
    """torch's out= products refuse tensors that require grad: those MatMuls run whole."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    a = torch.randn(256, 192, generator=g, requires_grad=True)
    b = torch.randn(192, 160, generator=g)
    net = an.Net("ag", type="async_scheduling", num_workers=2)
    net.MatMul(["a", "b"], "c")
    net.MatMul(["b", "b"], "d", trans_b=True)
    with an.Workspace() as ws:
        ws.feed("a", a)
        ws.feed("b", b)
        ws.create_net(net)
        for _ in range(4):
            ws.run_net("ag")
        assert torch.equal(ws.fetch("c").detach(), (a @ b).detach())


@needs_2_cores
def test_every_piece_runs_once_whoever_takes_it(one_thread_blas, spare):
    ran: list[int] = []
    lock = threading.Lock()

    def piece(i):
        def fn():
            with lock:
                ran.append(i)

        return fn

    with parallel.spare_thread(spare.offer):
        for _ in range(20):
            ran.clear()
            parallel.run_pieces([piece(i) for i in range(4)])  # shared, or all here while the last share's core is busy
            assert sorted(ran) == [0, 1, 2, 3]
    assert spare.offered > 0
    assert _settled()


def test_pieces_after_a_failure_are_skipped():
    held: list = []
    ran: list[int] = []

    def boom():
        raise ValueError("piece failed")

    with budget.claim_threads(workers=CORES):
        if budget.intra_op_threads() != 1 or CORES < 2:
            pytest.skip("needs the one-thread budget on 2+ cores")
        with parallel.spare_thread(lambda fn: held.append(fn) or True):
            with pytest.raises(ValueError, match="piece failed"):
                parallel.run_pieces([lambda: ran.append(0), boom, lambda: ran.append(2), lambda: ran.append(3)])
    assert ran == [0]  # the spare never started: this thread ran 0, failed at 1, skipped the rest
    held[0]()  # the withdrawn offer, taken late: runs nothing
    assert ran == [0] and _settled()


def test_no_offer_while_other_jobs_keep_every_core_busy(one_thread_blas, spare, monkeypatch):
    monkeypatch.setattr(parallel, "runnable_threads", lambda: CORES + 3)
    rng = np.random.default_rng(9)
    a, b = _operands(rng, 256, 256, 256, np.float32)
    with parallel.spare_thread(spare.offer):
        for _ in range(3):
            np.testing.assert_array_equal(parallel.matmul(a, b), a @ b)
    assert spare.offered == 0 and _settled()


def test_runnable_threads_reads_the_machine():
    n = _READ_RUNNABLE()
    if os.path.exists("/proc/loadavg"):
        assert isinstance(n, int) and n >= 1  # this thread, at least
    else:
        assert n is None


def test_without_a_free_core_the_product_is_one_call():
    calls = []
    pieces = [lambda: calls.append("piece"), lambda: calls.append("piece")]
    assert not parallel.run_pieces(pieces, lambda: calls.append("whole"))  # no spare on this thread
    with parallel.spare_thread(lambda fn: False):  # a spare with no idle worker
        assert not parallel.run_pieces(pieces, lambda: calls.append("whole"))
    assert calls == ["whole", "whole"]
