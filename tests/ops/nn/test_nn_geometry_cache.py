"""Conv and the pools remember their window geometry per input size in the op instance
(asyncnet.ops.conv.cached_geometry): one op fed several sizes, 1-D and 2-D inputs, keeps giving
torch.nn.functional's results, and invalid arguments fail on every run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import asyncnet as an
from asyncnet.ops.conv import cached_geometry, geometry

pytestmark = pytest.mark.timeout(60)


def _rand(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def test_one_conv_op_on_changing_sizes_matches_torch():
    w, b = _rand(1, 3, 2, 3, 3), _rand(2, 3)
    with an.Workspace() as ws:
        ws.feed("w", w)
        ws.feed("b", b)
        net = an.Net("c")
        net.Conv(["x", "w", "b"], "y", stride=2, pad_t=1, pad_l=0, pad_b=2, pad_r=1)
        ws.feed("x", _rand(0, 2, 2, 5, 5))
        ws.create_net(net)
        for seed, hw in enumerate([(5, 5), (7, 4), (5, 5), (3, 9)]):
            x = _rand(seed, 2, 2, *hw)
            ws.feed("x", x)
            ws.run_net("c")
            want = F.conv2d(F.pad(torch.tensor(x), (0, 1, 1, 2)), torch.tensor(w), torch.tensor(b), stride=2)
            np.testing.assert_allclose(ws.fetch("y"), want.numpy(), rtol=1e-10, atol=1e-12, err_msg=str(hw))


def test_one_pool_op_on_1d_then_2d_inputs_matches_torch():
    with an.Workspace() as ws:
        net = an.Net("p")
        net.MaxPool("x", "y", kernel=2, stride=2)
        ws.feed("x", _rand(0, 2, 3, 8))
        ws.create_net(net)
        for seed, shape in enumerate([(2, 3, 8), (2, 3, 6, 4), (2, 3, 8), (1, 2, 4, 4)]):
            x = _rand(seed, *shape)
            ws.feed("x", x)
            ws.run_net("p")
            pool = F.max_pool1d if len(shape) == 3 else F.max_pool2d
            np.testing.assert_array_equal(ws.fetch("y"), pool(torch.tensor(x), 2, 2).numpy(), err_msg=str(shape))


def test_invalid_arguments_fail_on_every_run():
    with an.Workspace() as ws:
        ws.feed("x", np.ones((1, 1, 2, 2)))
        net = an.Net("bad")
        net.AveragePool("x", "y", kernel=3)  # a 3x3 window on a 2x2 image
        ws.create_net(net)
        for _ in range(2):
            with pytest.raises(an.OperatorError, match="spans"):
                ws.run_net("bad")


def test_cached_geometry_is_geometry_per_size():
    args = {"kernel": 3, "stride": 2, "pad": 1}
    first = cached_geometry(args, (7, 7))
    assert first == geometry(args, (7, 7)) and cached_geometry(args, (7, 7)) is first
    assert cached_geometry(args, (9, 5)) == geometry(args, (9, 5)) != first
    for hw in range(20):  # many sizes: the cache stays bounded and right
        assert cached_geometry(args, (hw + 3, 4)) == geometry(args, (hw + 3, 4))
    assert len(args["_geometries"]) <= 16
