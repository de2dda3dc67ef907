"""Adagrad, SparseAdagrad, SquaredL2Distance, SigmoidCrossEntropyWithLogits, Accuracy, AveragedLoss,
Sum, WeightedSum and Scale against Caffe2's operator tests and kernels.

Sources: caffe2/python/operator_test/adagrad_test.py and adagrad_test_helper.py (ref_adagrad with
its optional effective_lr and update outputs; ref_sparse: rows updated one index after another,
indices of any shape), distance_op_test.py (SquaredL2Distance = 0.5 * sum((X - Y)^2) per row),
cross_entropy_op.cc (sigmoid_xent_forward, its log_D_trick and unjoined_lr_loss forms, minus the
mean over the last dim), accuracy_op.cc (a tie goes to the lower index), utility_ops.cc (Sum of
same-shaped inputs, WeightedSum), the Scale op (scale defaults to 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=15, deadline=None)


def run(op: str, inputs: dict[str, np.ndarray], outs=("out",), **args) -> list[np.ndarray]:
    return run_op(op, inputs, outs, **args)


def ref_adagrad(param, mom, grad, lr, epsilon, decay=1.0):  # adagrad_test_helper.py's, with adagrad_op.h's decay
    mom_out = decay * mom + np.square(grad)
    effective_lr = lr / (np.sqrt(mom_out) + epsilon)
    update = effective_lr * grad
    return param + update, mom_out, effective_lr, update


@FEW
@given(
    seed=st.integers(0, 2**16),
    lr=st.floats(-0.5, 0.5),
    epsilon=st.floats(1e-6, 1e-2),
    decay=st.sampled_from([1.0, 0.95]),
    n_out=st.integers(2, 4),
    in_place=st.booleans(),
)
def test_adagrad(seed, lr, epsilon, decay, n_out, in_place):
    rng = np.random.default_rng(seed)
    p, g = (rng.normal(size=(3, 4)).astype(np.float32) for _ in range(2))
    m = np.abs(rng.normal(size=(3, 4))).astype(np.float32)
    outs = (["p", "m"] if in_place else ["p2", "m2"]) + ["elr", "upd"][: n_out - 2]
    got = run(
        "Adagrad",
        {"p": p.copy(), "m": m.copy(), "g": g, "lr": np.array([lr], np.float32)},
        outs,
        epsilon=epsilon,
        decay=decay,
    )
    for name, have, want in zip(outs, got, ref_adagrad(p, m, g, np.float32(lr), epsilon, decay)):
        assert have.dtype == np.float32 and have.shape == (3, 4), name
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6, err_msg=name)


@FEW
@given(
    data=st.data(),
    rows=st.integers(1, 8),
    index_shape=st.sampled_from([(0,), (3,), (2, 2)]),
    unique=st.booleans(),
    epsilon=st.floats(1e-6, 1e-2),
    lr=st.floats(-0.5, 0.5),
)
def test_sparse_adagrad(data, rows, index_shape, unique, epsilon, lr):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    size = int(np.prod(index_shape))
    if unique and size > rows:
        return
    indices = (
        (rng.permutation(rows)[:size] if unique else rng.integers(rows, size=size))
        .reshape(index_shape)
        .astype(np.int64)
    )
    param = rng.normal(size=(rows, 3)).astype(np.float32)
    mom = np.abs(rng.normal(size=(rows, 3))).astype(np.float32)
    grad = rng.normal(size=index_shape + (3,)).astype(np.float32)
    p_out, m_out = run(
        "SparseAdagrad",
        {"p": param.copy(), "m": mom.copy(), "i": indices, "g": grad, "lr": np.array([lr], np.float32)},
        ["p", "m"],
        epsilon=epsilon,
    )
    want_p, want_m = param.copy(), mom.copy()
    for k, idx in enumerate(indices.ravel()):  # ref_sparse, repeated indices applied one after another
        want_p[idx], want_m[idx] = ref_adagrad(
            want_p[idx], want_m[idx], grad.reshape(-1, 3)[k], np.float32(lr), epsilon
        )[:2]
    np.testing.assert_allclose(p_out, want_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m_out, want_m, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["SquaredL2Distance", "SquaredL2"])
def test_squared_l2_distance(op):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 3, 2)), rng.normal(size=(5, 3, 2))
    (d,) = run(op, {"x": x.astype(np.float32), "y": y.astype(np.float32)})
    np.testing.assert_allclose(d, 0.5 * np.square(x - y).reshape(5, -1).sum(axis=1), rtol=1e-5)
    feeds = {"x": x, "y": y, "r": rng.normal(size=5)}

    def build(net):
        getattr(net, op)(["x", "y"], "d")
        net.Mul(["d", "r"], "dr")
        return net.AveragedLoss("dr", "loss")

    _, ours = autodiff_grads(build, feeds, ["x", "y"])
    fd = numeric_grads(build, feeds, ["x", "y"])
    for k in ("x", "y"):
        np.testing.assert_allclose(ours[k], fd[k], rtol=1e-5, atol=1e-7, err_msg=k)


def _sigmoid_xent_caffe2(lgt, tgt, log_d_trick, unjoined):  # cross_entropy_op.cc, elementwise
    pos = (lgt >= 0).astype(lgt.dtype)
    log1p_exp = np.log(1 + np.exp(lgt - 2 * lgt * pos))
    if unjoined:
        return lgt * tgt + (tgt - 1) * lgt * pos - (1 - tgt) * log1p_exp
    if log_d_trick:
        return (2 * tgt - 1) * (lgt - (lgt * pos + log1p_exp))
    return lgt * (tgt - pos) - log1p_exp


@pytest.mark.parametrize("log_d_trick,unjoined", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("shape", [(6,), (3, 4), (2, 3, 4)])
def test_sigmoid_cross_entropy_with_logits(shape, log_d_trick, unjoined):
    rng = np.random.default_rng(1)
    lgt = (rng.normal(size=shape) * 5).astype(np.float64)
    tgt = (rng.random(shape) > 0.5).astype(np.float64) if log_d_trick else rng.random(shape)
    (out,) = run(
        "SigmoidCrossEntropyWithLogits", {"l": lgt, "t": tgt}, log_D_trick=log_d_trick, unjoined_lr_loss=unjoined
    )
    want = -_sigmoid_xent_caffe2(lgt, tgt, log_d_trick, unjoined).mean(axis=-1)
    assert out.shape == shape[:-1]
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)


def test_accuracy_ties_and_top_k():
    p = np.array([[0.2, 0.5, 0.5, 0.1], [0.3, 0.3, 0.1, 0.3], [0.1, 0.2, 0.3, 0.4]], np.float32)
    label = np.array([2, 0, 1], np.int32)
    # accuracy_op.cc: a score equal to the label's at a lower index ranks above it
    for k, want in ((1, 1 / 3), (2, 2 / 3), (3, 3 / 3)):
        (acc,) = run("Accuracy", {"p": p, "l": label}, top_k=k)
        assert acc.shape == () and acc.dtype == np.float32
        np.testing.assert_allclose(acc, want, rtol=1e-6)


def test_averaged_loss_sum_weighted_sum_scale():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (avg,) = run("AveragedLoss", {"x": x})
    assert avg.shape == () and avg.dtype == np.float32 and float(avg) == 2.5
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        (s,) = run("Sum", {"a": x.astype(dtype), "b": x.astype(dtype), "c": x.astype(dtype)})
        assert s.dtype == dtype
        np.testing.assert_array_equal(s, 3 * x.astype(dtype))
    with pytest.raises(an.OperatorError, match="shape"):
        run("Sum", {"a": x, "b": x[0]})  # Caffe2's Sum does not broadcast
    (w,) = run("WeightedSum", {"a": x, "wa": np.array([2.0], np.float32), "b": x, "wb": np.array([-0.5], np.float32)})
    np.testing.assert_allclose(w, 1.5 * x)
    np.testing.assert_array_equal(run("Scale", {"x": x})[0], x)
    np.testing.assert_allclose(run("Scale", {"x": x}, scale=-0.25)[0], -0.25 * x)
