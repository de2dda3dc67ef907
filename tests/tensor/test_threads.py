"""The intra-op thread budget: executor workers x BLAS/torch threads stay within the cores."""

import threading

import numpy as np
import pytest
import threadpoolctl

import asyncnet as an
from asyncnet.errors import NetDefinitionError
from asyncnet.tensor import threads as budget

pytestmark = pytest.mark.timeout(120)

CORES = budget.process_cores()
needs_2_cores = pytest.mark.skipif(CORES < 2, reason="the budget only limits anything with 2+ cores")


def blas_threads() -> int:
    return max(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas")


@pytest.fixture(autouse=True)
def clean_budget():
    assert budget.intra_op_threads() is None, "a claim leaked from an earlier test"
    before = blas_threads()
    yield
    budget.set_process_cores(None)
    assert budget.intra_op_threads() is None
    assert blas_threads() == before


@needs_2_cores
def test_claim_shares_the_cores_and_release_restores():
    before = blas_threads()
    with budget.claim_threads(workers=CORES):
        assert budget.intra_op_threads() == 1 and blas_threads() == 1
    assert blas_threads() == before


@needs_2_cores
def test_workers_add_up_and_explicit_requests_win():
    a = budget.claim_threads(workers=1)
    assert budget.intra_op_threads() == min(CORES, blas_threads()) or budget.intra_op_threads() == CORES
    b = budget.claim_threads(workers=CORES - 1)
    assert budget.intra_op_threads() == 1
    c = budget.claim_threads(threads=2)
    d = budget.claim_threads(threads=1)
    assert budget.intra_op_threads() == 1  # the smallest explicit request
    d.release()
    assert budget.intra_op_threads() == 2
    for claim in (c, b, a, a):  # release is idempotent
        claim.release()


def test_never_above_the_original_unless_asked(monkeypatch):
    with threadpoolctl.threadpool_limits(1, user_api="blas"):  # as OPENBLAS_NUM_THREADS=1 would
        with budget.claim_threads(workers=1):
            assert blas_threads() == 1
        assert blas_threads() == 1


@needs_2_cores
def test_async_net_holds_its_pool_share_until_closed():
    ws = an.Workspace()
    ws.feed("x", np.ones((8, 8)))
    net = an.Net("n", type="async_scheduling", num_workers=CORES)
    for i in range(4):
        net.MatMul(["x", "x"], f"y{i}")
    inst = ws.create_net(net)
    ws.run_net("n")
    assert blas_threads() == 1
    inst.close()
    ws.close()


def test_net_intra_op_threads_is_explicit_and_round_trips():
    net = an.Net("n", intra_op_threads=1)
    net.Relu("x", "y")
    d = net.to_def()
    assert an.NetDef.from_json(d.to_json()).intra_op_threads == 1
    ws = an.Workspace()
    ws.feed("x", np.ones(3))
    inst = ws.create_net(net)
    assert budget.intra_op_threads() == 1 and blas_threads() == 1
    inst.close()
    ws.close()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_bad_intra_op_threads_are_refused(bad):
    with pytest.raises(NetDefinitionError, match="intra_op_threads"):
        an.NetDef("n", intra_op_threads=bad)
    with pytest.raises(ValueError):
        budget.claim_threads(threads=bad if bad != 0 else -3)


def test_process_cores_follow_torchrun_and_overrides(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(CORES))
    assert budget.process_cores() == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    budget.set_process_cores(1)
    with budget.claim_threads(workers=1):
        assert budget.intra_op_threads() == 1
    budget.set_process_cores(None)
    assert budget.process_cores() == CORES
    with pytest.raises(ValueError):
        budget.set_process_cores(0)


@needs_2_cores
def test_torch_threads_follow_the_budget():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with budget.claim_threads(threads=1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_claims_from_many_threads_balance():
    errors = []

    def churn():
        try:
            for _ in range(200):
                budget.claim_threads(workers=1).release()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=churn) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors and budget.intra_op_threads() is None


@needs_2_cores
def test_sync_trainer_workers_do_not_oversubscribe(monkeypatch):
    from asyncnet.train import worker as _common
    from asyncnet.train.trainers import TrainConfig, train

    seen = []
    orig = _common.WorkerNets.step

    def step(self, xb, yb):
        seen.append(blas_threads())
        return orig(self, xb, yb)

    monkeypatch.setattr(_common.WorkerNets, "step", step)
    train(TrainConfig(mode="sync", workers=2, epochs=1, trace=False))
    assert seen and set(seen) == {max(1, CORES // 2)}
    seen.clear()
    train(TrainConfig(mode="local", epochs=1, trace=False, threads=1))
    assert set(seen) == {1}
    assert TrainConfig(mode="local").intra_op_threads() == CORES


@needs_2_cores
def test_a_claim_from_another_thread_takes_effect_after_the_main_thread_set_blas():
    # threadpoolctl lets only the first thread that set a pthreads OpenBLAS pool change it again
    with budget.claim_threads(threads=1):
        pass
    seen = []

    def worker():
        with budget.claim_threads(threads=1):
            seen.append(blas_threads())

    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert seen == [1]


def test_a_ceiling_lowers_the_computed_count_but_not_an_explicit_one():
    with budget.claim_threads(workers=1), budget.claim_threads(at_most=1):
        assert budget.intra_op_threads() == 1
        with budget.claim_threads(threads=2):
            assert budget.intra_op_threads() == 2  # asked for explicitly
    with pytest.raises(ValueError):
        budget.claim_threads(at_most=0)


@needs_2_cores
def test_torch_gets_one_thread_beside_executor_workers_unless_asked():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with budget.claim_threads(workers=1):  # BLAS may keep the cores; torch's spinning pool may not
        assert torch.get_num_threads() == 1
        with budget.claim_threads(threads=2):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@needs_2_cores
def test_async_net_counts_its_helping_caller():
    """net.run() runs chains on the caller's thread beside the pool's: a 1-worker net is two
    threads running ops, so each gets half the cores' BLAS threads."""
    ws = an.Workspace()
    ws.feed("x", np.ones((8, 8)))
    net = an.Net("n", type="async_scheduling", num_workers=1)
    net.MatMul(["x", "x"], "y0")
    net.MatMul(["x", "x"], "y1")
    inst = ws.create_net(net)
    ws.run_net("n")
    assert budget.intra_op_threads() == max(1, CORES // 2)
    assert blas_threads() <= max(1, CORES // 2)
    inst.close()
    ws.close()


@needs_2_cores
def test_pool_workers_take_up_torch_counts_set_after_they_first_used_torch():
    # torch reads its intra-op count into each thread once, on the thread's first torch call: a
    # worker whose first call saw another count (set by the user, say) follows the budget's
    torch = pytest.importorskip("torch")
    from asyncnet.exec.pools import WorkerPool

    original = torch.get_num_threads()
    seen = []
    done = threading.Semaphore(0)

    def report(_):
        seen.append(torch.get_num_threads())
        done.release()

    pool = WorkerPool("follow", 1)  # its claim sets torch to 1 thread
    try:
        torch.set_num_threads(CORES)  # set directly, behind the budget's back
        pool.submit(report, None)  # the worker's first torch call
        assert done.acquire(timeout=20)
        with budget.claim_threads(workers=CORES):  # the budget sets torch to 1 again
            pool.submit(report, None)
            assert done.acquire(timeout=20)
    finally:
        pool.shutdown()
        torch.set_num_threads(original)
    assert seen == [1, 1]
