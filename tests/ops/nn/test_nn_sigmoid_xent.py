"""SigmoidCrossEntropyWithLogits (three variants) against torch, its gradient against torch
autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck_helpers import check_all
from _nn_helpers import rand, run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=8, deadline=None)

VARIANTS = {
    "plain": ({}, lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none").mean(-1)),
    "log_D_trick": ({"log_D_trick": 1}, lambda x, t: -((2 * t - 1) * F.logsigmoid(x)).mean(-1)),
    "unjoined": ({"unjoined_lr_loss": 1}, lambda x, t: -(x * t - (1 - t) * F.softplus(x)).mean(-1)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@FEW
@given(shape=st.sampled_from([(3,), (2, 4), (2, 3, 2)]), seed=st.integers(0, 2**16))
def test_sigmoid_xent(variant, shape, seed):
    args, tfn = VARIANTS[variant]
    x = 3 * rand(seed, shape)
    t = np.random.default_rng(seed + 1).uniform(size=shape)
    y = run("SigmoidCrossEntropyWithLogits", [x, t], **args)
    np.testing.assert_allclose(y, tfn(torch.tensor(x), torch.tensor(t)).numpy(), rtol=1e-10, atol=1e-12)
    feeds = {"x": x, "t": t, "r": rand(seed + 2, shape[:-1])}

    def build(net):
        net.SigmoidCrossEntropyWithLogits(["x", "t"], "y", **args)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    check_all(build, lambda x, t, r: (tfn(x, t) * r).mean(), feeds, ["x"])


def test_sigmoid_xent_no_overflow_and_errors():
    x = np.array([[1000.0, -1000.0]], np.float32)
    y = run("SigmoidCrossEntropyWithLogits", [x, np.array([[0.0, 1.0]], np.float32)])
    np.testing.assert_allclose(y, [1000.0], rtol=1e-6)
    assert y.dtype == np.float32 and y.shape == (1,)
    with pytest.raises(an.OperatorError, match="one shape"):
        run("SigmoidCrossEntropyWithLogits", [x, np.zeros((1, 3), np.float32)])
    with pytest.raises(an.OperatorError, match="both"):
        run("SigmoidCrossEntropyWithLogits", [x, x], log_D_trick=1, unjoined_lr_loss=1)
