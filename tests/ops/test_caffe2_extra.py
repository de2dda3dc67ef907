"""Logit, ReplaceNaN, EnsureDense, RowMul, DotProduct, ReduceTailSum, Perplexity,
MultiClassAccuracy, RmsProp and the lengths / segment-id ops against numpy and torch."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.errors import OperatorError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)


def _once(ws, op, inputs, outputs, **args):
    ws.run_operator_once(an.OperatorDef(op, inputs, outputs, args))


def _ws(**blobs):
    ws = an.Workspace()
    for k, v in blobs.items():
        ws.feed(k, v)
    return ws


def _grads(op, inputs, wrt, **args):
    ws = _ws(**inputs)
    net = an.Net(op)
    net.add_op(op, list(inputs), ["y"], **args)
    ws.run_net_once(net)
    r = np.random.default_rng(3).uniform(0.5, 1.5, ws.fetch("y").shape)
    ws.feed("r", r)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=wrt, dtype="float64")
    ws.run_net_once(net)
    return ws.fetch("y"), [ws.fetch(grads[w]) for w in wrt], r


def _torch(fn, arrays, r):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    (y * torch.tensor(r)).mean().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _close(ours, ref):
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-10, atol=1e-12)
    for a, b in zip(ours[1], ref[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)


def test_logit_matches_torch_logit_with_eps():
    x = np.array([0.0, 1e-4, 0.2, 0.5, 0.9, 0.999, 1.0])
    y, g, r = _grads("Logit", {"x": x}, ["x"], eps=0.01)
    _close((y, g), _torch(lambda t: torch.logit(t, eps=0.01), [x], r))


def test_replace_nan_and_ensure_dense():
    x = np.array([1.0, np.nan, -2.0, np.nan], np.float32)
    ws = _ws(x=x)
    _once(ws, "ReplaceNaN", ["x"], ["y"], value=7.5)
    np.testing.assert_array_equal(ws.fetch("y"), [1.0, 7.5, -2.0, 7.5])
    _once(ws, "EnsureDense", ["y"], ["z"])
    np.testing.assert_array_equal(ws.fetch("z"), ws.fetch("y"))
    y, g, r = _grads("EnsureDense", {"x": np.arange(3.0)}, ["x"])
    np.testing.assert_allclose(g[0], r / 3)


@pytest.mark.parametrize("shape", [(4,), (4, 3), (4, 2, 3)])
def test_row_mul_matches_torch_with_gradients(shape):
    rng = np.random.default_rng(0)
    m, w = rng.normal(size=shape), rng.normal(size=shape[0])
    y, g, r = _grads("RowMul", {"m": m, "w": w}, ["m", "w"])
    _close((y, g), _torch(lambda a, b: a * b.reshape((-1,) + (1,) * (len(shape) - 1)), [m, w], r))


@pytest.mark.parametrize("shape", [(5,), (5, 3)])
def test_dot_product_matches_torch_with_gradients(shape):
    rng = np.random.default_rng(1)
    x, z = rng.normal(size=shape), rng.normal(size=shape)
    y, g, r = _grads("DotProduct", {"x": x, "z": z}, ["x", "z"])
    _close((y, g), _torch(lambda a, b: (a * b).sum(-1) if len(shape) == 2 else a * b, [x, z], r))


def test_reduce_tail_sum_perplexity_and_multi_class_accuracy():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 2, 4)).astype(np.float32)
    p = rng.uniform(0.1, 1.0, 6).astype(np.float32)
    pred = np.array([[0.1, 0.7, 0.2], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.1, 0.8, 0.1]], np.float32)
    lab = np.array([1, 1, 2, 1], np.int32)
    ws = _ws(x=x, p=p, pred=pred, lab=lab)
    _once(ws, "ReduceTailSum", ["x"], ["s"])
    _once(ws, "Perplexity", ["p"], ["pp"])
    _once(ws, "MultiClassAccuracy", ["pred", "lab"], ["acc", "n"])
    np.testing.assert_allclose(ws.fetch("s"), x.reshape(3, -1).sum(1), rtol=1e-6)
    np.testing.assert_allclose(ws.fetch("pp"), np.exp(-np.log(p.astype(np.float64)).mean()), rtol=1e-6)
    np.testing.assert_allclose(ws.fetch("acc"), [0.0, 2 / 3, 1.0], rtol=1e-7)
    np.testing.assert_array_equal(ws.fetch("n"), [0, 3, 1])
    ws.feed("lab", np.array([1, 1, 3, 1], np.int32))
    with pytest.raises(OperatorError, match=r"labels in \[0, 3\)"):
        _once(ws, "MultiClassAccuracy", ["pred", "lab"], ["acc", "n"])


def test_rms_prop_follows_caffe2s_recursion():
    """ms' = decay ms + (1 - decay) g^2; mom' = momentum mom + lr g / sqrt(eps + ms'); grad' = mom'."""
    rng = np.random.default_rng(4)
    g = rng.normal(size=5)
    ms, mom = rng.uniform(0.1, 1.0, 5), rng.normal(size=5)
    ws = _ws(g=g, ms=ms, mom=mom, lr=np.array([0.3]))
    _once(ws, "RmsProp", ["g", "ms", "mom", "lr"], ["go", "mso", "momo"], decay=0.8, momentum=0.5, epsilon=1e-3)
    ms_ref = 0.8 * ms + 0.2 * g * g
    mom_ref = 0.5 * mom + 0.3 * g / np.sqrt(1e-3 + ms_ref)
    np.testing.assert_allclose(ws.fetch("mso"), ms_ref, rtol=1e-12)
    np.testing.assert_allclose(ws.fetch("momo"), mom_ref, rtol=1e-12)
    np.testing.assert_allclose(ws.fetch("go"), mom_ref, rtol=1e-12)


@pytest.mark.parametrize("lengths", [[], [0], [3, 0, 2, 1], [0, 0, 4]])
def test_lengths_and_segment_id_conversions_round_trip(lengths):
    n = np.array(lengths, np.int32)
    ids = np.repeat(np.arange(len(lengths)), n).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]]) if len(lengths) else np.zeros(0)
    ws = _ws(n=n, ids=ids, data=np.zeros((len(lengths), 2), np.float32))
    _once(ws, "LengthsToSegmentIds", ["n"], ["s"])
    _once(ws, "LengthsToRanges", ["n"], ["r"])
    _once(ws, "LengthsToWeights", ["n"], ["w"], power=2.0)
    _once(ws, "SegmentIdsToLengths", ["ids", "data"], ["l"])
    _once(ws, "SegmentIdsToRanges", ["ids", "data"], ["sr"])
    np.testing.assert_array_equal(ws.fetch("s"), ids)
    ranges = np.stack([starts, n], 1).reshape(-1, 2)
    np.testing.assert_array_equal(ws.fetch("r"), ranges)
    np.testing.assert_allclose(ws.fetch("w"), np.repeat(1.0 / np.maximum(n, 1) ** 2, n), rtol=1e-7)
    np.testing.assert_array_equal(ws.fetch("l"), n)  # trailing empty segments come from data's first dim
    np.testing.assert_array_equal(ws.fetch("sr"), ranges)
    assert ws.fetch("s").dtype == ws.fetch("r").dtype == ws.fetch("l").dtype == np.int32


def test_segment_ids_must_be_sorted():
    ws = _ws(ids=np.array([1, 0], np.int32))
    with pytest.raises(OperatorError, match="sorted segment ids"):
        _once(ws, "SegmentIdsToLengths", ["ids"], ["l"])


@pytest.mark.parametrize("replicate", [False, True])
@pytest.mark.parametrize(("m", "k"), [(2, 6), (6, 2), (3, 3)])
def test_dot_product_with_padding_matches_torch(replicate, m, k):
    rng = np.random.default_rng(5)
    x, z = rng.normal(size=(4, m)), rng.normal(size=(4, k))
    y, g, r = _grads("DotProductWithPadding", {"x": x, "z": z}, ["x", "z"], pad_value=0.7, replicate=replicate)

    def widen(short, width):
        if replicate:
            return short.repeat(1, width // short.shape[1])
        return torch.cat([short, torch.full((short.shape[0], width - short.shape[1]), 0.7, dtype=short.dtype)], 1)

    def ref(a, b):
        return (widen(a, k) * b).sum(1) if m < k else (a * widen(b, m)).sum(1)

    _close((y, g), _torch(ref, [x, z], r))


def test_dot_product_with_padding_replicate_needs_dividing_lengths():
    ws = _ws(x=np.ones((2, 2), np.float32), z=np.ones((2, 3), np.float32))
    with pytest.raises(OperatorError, match="divide"):
        _once(ws, "DotProductWithPadding", ["x", "z"], ["y"], replicate=True)


def test_flatten_to_vec_and_its_gradient():
    x = np.arange(6.0).reshape(2, 3)
    y, g, r = _grads("FlattenToVec", {"x": x}, ["x"])
    np.testing.assert_array_equal(y, np.arange(6.0))
    np.testing.assert_allclose(g[0], r.reshape(2, 3) / 6)


def test_accumulate_histogram_counts_edges_and_accumulates_over_runs():
    x = np.array([[-1.0, 0.1, 0.2999], [0.3, 0.9, 0.95]], np.float32)
    ws = _ws(x=x)
    net = an.Net("hist")
    net.AccumulateHistogram("x", ["cur", "acc"], lower_bound=0.1, upper_bound=0.9, num_buckets=4)
    ws.run_net_once(net)
    edges = [-np.inf, 0.1, 0.3, 0.5, 0.7, 0.9, np.inf]
    ref = np.histogram(x.astype(np.float64), bins=edges)[0]
    np.testing.assert_array_equal(ws.fetch("cur"), ref)
    ws.create_net(net)
    ws.run_net("hist")
    ws.run_net("hist")
    np.testing.assert_array_equal(ws.fetch("cur"), ref)
    np.testing.assert_array_equal(ws.fetch("acc"), 3 * ref)  # every run of this op definition
    other = an.Net("hist2")
    other.AccumulateHistogram("x", ["cur2", "acc2"], lower_bound=0.1, upper_bound=0.9, num_buckets=4)
    ws.run_net_once(other)
    np.testing.assert_array_equal(ws.fetch("acc2"), ref)
    assert ws.fetch("acc").dtype == np.int64
