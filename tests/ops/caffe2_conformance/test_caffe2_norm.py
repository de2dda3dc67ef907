"""SpatialBN, LayerNorm and Dropout against Caffe2's spatial_bn_op_test.py, layer_norm_op_test.py and
dropout_op_test.py.

Sources: the tests' reference functions (batch_norm_ref: the running variance takes the batch
variance times reduce_size / (reduce_size - 1), momentum weighs the old value, saved_var is
1/sqrt(var + epsilon), an empty batch gives zeros and leaves the running statistics alone;
_layer_norm_ref: mean and std of shape dims[:axis] + [1], std = sqrt(var + epsilon);
Dropout: is_test copies, ratio 0 keeps every element), both orders (NCHW, NHWC) of
caffe2/operators/spatial_bn_op.cc. Gradients against torch autograd and finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import check_all
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=12, deadline=None)


def run(op: str, inputs: dict[str, np.ndarray], outs: tuple[str, ...] = ("out",), **args) -> list[np.ndarray]:
    return run_op(op, inputs, outs, **args)


def _to_order(x: np.ndarray, order: str) -> np.ndarray:
    return np.moveaxis(x, 1, -1).copy() if order == "NHWC" else x


def _bn_params(c: int, seed: int = 1701) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {
        "scale": rng.rand(c).astype(np.float32) + 0.5,
        "bias": rng.rand(c).astype(np.float32) - 0.5,
        "mean": rng.randn(c).astype(np.float32),
        "var": rng.rand(c).astype(np.float32) + 0.5,
    }


@FEW
@given(
    spatial=st.sampled_from([(), (7,), (3, 4), (2, 3, 2)]),
    c=st.integers(1, 6),
    n=st.integers(0, 3),
    order=st.sampled_from(["NCHW", "NHWC"]),
    epsilon=st.floats(1e-5, 1e-2),
    inplace=st.booleans(),
)
def test_spatial_bn_test_mode(spatial, c, n, order, epsilon, inplace):
    p = _bn_params(c)
    x = np.random.RandomState(3).rand(n, c, *spatial).astype(np.float32) - 0.5
    bshape = (1, c) + (1,) * len(spatial)
    want = (x - p["mean"].reshape(bshape)) / np.sqrt(p["var"].reshape(bshape) + epsilon) * p["scale"].reshape(
        bshape
    ) + p["bias"].reshape(bshape)
    out = "x" if inplace else "y"
    (y,) = run("SpatialBN", {"x": _to_order(x, order), **p}, (out,), order=order, is_test=1, epsilon=epsilon)
    np.testing.assert_allclose(y, _to_order(want, order), rtol=1e-5, atol=1e-5)


@FEW
@given(
    size=st.integers(1, 5),
    c=st.integers(1, 6),
    n=st.integers(0, 3),
    order=st.sampled_from(["NCHW", "NHWC"]),
    epsilon=st.floats(1e-5, 1e-2),
    momentum=st.floats(0.5, 0.9),
    inplace=st.booleans(),
)
def test_spatial_bn_train_mode(size, c, n, order, epsilon, momentum, inplace):
    if n * size * size == 1:
        return  # Caffe2's test assumes it away (its unbias scale is infinite); asyncnet refuses it, see below
    p = _bn_params(c)
    p["scale"] = np.random.RandomState(1701).randn(c).astype(np.float32)
    x = np.random.RandomState(5).randn(n, c, size, size).astype(np.float32)
    rm0, rv0 = p["mean"].copy(), p["var"].copy()
    outs = ("x" if inplace else "y", "mean", "var", "saved_mean", "saved_var")
    y, rm, rv, sm, sv = run(
        "SpatialBN", {"x": _to_order(x, order), **p}, outs, order=order, epsilon=epsilon, momentum=momentum
    )
    if n == 0:  # batch_norm_ref's empty batch
        assert y.shape == _to_order(x, order).shape
        np.testing.assert_array_equal(rm, rm0)
        np.testing.assert_array_equal(rv, rv0)
        np.testing.assert_array_equal(sm, np.zeros(c))
        np.testing.assert_array_equal(sv, np.zeros(c))
        return
    reduce_size = n * size * size
    mu, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    std = np.sqrt(var + epsilon)
    b = (1, c, 1, 1)
    want_y = (x - mu.reshape(b)) / std.reshape(b) * p["scale"].reshape(b) + p["bias"].reshape(b)
    np.testing.assert_allclose(y, _to_order(want_y, order), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rm, momentum * rm0 + (1 - momentum) * mu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        rv, momentum * rv0 + (1 - momentum) * reduce_size / (reduce_size - 1) * var, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(sm, mu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sv, 1 / std, rtol=1e-4)


def test_spatial_bn_one_value_per_channel_is_refused():
    p = _bn_params(2)
    with pytest.raises(an.OperatorError, match="more than one value per channel"):
        run("SpatialBN", {"x": np.ones((1, 2, 1, 1), np.float32), **p}, ("y", "mean", "var", "sm", "sv"))


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [(3,), (2, 3)])
def test_spatial_bn_train_mode_gradients(order, spatial):
    c, n = 3, 2
    rng = np.random.default_rng(7)
    x = rng.random((n, c, *spatial)) - 0.5
    feeds = {
        "x": _to_order(x, order),
        "scale": rng.random(c) + 0.5,
        "bias": rng.random(c) - 0.5,
        "mean": np.zeros(c),
        "var": np.ones(c),
        "r": _to_order(rng.normal(size=x.shape), order),
    }

    def build(net):
        net.SpatialBN(
            ["x", "scale", "bias", "mean", "var"], ["y", "mean", "var", "sm", "sv"], order=order, epsilon=1e-3
        )
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    def ref(x, scale, bias, mean, var, r):
        xc = torch.movedim(x, -1, 1) if order == "NHWC" else x
        y = torch.nn.functional.batch_norm(xc, None, None, scale, bias, training=True, eps=1e-3)
        return ((torch.movedim(y, 1, -1) if order == "NHWC" else y) * r).mean()

    check_all(build, ref, feeds, ["x", "scale", "bias"])


@FEW
@given(
    n=st.integers(0, 4),
    c=st.integers(1, 5),
    h=st.integers(1, 3),
    w=st.integers(1, 3),
    epsilon=st.floats(1e-5, 1e-2),
    momentum=st.floats(0.5, 0.9),
    order=st.sampled_from(["NCHW", "NHWC"]),
    num_batches=st.integers(2, 5),
    in_place=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_spatial_bn_multi_batch(n, c, h, w, epsilon, momentum, order, num_batches, in_place, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, c, h, w)).astype(np.float32)
    scale, bias, mean = (rng.normal(size=c).astype(np.float32) for _ in range(3))
    var = rng.random(c).astype(np.float32)
    batch_mean = rng.random(c).astype(np.float32) - 0.5  # sums over num_batches batches, as Caffe2's test feeds them
    batch_var = rng.random(c).astype(np.float32) + 1.0
    outs = ["y", "mean", "var", "bm", "bv"] if in_place else ["y", "mean", "var", "sm", "sv"]
    feeds = {
        "x": _to_order(x, order),
        "scale": scale,
        "bias": bias,
        "mean": mean.copy(),
        "var": var.copy(),
        "bm": batch_mean,
        "bv": batch_var,
    }
    y, rm, rv, sm, sv = run(
        "SpatialBN", feeds, tuple(outs), order=order, epsilon=epsilon, momentum=momentum, num_batches=num_batches
    )
    if n == 0:  # spatial_bn_multi_batch_ref
        np.testing.assert_array_equal(rm, mean)
        np.testing.assert_array_equal(rv, var)
        np.testing.assert_array_equal(sm, np.zeros(c))
        np.testing.assert_array_equal(sv, np.zeros(c))
        return
    size = num_batches * n * h * w
    mu = batch_mean / size
    v = batch_var / size - np.square(mu)
    np.testing.assert_allclose(rm, momentum * mean + (1 - momentum) * mu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rv, momentum * var + (1 - momentum) * size / (size - 1) * v, rtol=1e-4, atol=1e-5)
    rstd = 1 / np.sqrt(v + epsilon)
    np.testing.assert_allclose(sm, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sv, rstd, rtol=1e-4)
    b = (1, c, 1, 1)
    want = (x - mu.reshape(b)) * rstd.reshape(b) * scale.reshape(b) + bias.reshape(b)
    np.testing.assert_allclose(y, _to_order(want, order), rtol=1e-4, atol=1e-4)


@FEW
@given(
    n=st.integers(0, 4),
    c=st.integers(1, 5),
    h=st.integers(1, 3),
    w=st.integers(1, 3),
    epsilon=st.floats(1e-5, 1e-2),
    order=st.sampled_from(["NCHW", "NHWC"]),
    num_batches=st.integers(2, 5),
    in_place=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_spatial_bn_multi_batch_gradient(n, c, h, w, epsilon, order, num_batches, in_place, seed):
    rng = np.random.default_rng(seed)
    dy, x = (rng.normal(size=(n, c, h, w)).astype(np.float32) for _ in range(2))
    scale, mean, dscale_sum, dbias_sum = (rng.normal(size=c).astype(np.float32) for _ in range(4))
    rstd = rng.random(c).astype(np.float32)
    outs = ("dx", "dscale_sum", "dbias_sum") if in_place else ("dx", "dscale", "dbias")
    feeds = {
        "x": _to_order(x, order),
        "scale": scale,
        "dy": _to_order(dy, order),
        "mean": mean,
        "rstd": rstd,
        "dscale_sum": dscale_sum,
        "dbias_sum": dbias_sum,
    }
    dx, dscale, dbias = run("SpatialBNGradient", feeds, outs, order=order, epsilon=epsilon, num_batches=num_batches)
    if n == 0:  # spatial_bn_multi_batch_grad_ref
        np.testing.assert_array_equal(dscale, np.zeros(c))
        np.testing.assert_array_equal(dbias, np.zeros(c))
        assert dx.shape == feeds["x"].shape
        return
    ds, db = dscale_sum / num_batches, dbias_sum / num_batches
    alpha = scale * rstd
    beta = -alpha * ds * rstd / (n * h * w)
    gamma = alpha * (mean * ds * rstd - db) / (n * h * w)
    b = (c, 1, 1)
    want = alpha.reshape(b) * dy + beta.reshape(b) * x + gamma.reshape(b)
    np.testing.assert_allclose(dscale, ds, rtol=1e-6)
    np.testing.assert_allclose(dbias, db, rtol=1e-6)
    np.testing.assert_allclose(dx, _to_order(want, order), rtol=1e-4, atol=1e-5)


def test_spatial_bn_multi_batch_rules():
    with pytest.raises(an.NetDefinitionError, match="got 6"):
        an.Net("n").SpatialBN(["x", "s", "b", "m", "v", "bm"], ["y", "m", "v", "sm", "sv"])
    net = an.Net("g")
    net.SpatialBN(["x", "s", "b", "m", "v", "bm", "bv"], ["y", "m", "v", "sm", "sv"], num_batches=2)
    net.AveragedLoss("y", "loss")
    from asyncnet.autodiff import add_gradient_ops

    with pytest.raises(an.NetDefinitionError, match="7 inputs"):
        add_gradient_ops(net, "loss", wrt=["x"])


def ref_layer_norm(x: np.ndarray, axis: int, epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    left = int(np.prod(x.shape[:axis]))
    rows = x.reshape(left, -1)
    mean = rows.mean(axis=1).reshape(left, 1)
    std = np.sqrt(np.mean(np.square(rows), axis=1).reshape(left, 1) - np.square(mean) + epsilon)
    norm = ((rows - mean) / std).reshape(x.shape)
    return norm, mean.reshape(x.shape[:axis] + (1,)), std.reshape(x.shape[:axis] + (1,))


@FEW
@given(
    shape=st.sampled_from([(2, 3), (2, 3, 4), (2, 2, 3, 2)]),
    data=st.data(),
    epsilon=st.floats(1e-5, 1e-2),
    affine=st.booleans(),
)
def test_layer_norm(shape, data, epsilon, affine):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = axis % len(shape)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=shape).astype(np.float32)
    inputs = {"x": x}
    if affine:
        inputs.update(
            gamma=rng.normal(size=shape[a:]).astype(np.float32), beta=rng.normal(size=shape[a:]).astype(np.float32)
        )
    y, mean, std = run("LayerNorm", inputs, ("y", "mean", "std"), axis=axis, epsilon=epsilon, elementwise_affine=affine)
    want = ref_layer_norm(x.astype(np.float64), a, epsilon)
    if affine:
        want = (want[0] * inputs["gamma"] + inputs["beta"],) + want[1:]
    for got, ref in zip((y, mean, std), want):
        assert got.shape == ref.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_gradients(affine):
    rng = np.random.default_rng(9)
    shape, axis = (2, 3, 4), 1
    feeds = {"x": rng.normal(size=shape), "r": rng.normal(size=shape)}
    ins = ["x"]
    if affine:
        feeds.update(gamma=rng.normal(size=shape[axis:]), beta=rng.normal(size=shape[axis:]))
        ins += ["gamma", "beta"]

    def build(net):
        net.LayerNorm(ins, ["y", "mean", "std"], axis=axis, epsilon=1e-4, elementwise_affine=affine)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    def ref(x, r, gamma=None, beta=None):
        y = torch.nn.functional.layer_norm(x, shape[axis:], gamma, beta, eps=1e-4)
        return (y * r).mean()

    check_all(build, ref, feeds, ins)


def ref_layer_norm_grad(axis: int, gout: np.ndarray, mean: np.ndarray, std: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Caffe2's _layer_norm_grad_ref: dX through the std and mean blocks."""
    left, right = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    x2, g = x.reshape(left, right), gout.reshape(left, right)
    std, mean = std.reshape(left, 1), mean.reshape(left, 1)
    dstd_end = -1.0 / std**2 * np.sum((x2 - mean) * g, axis=1).reshape(left, 1)
    dmean = np.sum(-1.0 / std * g, axis=1).reshape(left, 1) + (-1.0 * mean / std * dstd_end)
    dx = 1.0 / std * g + x2 / (right * std) * dstd_end + dmean / right
    return dx.reshape(x.shape)


@FEW
@given(shape=st.sampled_from([(3, 4), (2, 3, 4), (2, 2, 3, 2)]), data=st.data())
def test_layer_norm_gradient_op_caffe2_inputs(shape, data):
    """Caffe2's test_layer_norm_grad_op: inputs (gout, out, mean, stdev, in), axis from 0, gout = the norm."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    x = np.random.default_rng(data.draw(st.integers(0, 2**16))).normal(size=shape).astype(np.float32)
    norm, mean, std = (v.astype(np.float32) for v in ref_layer_norm(x.astype(np.float64), axis, 1e-4))
    (dx,) = run(
        "LayerNormGradient",
        {"gout": norm, "out": norm, "mean": mean, "stdev": std, "in": x},
        ("gin",),
        axis=axis,
        epsilon=1e-4,
    )
    want = ref_layer_norm_grad(
        axis, norm.astype(np.float64), mean.astype(np.float64), std.astype(np.float64), x.astype(np.float64)
    )
    assert dx.shape == x.shape and dx.dtype == np.float32
    np.testing.assert_allclose(dx, want, rtol=1e-3, atol=1e-3)
    # asyncnet's earlier short form (dY, X, mean, std) gives the same values
    (short,) = run(
        "LayerNormGradient", {"gout": norm, "in": x, "mean": mean, "stdev": std}, ("gin",), axis=axis, epsilon=1e-4
    )
    np.testing.assert_array_equal(short, dx)


@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_gradient_maker_uses_caffe2_inputs(affine):
    """GetLayerNormGradient: (dY, Y, mean, std, X[, gamma]) -> (dX[, dgamma, dbeta])."""
    from asyncnet.core.defs import OperatorDef
    from asyncnet.core.registry import get_schema

    ins = ["x", "gamma", "beta"] if affine else ["x"]
    op = OperatorDef("LayerNorm", ins, ["y", "mean", "std"], {"elementwise_affine": affine})
    (g,), _ = get_schema("LayerNorm").gradient(op, ["y_grad", None, None])
    assert g.type == "LayerNormGradient"
    assert list(g.inputs) == ["y_grad", "y", "mean", "std", "x"] + (["gamma"] if affine else [])
    assert len(g.outputs) == (3 if affine else 1)


@pytest.mark.parametrize("affine,n", [(False, 6), (True, 4)])
def test_layer_norm_gradient_input_count_refused(affine, n):
    net = an.Net("t")
    with pytest.raises(an.NetDefinitionError, match="Caffe2's order"):
        net.LayerNormGradient(
            [f"i{k}" for k in range(n)], ["dx", "dg", "db"][: 3 if affine else 1], elementwise_affine=affine
        )


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("ratio", [0.0, 0.3])
def test_dropout_is_test_copies(ratio, inplace):
    x = np.random.default_rng(0).random((4, 5)).astype(np.float32)
    outs = ("x",) if inplace else ("y",)
    (y,) = run("Dropout", {"x": x.copy()}, outs, ratio=ratio, is_test=1)
    np.testing.assert_array_equal(y, x)


def test_dropout_ratio_zero_keeps_everything():
    x = np.random.default_rng(0).random((4, 5)).astype(np.float32)
    y, mask = run("Dropout", {"x": x}, ("y", "mask"), ratio=0.0)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


@pytest.mark.parametrize("ratio", [0.2, 0.5, 1.0])
def test_dropout_training_scales_the_kept_elements(ratio):
    x = np.random.default_rng(0).random((50, 40)).astype(np.float32) + 0.5
    y, mask = run("Dropout", {"x": x}, ("y", "mask"), ratio=ratio, seed=3)
    scale = 0.0 if ratio == 1.0 else 1 / (1 - ratio)  # Caffe2: 1 / (1 - ratio), 0 when ratio >= 1
    np.testing.assert_allclose(y, np.where(mask, x * np.float32(scale), 0), rtol=1e-6)
    assert abs(mask.mean() - (1 - ratio)) < 0.05
