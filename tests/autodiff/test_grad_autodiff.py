"""add_gradient_ops on whole nets: shared blobs, in-place ops, pruning, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck_helpers import autodiff_grads, check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op

pytestmark = pytest.mark.timeout(60)


def rng_feeds(seed: int, **shapes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=s) for k, s in shapes.items()}


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 4), k=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_shared_blobs_sum_their_gradients(n, k, seed):
    """w feeds two FCs, x feeds three ops (one of them twice): gradients add up as torch's do."""
    feeds = rng_feeds(seed, x=(n, k), w=(k, k), b=(k,), r=(n, k))

    def build(net):
        h1 = net.FC(["x", "w", "b"], "h1")
        h2 = net.FC([net.Tanh(h1, "t"), "w", "b"], "h2")
        sq = net.Mul(["x", "x"], "sq")
        y = net.Sum([h2, sq, "x"], "y")
        return weighted_mean_head(net, y)

    def tfn(x, w, b, r):
        h2 = F.linear(torch.tanh(F.linear(x, w, b)), w, b)
        return ((h2 + x * x + x) * r).mean()

    check_all(build, tfn, feeds, ["x", "w", "b"])


def test_summation_uses_one_sum_op_per_shared_blob():
    net = an.Net("n")
    net.Mul(["a", "a"], "b")
    net.Add(["b", "a"], "c")
    net.AveragedLoss("c", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["a"])
    sums = [op for op in net.ops if op.type == "Sum"]
    assert len(sums) == 1 and len(sums[0].inputs) == 3 and sums[0].outputs == [grads["a"]]
    _, g = autodiff_grads(lambda n: _rebuild(n), {"a": np.array([1.0, -2.0, 3.0])}, ["a"])
    np.testing.assert_allclose(g["a"], (2 * np.array([1.0, -2.0, 3.0]) + 1) / 3)


def _rebuild(net):
    net.Mul(["a", "a"], "b")
    net.Add(["b", "a"], "c")
    return net.AveragedLoss("c", "loss")


def test_mlp_with_in_place_relu_and_softmax_loss_vs_torch():
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.normal(size=(6, 5)),
        "w1": rng.normal(size=(7, 5)),
        "b1": rng.normal(size=7),
        "w2": rng.normal(size=(3, 7)),
        "b2": rng.normal(size=3),
        "label": rng.integers(0, 3, 6).astype(np.int64),
    }

    def build(net):
        net.FC(["x", "w1", "b1"], "h")
        net.Relu("h", "h")
        net.FC(["h", "w2", "b2"], "logits")
        net.SoftmaxWithLoss(["logits", "label"], ["p", "loss"])
        net.Accuracy(["p", "label"], "acc")  # a metric beside the loss: skipped by the backward pass
        return "loss"

    def tfn(x, w1, b1, w2, b2, label):
        return F.cross_entropy(F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2), label)

    check_all(build, tfn, feeds, ["x", "w1", "b1", "w2", "b2"])


def test_float32_gradients_match_torch():
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.normal(size=(8, 4)).astype(np.float32),
        "w": rng.normal(size=(3, 4)).astype(np.float32),
        "b": np.zeros(3, np.float32),
        "label": rng.integers(0, 3, 8).astype(np.int32),
    }
    net = an.Net("f32")
    net.FC(["x", "w", "b"], "y")
    net.SoftmaxWithLoss(["y", "label"], ["p", "loss"])
    grads = add_gradient_ops(net, "loss", wrt=["w", "b"])  # dtype defaults to float32
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    t = {k: torch.tensor(v, requires_grad=k in ("w", "b")) for k, v in feeds.items()}
    F.cross_entropy(F.linear(t["x"], t["w"], t["b"]), t["label"].long()).backward()
    for k in ("w", "b"):
        assert ws.fetch(grads[k]).dtype == np.float32
        np.testing.assert_allclose(ws.fetch(grads[k]), t[k].grad.numpy(), rtol=1e-5, atol=1e-6)


def test_all_leaf_gradients_without_wrt_and_pruning_with_it():
    net = an.Net("n")
    net.FC(["x", "w", "b"], "y")
    net.SoftmaxWithLoss(["y", "label"], ["p", "loss"])
    net.Accuracy(["p", "label"], "acc")
    n_fwd = len(net.ops)
    assert set(add_gradient_ops(net, "loss")) == {"x", "w", "b"}  # not the int label
    net2 = an.Net("m")
    for op in net.ops[:n_fwd]:
        net2.add_op(op.type, op.inputs, op.outputs, **op.args)
    add_gradient_ops(net2, "loss", wrt=["w"])
    assert not any("x_grad" in o for op in net2.ops for o in op.outputs)


def test_gradient_names_do_not_clash_with_existing_blobs():
    net = an.Net("n")
    net.Scale("w", "w_grad", scale=3.0)  # a forward blob already called w_grad
    net.AveragedLoss("w_grad", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["w"])
    assert grads["w"] != "w_grad"
    ws = an.Workspace()
    ws.feed("w", np.ones(4, np.float32))
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(grads["w"]), np.full(4, 0.75))
    np.testing.assert_allclose(ws.fetch("w_grad"), np.full(4, 3.0))


def test_op_without_gradient_on_the_path_is_an_error():
    net = an.Net("n")
    net.Accuracy(["p", "label"], "acc")
    net.AveragedLoss("acc", "loss")
    with pytest.raises(an.NetDefinitionError, match="no gradient is registered for Accuracy"):
        add_gradient_ops(net, "loss")


def test_overwritten_input_needed_by_a_gradient_is_an_error():
    net = an.Net("n")
    net.Mul(["a", "b"], "c")
    net.Relu("a", "a")  # overwrites a, which Mul's gradient needs
    net.Add(["c", "a"], "d")
    net.AveragedLoss("d", "loss")
    with pytest.raises(an.NetDefinitionError, match="overwrites it"):
        add_gradient_ops(net, "loss", wrt=["b"])


@pytest.mark.parametrize(
    "op, inputs, out, wrt",
    [("Mul", ["a", "b"], "a", "b"), ("Mul", ["a", "b"], "b", "a"), ("Div", ["a", "b"], "b", "a")],
)
def test_in_place_op_whose_gradient_reads_the_overwritten_input_is_refused(op, inputs, out, wrt):
    """Mul's gradient reads both inputs, Div's its divisor: written over by the op's own output,
    the backward pass would read the product in the input's place (Caffe2's makers refuse it)."""
    net = an.Net("n")
    getattr(net, op)(inputs, out)
    net.AveragedLoss(out, "loss")
    with pytest.raises(an.NetDefinitionError, match="in place"):
        add_gradient_ops(net, "loss", wrt=[wrt])


def test_div_in_place_on_the_dividend_keeps_the_right_gradient():
    x = {"a": np.array([2.0, -3.0]), "b": np.array([0.5, 4.0])}
    ws = an.Workspace()
    for k, v in x.items():
        ws.feed(k, v.copy())
    net = an.Net("n")
    net.Div(["a", "b"], "a")
    net.AveragedLoss("a", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["b"])
    ws.run_net_once(net)
    ta, tb = (torch.tensor(x[k], requires_grad=True) for k in "ab")
    (ta / tb).mean().backward()
    np.testing.assert_allclose(ws.fetch(grads["b"]), tb.grad.numpy(), rtol=1e-12)


def test_bad_loss_and_unreachable_wrt():
    net = an.Net("n")
    net.Relu("x", "y")
    net.AveragedLoss("y", "loss")
    with pytest.raises(an.NetDefinitionError, match="not an output"):
        add_gradient_ops(net, "nope")
    with pytest.raises(an.NetDefinitionError, match=r"reaches \['z'\]"):
        add_gradient_ops(net, "loss", wrt=["z"])


def test_gradient_through_softmax_output_of_softmax_with_loss_is_refused():
    net = an.Net("n")
    net.SoftmaxWithLoss(["x", "label"], ["p", "l"])
    net.AveragedLoss("p", "loss")
    with pytest.raises(an.NetDefinitionError, match="no gradient flows back"):
        add_gradient_ops(net, "loss")


# -- the maker protocol, with an op registered here -------------------------------------------
@register_op("TestCube", inputs=1, outputs=1, doc="y = x^3 (test op)")
def _cube(ctx, x):
    return x**3


@register_gradient("TestCube")
def _cube_grad(op: OperatorDef, gout):
    # d/dx x^3 = 3 x^2 dy: built from existing ops; local names are free, autodiff renames them
    x, dy = op.inputs[0], gout[0]
    return [
        OperatorDef("Mul", [x, x], ["#x2"]),
        OperatorDef("Mul", ["#x2", dy], ["#t"]),
        OperatorDef("Scale", ["#t"], ["#dx"], {"scale": 3.0}),
    ], ["#dx"]


def test_custom_gradient_maker_protocol():
    feeds = {"x": np.array([1.0, -2.0, 0.5]), "r": np.array([1.0, 2.0, 3.0])}

    def build(net):
        return weighted_mean_head(net, net.TestCube("x", "y"))

    check_all(build, lambda x, r: (x**3 * r).mean(), feeds, ["x"])
    assert an.get_schema("TestCube").differentiable
