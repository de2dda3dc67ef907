"""The numpy short paths of the MLP's hot kernels give the general path's bits.

A kernel takes its short path only for plain ``np.ndarray`` inputs; the same values as an
ndarray subclass (a view, no copy of the data) take the general path. So every property below
runs one op twice on equal values and compares the bytes, NaN and infinities included.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncnet as an
from tests._op_run import run

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::RuntimeWarning")]


class General(np.ndarray):
    """An ndarray subclass: the kernels' short paths refuse it, so it takes the general path."""


def general(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(General)


def same_bits(a, b) -> bool:
    a, b = np.asarray(a).view(np.ndarray), np.asarray(b).view(np.ndarray)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


DTYPES = st.sampled_from([np.float32, np.float64])
FLOATS = st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])


def matrices(dtype, rows, cols, elements=FLOATS):
    return hnp.arrays(dtype, (rows, cols), elements=elements)


@st.composite
def fc_case(draw):
    dtype = draw(DTYPES)
    m, k, n = draw(st.integers(0, 6)), draw(st.integers(0, 6)), draw(st.integers(1, 6))
    return (
        draw(matrices(dtype, m, k)),
        draw(matrices(dtype, n, k)),
        draw(hnp.arrays(dtype, (n,), elements=FLOATS)),
        draw(matrices(dtype, m, n)),
    )


@settings(max_examples=60, deadline=None)
@given(fc_case())
def test_fc_and_its_gradient_short_paths_give_the_general_bits(case):
    x, w, b, dy = case
    assert same_bits(run("FC", [x, w, b]), run("FC", [general(x), general(w), general(b)]))
    for n_out in (2, 3):
        fast = run("FCGradient", [x, w, dy], n_out=n_out)
        slow = run("FCGradient", [general(x), general(w), general(dy)], n_out=n_out)
        assert all(same_bits(f, s) for f, s in zip(fast, slow))


@settings(max_examples=60, deadline=None)
@given(DTYPES.flatmap(lambda d: st.tuples(matrices(d, 3, 5), matrices(d, 3, 5))))
def test_relu_and_its_gradient_short_paths_give_the_general_bits(case):
    y, dy = case
    assert same_bits(run("Relu", [y]), run("Relu", [general(y)]))
    assert same_bits(run("ReluGradient", [y, dy]), run("ReluGradient", [general(y), general(dy)]))


@st.composite
def loss_case(draw):
    dtype = draw(DTYPES)
    n, d = draw(st.integers(1, 8)), draw(st.integers(1, 6))
    x = draw(matrices(dtype, n, d, st.floats(-50, 50, width=32) | st.just(np.nan)))
    label = draw(hnp.arrays(draw(st.sampled_from([np.int32, np.int64])), (n,), elements=st.integers(0, d - 1)))
    return x, label, np.asarray(draw(st.floats(0.125, 4.0, width=32)), dtype)


@settings(max_examples=80, deadline=None)
@given(loss_case(), st.booleans())
def test_softmax_with_loss_and_accuracy_short_paths_give_the_general_bits(case, only_loss):
    x, label, dloss = case
    p, loss = run("SoftmaxWithLoss", [x, label], n_out=2)
    p_ref, loss_ref = run("SoftmaxWithLoss", [general(x), general(label)], n_out=2)
    assert same_bits(p, p_ref) and same_bits(loss, loss_ref)
    dx = run("SoftmaxWithLossGradient", [p.copy(), label, dloss], only_loss=only_loss)
    dx_ref = run("SoftmaxWithLossGradient", [general(p.copy()), general(label), general(dloss)], only_loss=only_loss)
    assert same_bits(dx, dx_ref)
    assert same_bits(run("Accuracy", [x, label]), run("Accuracy", [general(x), general(label)]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bad", [-1, 4, 2**31 - 1])
@pytest.mark.parametrize("op", ["SoftmaxWithLoss", "SoftmaxWithLossGradient", "Accuracy"])
def test_a_label_out_of_range_is_refused_by_name_on_the_short_path(op, bad, dtype):
    x = np.full((3, 4), 0.25, np.float32)
    label = np.array([0, bad, 1], dtype)
    inputs = [x, label, np.array(1.0, np.float32)] if op.endswith("Gradient") else [x, label]
    before = x.copy()
    with pytest.raises(an.OperatorError, match=r"expected class ids in \[0, 4\) in input 1 'in1'"):
        run(
            op,
            inputs,
            n_out=2 if op == "SoftmaxWithLoss" else 1,
            **({"only_loss": True} if op.endswith("Gradient") else {}),
        )
    assert same_bits(x, before)  # only_loss writes P in place: nothing was written before the refusal


@settings(max_examples=40, deadline=None)
@given(
    DTYPES.flatmap(lambda d: st.tuples(matrices(d, 4, 3), matrices(d, 4, 3))), st.floats(0.0001220703125, 2.0, width=32)
)
def test_sgd_short_path_updates_in_place_with_the_general_bits(case, lr):
    w, g = case
    lr = np.asarray(lr, np.float32)
    fast, slow = w.copy(), general(w.copy())
    for param, grad in ((fast, g), (slow, general(g))):
        with an.Workspace() as ws:
            ws.feed("w", param)
            ws.feed("g", grad)
            ws.feed("lr", lr)
            net = an.Net("n")
            net.SGD(["w", "g", "lr"], "w")
            ws.run_net_once(net)
            assert ws.fetch("w") is param  # updated in place
    assert same_bits(fast, slow)


def test_learning_rate_constant_fill_and_iter_short_paths_match_the_general_ones():
    it = np.array([7], np.int64)
    assert same_bits(run("LearningRate", [it], base_lr=0.3), run("LearningRate", [general(it)], base_lr=0.3))
    with pytest.raises(an.OperatorError, match="non-negative iteration count"):
        run("LearningRate", [np.array([-1], np.int64)], base_lr=0.3)
    loss = np.array(2.5, np.float32)
    for dtype, value in (("float32", 1.0), ("int32", 2.5), ("float64", 0.1)):
        assert same_bits(
            run("ConstantFill", [loss], value=value, dtype=dtype),
            run("ConstantFill", [general(loss)], value=value, dtype=dtype),
        )
    with an.Workspace() as ws:
        counter = np.array([4], np.int64)
        ws.feed("iter", counter)
        net = an.Net("n")
        net.Iter("iter", "iter")
        ws.run_net_once(net)
        assert ws.fetch("iter") is counter and counter.tolist() == [5]
        frozen = np.array([4], np.int64)
        frozen.flags.writeable = False
        ws.feed("iter", frozen)  # the general path's check
        with pytest.raises(an.OperatorError, match="read-only"):
            ws.run_net_once(net)
        ws.feed("iter", np.array([np.iinfo(np.int64).max], np.int64))
        with pytest.raises(an.OperatorError, match="Overflow"):
            ws.run_net_once(net)


# -- torch CPU tensors: fused native calls, numpy's values within float tolerance -------------
@settings(max_examples=30, deadline=None)
@given(fc_case(), loss_case())
def test_torch_short_paths_give_numpy_values(fc, loss):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy
    x, w, b, dy = (np.nan_to_num(a, posinf=7.0, neginf=-7.0) for a in fc)
    # two BLAS libraries sum in another order: the rounding error of a dot product scales with the
    # size of its terms, so a result near 0 from large cancelling terms (7 x 586 - 7 x 586 gave
    # 1.8e-4 in numpy, 0 in torch) is compared on that scale
    eps = float(np.finfo(x.dtype).eps)
    terms = max(1.0, *(float(np.abs(a).max(initial=0.0)) for a in (x, w, b))) * max(
        1.0, float(np.abs(dy).max(initial=0.0))
    )
    scale = 4 * eps * terms * max(x.shape[0], x.shape[1], w.shape[0], 1)
    tol = dict(rtol=1e-5, atol=max(1e-4, scale)) if x.dtype == np.float32 else dict(rtol=1e-12, atol=max(1e-10, scale))
    np.testing.assert_allclose(run("FC", [t(x), t(w), t(b)]).numpy(), run("FC", [x, w, b]), **tol)
    for got, want in zip(run("FCGradient", [t(x), t(w), t(dy)], n_out=3), run("FCGradient", [x, w, dy], n_out=3)):
        np.testing.assert_allclose(got.numpy(), want, **tol)
    np.testing.assert_allclose(run("Relu", [t(x)]).numpy(), run("Relu", [x]))
    logits, label, dloss = loss
    logits = np.nan_to_num(logits)
    label = label.astype(np.int32)
    p, l = run("SoftmaxWithLoss", [t(logits), t(label)], n_out=2)
    p_ref, l_ref = run("SoftmaxWithLoss", [logits, label], n_out=2)
    np.testing.assert_allclose(p.numpy(), p_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l.numpy(), l_ref, rtol=1e-5, atol=1e-5)
    assert l.dtype == p.dtype and l.shape == ()
    dx = run("SoftmaxWithLossGradient", [p, t(label), t(dloss)])
    np.testing.assert_allclose(dx.numpy(), run("SoftmaxWithLossGradient", [p_ref, label, dloss]), rtol=1e-5, atol=1e-6)
    fill = run("ConstantFill", [l], value=1.0)
    assert isinstance(fill, torch.Tensor) and fill.dtype == torch.float32 and fill.shape == () and float(fill) == 1.0


def test_torch_short_paths_refuse_labels_out_of_range_and_update_shared_memory():
    torch = pytest.importorskip("torch")
    x = torch.full((3, 4), 0.25)
    for bad in (-1, 4):
        label = torch.tensor([0, bad, 1], dtype=torch.int32)
        for op, inputs in (("SoftmaxWithLoss", [x, label]), ("SoftmaxWithLossGradient", [x, label, torch.tensor(1.0)])):
            with pytest.raises(an.OperatorError, match=r"expected class ids in \[0, 4\) in input 1 'in1'"):
                run(op, inputs, n_out=2 if op == "SoftmaxWithLoss" else 1)
    assert bool((x == 0.25).all())
    w = np.ones((2, 3), np.float32)
    with an.Workspace() as ws:  # a torch view of a numpy array (Hogwild's shared parameters)
        ws.feed("w", torch.from_numpy(w))
        ws.feed("g", torch.full((2, 3), 2.0))
        ws.feed("lr", np.array(0.25, np.float32))
        net = an.Net("n")
        net.SGD(["w", "g", "lr"], "w")
        ws.run_net_once(net)
    assert w.tolist() == [[0.5] * 3] * 2
