"""Bucketed all-reduce overlapped with the backward pass: placement, same bits on every
backend, async torch work handles, gradients as bucket views, gradient accumulation equal to
one big batch."""

import _overlap_workers as OW
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.core.bound import bind_views, bound_flat, is_bound
from asyncnet.simulate.measure import free_port
from asyncnet.sync import run_parallel_workers
from asyncnet.train import MLP
from asyncnet.train.buckets import add_bucketed_allreduce, gradient_buckets, split_input_gradients

pytestmark = pytest.mark.timeout(120)


def test_buckets_follow_production_order_and_close_at_the_cap():
    m = MLP(64, hidden=(1024, 1024), num_classes=10)
    net = m.gradient_net()
    nbytes = {m.grads[p]: int(np.prod(m.shapes[p])) * 4 for p in m.params}
    grads = [m.grads[p] for p in m.params]
    # the backward pass makes fc3's gradients first; within one op, reverse parameter order (DDP)
    assert gradient_buckets(net, grads, nbytes, 2**20) == [
        ["fc3_b_grad", "fc3_w_grad", "fc2_b_grad", "fc2_w_grad"],
        ["fc1_b_grad", "fc1_w_grad"],
    ]
    assert gradient_buckets(net, grads, nbytes, 25 * 2**20) == [
        ["fc3_b_grad", "fc3_w_grad", "fc2_b_grad", "fc2_w_grad", "fc1_b_grad", "fc1_w_grad"]
    ]
    assert len(gradient_buckets(net, grads, nbytes, 1)) == 6


def test_each_start_follows_its_last_producer_and_starts_are_chained():
    m = MLP(8, hidden=(16, 16), num_classes=3)
    net = m.train_net(sync_blob="sync", bucket_mb=1e-9)  # one gradient per bucket
    ops = net.ops
    starts = [i for i, op in enumerate(ops) if op.type == "AllreduceStart"]
    assert len(starts) == len(m.params)
    for k, i in enumerate(starts):
        grads = ops[i].inputs[1:]
        producer = max(
            j for j, op in enumerate(ops[:i]) if set(grads) & set(op.outputs) and op.type != "AllreduceStart"
        )
        assert all(ops[j].type == "AllreduceStart" for j in range(producer + 1, i))  # right after it
        assert ops[i].control_inputs == ([] if k == 0 else [f"sync/work{k - 1}"])
    first_update = next(i for i, op in enumerate(ops) if op.type == "SGD")
    waits = [i for i, op in enumerate(ops) if op.type == "AllreduceWait"]
    assert len(waits) == len(starts) and max(waits) < first_update
    # every wait is ready only once the last bucket started (a wait taken early holds its thread)
    last_work = f"sync/work{len(starts) - 1}"
    assert [ops[i].control_inputs for i in waits] == [[last_work]] * (len(waits) - 1) + [[]]


@pytest.mark.parametrize(
    "op_type,x_shape,w_shape,axis,axis_w",
    [
        ("FCGradient", (6, 5), (4, 5), 1, 1),
        ("FCGradient", (3, 2, 5, 2), (4, 5, 2), 2, 1),
        ("FCTransposedGradient", (6, 5), (5, 4), 1, 1),
        ("FCGradient", (6, 10), (4, 5, 2), 1, 1),
    ],
)
def test_split_input_gradient_gives_fc_gradients_bits(op_type, x_shape, w_shape, axis, axis_w):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    m = int(np.prod(x_shape[:axis]))
    dy = rng.standard_normal((*x_shape[:axis], 4)).astype(np.float32)
    outs = {}
    for split in (False, True):
        ws = an.Workspace()
        for k, v in (("x", x), ("w", w), ("dy", dy)):
            ws.feed(k, v)
        net = an.Net(f"g{split}", type="async_scheduling", num_workers=2)
        net.add_op(op_type, ["x", "w", "dy"], ["dw", "db", "dx"], axis=axis, axis_w=axis_w)
        if split:
            assert split_input_gradients(net, ["dw"]) == 1
            assert [op.type for op in net.ops] == [op_type, "MatMul", "Shape", "Reshape"]
            assert net.ops[1].control_inputs == ["dw"]  # dX after dW: the bucket starts first
        ws.run_net_once(net)
        outs[split] = [ws.fetch(k) for k in ("dw", "db", "dx")]
        ws.close()
    assert outs[True][2].shape == x_shape and m > 0
    for a, b in zip(outs[False], outs[True]):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_split_leaves_ops_without_a_bucketed_weight_gradient():
    net = an.Net("t")
    net.add_op("FCGradient", ["x", "w", "dy"], ["dw", "db"])  # no dX: nothing to split
    net.add_op("FCGradient", ["x", "w2", "dy2"], ["dw2", "db2", "dx2"])
    assert split_input_gradients(net, ["dw", "other"]) == 0 and len(net.ops) == 2


def test_missing_gradient_producer_is_an_error_naming_it():
    net = an.Net("n")
    net.Scale("x", "g1")
    with pytest.raises(an.NetDefinitionError, match="no op writes \\['g2'\\]"):
        add_bucketed_allreduce(net, "sync", [["g1", "g2"]])


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_overlap_gives_the_same_bits_as_one_allreduce(backend):
    results = run_parallel_workers(2, OW.overlap_and_not, backend=backend, timeout=90)
    for over, whole, plain in results:
        # these backends reduce each gradient in place: no bucket views, no copy into them
        assert not whole.pop("bound").any() and not over.pop("bound").any()
        for p in plain:
            assert over[p].tobytes() == plain[p].tobytes() == whole[p].tobytes(), p
    for p in results[0][0]:  # replicas stay identical
        assert results[0][0][p].tobytes() == results[1][0][p].tobytes()


def test_torch_async_work_handles_give_the_same_bits(tmp_path):
    pytest.importorskip("torch")
    import torch.multiprocessing as tmp

    tmp.spawn(OW.torch_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    for d in ranks:
        assert d["whole_bound"].all() and d["over_bound"][:-1].all()  # gradients stayed bucket views
        for k in d.files:
            if k.startswith("plain_"):
                assert d[k].tobytes() == d["over_" + k[6:]].tobytes() == d["whole_" + k[6:]].tobytes(), k
    for k in ranks[0].files:
        assert ranks[0][k].tobytes() == ranks[1][k].tobytes(), k
    # and the training moved the parameters: not a net that does nothing
    ref = an.Workspace()
    m = MLP(**OW.DIMS, seed=3)
    ref.run_net_once(m.init_net)
    assert not np.array_equal(ranks[0]["over_fc1_w"], ref.fetch("fc1_w"))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_accumulating_micro_batches_equals_one_big_batch(optimizer):
    k, size = 3, 8
    x, y = OW.batches(0, steps=1, size=k * size)[0]

    def run(nets_and_batches):
        m = MLP(**OW.DIMS, optimizer=optimizer, seed=5)
        ws = an.Workspace()
        ws.run_net_once(m.init_net)
        for build, (xb, yb) in nets_and_batches(m):
            ws.feed("data", xb)
            ws.feed("label", yb)
            ws.run_net_once(build)
        return {p: ws.fetch(p) for p in m.params}

    big = run(lambda m: [(m.train_net(), (x, y))])
    parts = [(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(k)]
    acc = run(
        lambda m: [
            (m.accumulate_net(first=True), parts[0]),
            (m.accumulate_net(), parts[1]),
            (m.train_net(micro_batches=k, sync_blob=None), parts[2]),
        ]
    )
    init = run(lambda m: [])
    for p in big:
        assert not np.allclose(big[p], init[p], rtol=0, atol=1e-6), p  # the step changed every parameter
        np.testing.assert_allclose(acc[p], big[p], rtol=1e-5, atol=1e-6)


def test_accumulated_train_net_syncs_the_mean_of_the_micro_batches():
    from asyncnet.sync import LocalGradientSync

    m = MLP(**OW.DIMS, seed=5)
    net = m.train_net(sync_blob="sync", micro_batches=2, bucket_mb=1e-9)
    types = [op.type for op in net.ops]
    # the mean of each gradient is made before its bucket starts, not after the backward pass
    for i, op in enumerate(net.ops):
        if op.type == "AllreduceStart":
            g = op.inputs[1]
            assert max(j for j in range(i) if g in net.ops[j].outputs and net.ops[j].type == "Scale") < i
    assert types.count("Scale") == len(m.params) and types.count("AllreduceStart") == len(m.params)
    ws = an.Workspace()
    ws.feed("sync", LocalGradientSync())
    ws.run_net_once(m.init_net)
    x, y = OW.batches(0, steps=1)[0]
    ws.feed("data", x)
    ws.feed("label", y)
    ws.run_net_once(m.accumulate_net(first=True))
    ws.run_net_once(net)
    # the same micro-batch twice: the mean is that micro-batch's gradient
    g_net = m.gradient_net("g")
    ws2 = an.Workspace()
    ws2.run_net_once(m.init_net)
    ws2.feed("data", x)
    ws2.feed("label", y)
    ws2.run_net_once(g_net)
    for p in m.params:
        np.testing.assert_allclose(ws.fetch(m.grads[p]), ws2.fetch(m.grads[p]), rtol=1e-6, atol=1e-7)


def test_sync_trainer_with_buckets_matches_one_allreduce():
    from asyncnet.train.trainers import TrainConfig, train

    cfg = TrainConfig(mode="sync", workers=2, epochs=1, trace=False)
    a = train(cfg.with_(bucket_mb=0.01)).params
    b = train(cfg.with_(bucket_mb=None)).params
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k
    with pytest.raises(ValueError, match="bucket_mb must be a positive"):
        TrainConfig(bucket_mb=0)


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 9),
    k=st.integers(1, 9),
    n=st.integers(1, 9),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_fc_gradient_writes_into_bound_outputs_with_the_same_bits(m, k, n, dtype, seed):
    rng = np.random.default_rng(seed)
    x, w, dy = (rng.standard_normal(s).astype(dtype) for s in ((m, k), (n, k), (m, n)))
    outs = {}
    for bound in (False, True):
        ws = an.Workspace()
        for name, v in (("x", x), ("w", w), ("dy", dy)):
            ws.feed(name, v)
        if bound:
            views = bind_views([np.full((n, k), np.nan, dtype), np.full(n, np.nan, dtype)])
            ws.feed("dw", views[0])
            ws.feed("db", views[1])
        net = an.Net("g")
        net.add_op("FCGradient", ["x", "w", "dy"], ["dw", "db"])
        ws.run_net_once(net)
        outs[bound] = [ws.fetch("dw"), ws.fetch("db")]
        if bound:  # written into the bucket's memory, not replaced
            assert outs[bound][0] is views[0] and outs[bound][1] is views[1]
        ws.close()
    for a, b in zip(outs[False], outs[True]):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_bound_outputs_only_for_views_of_one_bucket_in_order():
    a, b = bind_views([np.ones((2, 3), np.float32), np.ones(3, np.float32)])
    (c,) = bind_views([np.ones(3, np.float32)])
    assert is_bound(a) and not is_bound(np.ones(3)) and not is_bound(a.copy())
    assert bound_flat([a, b]).shape == (9,) and np.shares_memory(bound_flat([a, b]), b)
    assert bound_flat([b, a]) is None and bound_flat([a, c]) is None and bound_flat([a.T, b]) is None
    # a bound output of another shape or dtype is not written: the kernel returns a fresh array
    for x, w, dy in (
        (np.ones((4, 2), np.float32), np.ones((3, 2), np.float32), np.ones((4, 3), np.float32)),
        (np.ones((4, 3)), np.ones((2, 3)), np.ones((4, 2))),
    ):
        ws = an.Workspace()
        for name, v in (("x", x), ("w", w), ("dy", dy), ("dw", a), ("db", b)):
            ws.feed(name, v)
        net = an.Net("g")
        net.add_op("FCGradient", ["x", "w", "dy"], ["dw", "db"])
        ws.run_net_once(net)
        assert ws.fetch("dw") is not a and (a == 1).all()
        np.testing.assert_array_equal(ws.fetch("dw"), np.full(w.shape, 4.0))
        assert (ws.fetch("db") is b) == (w.shape[0] == 3 and w.dtype == b.dtype)  # db [3] float32 fits b


def test_bench_overlap_timeline_has_every_op_and_thread_cpu():
    from benchmarks.overlap import _thread_cpu, _timeline, _timeline_lines

    m = MLP(**OW.DIMS, net_type="async_scheduling", num_workers=1)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    x, y = OW.batches(0, steps=1)[0]
    ws.feed("data", x)
    ws.feed("label", y)
    net = m.train_net("t")
    inst = ws.create_net(net)
    tl = _timeline(ws, inst, "t", 3, lambda: None)
    assert sorted(o[0] for o in tl["ops"]) == list(range(len(net.ops)))  # each op once, by index
    assert all(0 <= start <= end for _, _, _, start, end in tl["ops"])
    assert inst.recorder is None  # profiling is off again
    assert "MainThread" in _thread_cpu() and all(v >= 0 for v in tl["thread_cpu_ms"].values())
    lines = _timeline_lines([tl])
    assert lines[0].startswith("rank 0") and lines[-1].startswith("  CPU ms per step by thread")
    ws.close()


def test_allreduce_start_binds_views_only_for_a_flattening_sync_and_not_a_mixed_bucket():
    from asyncnet.sync import LocalGradientSync

    class Flat(LocalGradientSync):
        flattens_buckets = True

    def start(sync, grads):
        ws = an.Workspace()
        ws.feed("sync", sync)
        for k, g in grads.items():
            ws.feed(k, g)
        net = an.Net("s")
        net.AllreduceStart(["sync", *grads], [*grads, "work"], bucket_view=1)
        ws.run_net_once(net)
        return ws, [ws.fetch(k) for k in grads]

    a, b = np.ones((2, 2), np.float32), np.arange(3, dtype=np.float32)
    _, out = start(LocalGradientSync(), {"a": a, "b": b})
    assert out[0] is a and out[1] is b  # no flat buffer to save: untouched
    _, (va, vb) = start(Flat(), {"a": a, "b": b})
    assert bound_flat([va, vb]) is not None and vb.tolist() == [0, 1, 2]  # bound: one copy, in order
    _, out = start(Flat(), {"a": va, "b": b})  # one view kept, one fresh array
    assert out[0] is va and out[1] is b  # mixed: left alone (the sync concatenates)
    _, out = start(Flat(), {"a": a, "b": b.copy()})  # every producer made a fresh array
    assert bound_flat(out) is not None


def test_bench_rounds_run_the_untimed_before_hook_ahead_of_its_part():
    from asyncnet.simulate.measure import interleaved_medians as _interleaved_medians

    calls: list[str] = []
    parts = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    res = _interleaved_medians(
        parts, steps=2, warmup=1, barrier=lambda: calls.append("|"), before={"b": lambda: calls.append("pre-b")}
    )
    assert calls == ["|", "a", "|", "pre-b", "b"] * 3  # every round, the hook right before its part
    assert set(res) == {"a_s", "a_cpu_s", "b_s", "b_cpu_s"}
