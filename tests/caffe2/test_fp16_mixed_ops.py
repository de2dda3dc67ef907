"""Mixed precision as Caffe2's fp16 training path needs it: SpatialBN and its gradient on float16 X
with float32 scale, bias and statistics (Caffe2's cuDNN kernels), checked against torch computing
in float32 on the float16 input and rounding its output to float16 (autocast's rule)."""

import numpy as np
import pytest

import asyncnet as an

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)

C = 3


def _inputs(order, rng):
    shape = (4, C, 5, 6) if order == "NCHW" else (4, 5, 6, C)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float16)
    scale, bias = rng.uniform(0.5, 1.5, C).astype(np.float32), rng.uniform(-1, 1, C).astype(np.float32)
    rm, rv = rng.uniform(-0.5, 0.5, C).astype(np.float32), rng.uniform(0.5, 2, C).astype(np.float32)
    return x, scale, bias, rm, rv


def _torch_bn(x, scale, bias, rm, rv, order, training, dy=None):
    """torch in float32 on the float16 input, the output rounded to float16."""
    xt = torch.tensor(x).requires_grad_(True)
    x32 = xt.float() if order == "NCHW" else xt.float().permute(0, 3, 1, 2)
    w, b = torch.tensor(scale, requires_grad=True), torch.tensor(bias, requires_grad=True)
    rmt, rvt = torch.tensor(rm), torch.tensor(rv)
    y = torch.nn.functional.batch_norm(x32, rmt, rvt, w, b, training=training, momentum=0.1, eps=1e-5)
    y = (y if order == "NCHW" else y.permute(0, 2, 3, 1)).half()
    grads = None
    if dy is not None:
        y.backward(torch.tensor(dy))
        grads = xt.grad.numpy(), w.grad.numpy(), b.grad.numpy()
    return y.detach().numpy(), rmt.numpy(), rvt.numpy(), grads


def _run(x, scale, bias, rm, rv, order, is_test, dy=None):
    ws = an.Workspace()
    for k, v in dict(x=x, s=scale, b=bias, rm=rm.copy(), rv=rv.copy()).items():
        ws.feed(k, v)
    net = an.Net("bn")
    outs = ["y"] if is_test else ["y", "rm", "rv", "sm", "siv"]
    net.add_op("SpatialBN", ["x", "s", "b", "rm", "rv"], outs, is_test=is_test, order=order, momentum=0.9)
    if dy is not None:
        ws.feed("dy", dy)
        net.add_op("SpatialBNGradient", ["x", "s", "dy", "sm", "siv"], ["dx", "ds", "db"], order=order)
    ws.run_net_once(net)
    return ws


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_training_forward_and_gradient_match_torch_in_float32(order):
    rng = np.random.default_rng(0)
    x, scale, bias, rm, rv = _inputs(order, rng)
    dy = rng.standard_normal(x.shape).astype(np.float16)
    ws = _run(x, scale, bias, rm, rv, order, 0, dy)
    y, trm, trv, (tdx, tds, tdb) = _torch_bn(x, scale, bias, rm, rv, order, True, dy)
    assert ws.fetch("y").dtype == np.float16 and ws.fetch("dx").dtype == np.float16
    for name in ("rm", "rv", "sm", "siv", "ds", "db"):
        assert ws.fetch(name).dtype == np.float32, name
    # one float16 rounding of a value of magnitude < 8: at most 2^-8 apart (4e-3), if both round the same float32
    np.testing.assert_allclose(ws.fetch("y").astype(np.float32), y.astype(np.float32), rtol=0, atol=8e-3)
    np.testing.assert_allclose(ws.fetch("rm"), trm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ws.fetch("rv"), trv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ws.fetch("ds"), tds, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ws.fetch("db"), tdb, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ws.fetch("dx").astype(np.float32), tdx.astype(np.float32), rtol=0, atol=4e-3)
    assert np.abs(ws.fetch("dx")).max() > 0.1  # the check is not vacuous


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_inference_uses_float32_statistics(order):
    rng = np.random.default_rng(1)
    x, scale, bias, rm, rv = _inputs(order, rng)
    y = _run(x, scale, bias, rm, rv, order, 1).fetch("y")
    want = _torch_bn(x, scale, bias, rm, rv, order, False)[0]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=0, atol=8e-3)


def test_float16_parameters_with_float16_x_still_run_in_float16():
    rng = np.random.default_rng(2)
    x, *params = _inputs("NCHW", rng)
    ws = _run(x, *(p.astype(np.float16) for p in params), "NCHW", 0)
    assert ws.fetch("y").dtype == np.float16 and ws.fetch("sm").dtype == np.float16


def test_float64_parameters_with_float16_x_are_refused():
    rng = np.random.default_rng(3)
    x, *params = _inputs("NCHW", rng)
    with pytest.raises(an.errors.OperatorError, match="dtype float16"):
        _run(x, *(p.astype(np.float64) for p in params), "NCHW", 0)


def _grads(net_ops, feeds, fetch):
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    net = an.Net("half")
    for op in net_ops:
        net.add_op(*op[:3], **(op[3] if len(op) > 3 else {}))
    ws.run_net_once(net)
    return [ws.fetch(n) for n in fetch]


def _half(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float16)


def _assert_float16_close(got, want, what):
    """One float16 rounding of the same float32 sum apart at most (torch sums in another order)."""
    assert got.dtype == np.float16, what
    w = want.astype(np.float32)
    tol = 2 * np.spacing(np.abs(w).astype(np.float16)).astype(np.float32) + 1e-4
    assert np.all(np.abs(got.astype(np.float32) - w) <= tol), (what, np.abs(got.astype(np.float32) - w).max())


@pytest.mark.parametrize("no_bias", [False, True])
def test_conv_float16_accumulates_in_float32(no_bias):
    rng = np.random.default_rng(4)
    x, w, b, dy = _half(rng, 2, 24, 9, 9), _half(rng, 16, 24, 3, 3), _half(rng, 16), _half(rng, 2, 16, 9, 9)
    ins = ["x", "w"] if no_bias else ["x", "w", "b"]
    gouts = ["dw", "dx"] if no_bias else ["dw", "db", "dx"]
    ops = [
        ("Conv", ins, ["y"], {"kernel": 3, "pad": 1}),
        ("ConvGradient", ["x", "w", "dy"], gouts, {"kernel": 3, "pad": 1, "no_bias": no_bias}),
    ]
    got = _grads(ops, dict(x=x, w=w, b=b, dy=dy), ["y", *gouts])
    xt, wt = (torch.tensor(a).float().requires_grad_(True) for a in (x, w))
    bt = None if no_bias else torch.tensor(b).float().requires_grad_(True)
    yt = torch.nn.functional.conv2d(xt, wt, bt, padding=1)
    yt.backward(torch.tensor(dy).float())
    want = [yt.detach(), wt.grad] + ([] if no_bias else [bt.grad]) + [xt.grad]
    for name, g, t in zip(["y", *gouts], got, want):
        _assert_float16_close(g, t.numpy(), name)
    # numpy's own float16 matmul rounds every partial sum: float32 accumulation is the closer one
    assert np.abs(got[0].astype(np.float32)).max() > 1


@pytest.mark.parametrize("plain", [True, False])
def test_fc_float16_accumulates_in_float32(plain):
    rng = np.random.default_rng(5)
    shape = (6, 40) if plain else (6, 5, 8)
    x, w, b, dy = _half(rng, *shape), _half(rng, 7, 40), _half(rng, 7), _half(rng, 6, 7)
    ops = [("FC", ["x", "w", "b"], ["y"]), ("FCGradient", ["x", "w", "dy"], ["dw", "db", "dx"])]
    got = _grads(ops, dict(x=x, w=w, b=b, dy=dy), ["y", "dw", "db", "dx"])
    xt = torch.tensor(x).float().reshape(6, 40).requires_grad_(True)
    wt, bt = (torch.tensor(a).float().requires_grad_(True) for a in (w, b))
    yt = torch.nn.functional.linear(xt, wt, bt)
    yt.backward(torch.tensor(dy).float())
    for name, g, t in zip(["y", "dw", "db", "dx"], got, [yt.detach(), wt.grad, bt.grad, xt.grad.reshape(shape)]):
        _assert_float16_close(g, t.numpy(), name)


def test_weighted_sum_float16_is_one_rounding_of_the_float32_sum():
    rng = np.random.default_rng(6)
    x, y = _half(rng, 1000), _half(rng, 1000)
    want = (torch.tensor(x).float() * 0.3 + torch.tensor(y).float() * -1e-3).half().numpy()
    got = _grads(
        [("WeightedSum", ["x", "a", "y", "b"], ["x"])],
        dict(x=x.copy(), y=y, a=np.array([0.3], np.float32), b=np.array([-1e-3], np.float32)),
        ["x"],
    )[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_to_half_rounds_as_numpy_does_with_or_without_torch():
    from asyncnet.ops._half import to_half

    rng = np.random.default_rng(7)
    mags = 10.0 ** rng.uniform(-12, 6, 50_000)
    x = (mags * rng.choice([-1, 1], mags.size)).astype(np.float32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, 65519.0, 65520.0]  # 65520 rounds to inf
    x = x.reshape(100, 500)[:, ::2]  # a strided view
    with np.errstate(over="ignore", under="ignore"):
        want = x.astype(np.float16)
    got = to_half(x)
    assert got.dtype == np.float16 and got.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    small = to_half(x[:2, :3])  # below the size where torch is used
    np.testing.assert_array_equal(small.view(np.uint16), want[:2, :3].view(np.uint16))
