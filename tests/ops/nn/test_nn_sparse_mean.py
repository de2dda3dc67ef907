"""SparseLengthsMean and its gradient: Caffe2's kernel (each bag's rows added in order, then
multiplied by the rounded 1 / length; an empty bag gives zeros) on numpy bit for bit, torch's
embedding_bag(mode="mean") within rounding on numpy and torch tensors, and the gradient against
torch autograd through embedding_bag."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _nn_helpers import run

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.ops.sparse import GradientSlice

pytestmark = pytest.mark.timeout(60)


def loop_mean(data, idx, lengths):
    """Caffe2's loop: out[b] = 0; out[b] += data[idx_k] for the bag's k; out[b] *= 1 / length."""
    out = np.zeros((len(lengths), *data.shape[1:]), data.dtype)
    k = 0
    for b, n in enumerate(lengths):
        for _ in range(n):
            out[b] = out[b] + data[idx[k]]
            k += 1
        if n:
            out[b] = out[b] * (data.dtype.type(1) / data.dtype.type(n))
    return out


def case(seed: int, dtype: str = "float32", rows: int = 30, dim: int = 5):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 7, 12).astype(np.int32)
    lengths[3] = 0  # an empty bag
    idx = rng.integers(0, rows, int(lengths.sum()))
    data = rng.normal(size=(rows, dim)).astype(dtype)
    return data, idx, lengths


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_is_caffe2_loop_bit_for_bit(dtype, seed):
    data, idx, lengths = case(seed, dtype)
    got = run("SparseLengthsMean", [data, idx, lengths])
    np.testing.assert_array_equal(got, loop_mean(data, idx, lengths))
    assert not got[3].any()


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_mean_is_torch_embedding_bag_mean(lib):
    data, idx, lengths = case(4)
    offsets = torch.from_numpy(np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64))
    want = torch.nn.functional.embedding_bag(torch.from_numpy(idx), torch.from_numpy(data), offsets, mode="mean")
    args = [data, idx, lengths] if lib == "numpy" else [torch.from_numpy(a) for a in (data, idx, lengths)]
    got = run("SparseLengthsMean", args)
    assert isinstance(got, torch.Tensor) == (lib == "torch")
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_gradient_is_torch_autograd_of_embedding_bag_mean(lib):
    data, idx, lengths = case(5)
    dy = np.random.default_rng(6).normal(size=(len(lengths), data.shape[1])).astype(np.float32)
    weight = torch.tensor(data, requires_grad=True)
    offsets = torch.from_numpy(np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64))
    out = torch.nn.functional.embedding_bag(torch.from_numpy(idx), weight, offsets, mode="mean")
    out.backward(torch.from_numpy(dy))
    net = an.Net("mean")
    net.SparseLengthsMean(["table", "idx", "lengths"], "pooled")
    net.Mul(["pooled", "dy"], "prod")
    net.AveragedLoss(["prod"], "loss")  # d loss / d pooled = dy / dy.size
    grads = add_gradient_ops(net, "loss", wrt=["table"])
    g = grads["table"]
    assert isinstance(g, GradientSlice)
    conv = (lambda a: a) if lib == "numpy" else torch.from_numpy
    ws = an.Workspace()
    for name, v in (("table", data), ("idx", idx), ("lengths", lengths), ("dy", dy)):
        ws.feed(name, conv(v))
    ws.run_net_once(net)
    dense = np.zeros_like(data)
    np.add.at(dense, np.asarray(ws.fetch(g.indices)), np.asarray(ws.fetch(g.values)))
    np.testing.assert_allclose(dense * dy.size, weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_rows_are_caffe2_scale_bit_for_bit():
    _, _, lengths = case(7)
    dy = np.random.default_rng(8).normal(size=(len(lengths), 3)).astype(np.float32)
    got = run("SparseLengthsMeanGradient", [dy, lengths])
    want = np.concatenate(
        [np.repeat(dy[b : b + 1] * (np.float32(1) / np.float32(n)), n, 0) for b, n in enumerate(lengths) if n]
    )
    np.testing.assert_array_equal(got, want)


def test_mean_of_wrong_lengths_is_an_error():
    data, idx, lengths = case(9)
    with pytest.raises(an.OperatorError, match="summing to"):
        run("SparseLengthsMean", [data, idx, lengths + 1])
