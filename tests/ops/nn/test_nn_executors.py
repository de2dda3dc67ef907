"""A net of every new family, forward and backward, gives the same bits on the simple and the
async_scheduling executors (kernels never write their inputs; branches run concurrently)."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import GradientSlice, add_gradient_ops

pytestmark = pytest.mark.timeout(60)
LSTM_IN = ["seq", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"]


def feeds():
    rng = np.random.default_rng(0)
    shapes = {
        "img": (4, 2, 6, 6),
        "cw": (3, 2, 3, 3),
        "cb": (3,),
        "bn_s": (3,),
        "bn_b": (3,),
        "fw": (5, 27),
        "fb": (5,),
        "emb": (20, 5),
        "seq": (3, 4, 5),
        "h0": (4, 5),
        "c0": (4, 5),
        "w_ih": (20, 5),
        "w_hh": (20, 5),
        "b_ih": (20,),
        "b_hh": (20,),
        "g": (10,),
        "be": (10,),
    }
    out = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    out |= {
        "rm": np.zeros(3, np.float32),
        "rv": np.ones(3, np.float32),
        "ids": rng.integers(0, 20, 9),
        "lens": np.array([3, 2, 4, 0], np.int32),
        "t": rng.uniform(size=(4, 10)).astype(np.float32),
    }
    return out


def build(net_type):
    net = an.Net(f"all_{net_type}", type=net_type, num_workers=2)
    net.Conv(["img", "cw", "cb"], "c", kernel=3, pad=1, stride=2)  # [4, 3, 3, 3]
    net.SpatialBN(["c", "bn_s", "bn_b", "rm", "rv"], ["cn", "rm", "rv", "sm", "siv"])
    net.MaxPool("cn", "p", kernel=2, stride=1, pad=1)  # [4, 3, 4, 4]
    net.AveragePool("p", "ap", kernel=2, stride=2)  # [4, 3, 2, 2]
    net.Flatten("c", "flat")  # [4, 27]
    net.FC(["flat", "fw", "fb"], "h")  # [4, 5]
    net.SparseLengthsSum(["emb", "ids", "lens"], "bag")  # [4, 5]
    net.LSTM(LSTM_IN, ["y", "hT", "cT", "cache"])
    net.Concat(["h", "bag"], ["hb", "info"], axis=1)  # [4, 10]
    net.LayerNorm(["hb", "g", "be"], ["ln", "mu", "sd"], elementwise_affine=1)
    net.Add(["ln", "hb"], "z")
    net.SigmoidCrossEntropyWithLogits(["z", "t"], "xent")
    net.Reshape("ap", ["apf", "old"], shape=[4, -1])
    net.Slice("apf", "aps", starts=[0, 0], ends=[-1, 4])
    net.Concat(["xent", "xent"], ["xx", "info2"], axis=0, add_axis=1)
    net.Transpose("xx", "xxt")
    for b in ("xxt", "aps", "hT", "cT"):
        net.AveragedLoss(b, f"{b}_l")
    net.Sum(["xxt_l", "aps_l", "hT_l", "cT_l"], "loss")
    wrt = ["img", "cw", "cb", "bn_s", "bn_b", "fw", "fb", "emb", "w_ih", "w_hh", "b_ih", "b_hh", "g", "be", "h0"]
    return net, add_gradient_ops(net, "loss", wrt=wrt)


def run(net_type):
    net, grads = build(net_type)
    ws = an.Workspace()
    for k, v in feeds().items():
        ws.feed(k, v)
    ws.run_net_once(net)
    out = {}
    for k, g in grads.items():
        parts = (g.indices, g.values) if isinstance(g, GradientSlice) else (g,)
        out[k] = [ws.fetch(p).copy() for p in parts]
    return float(ws.fetch("loss")), out


def test_simple_and_async_scheduling_agree_bitwise():
    loss_s, grads_s = run("simple")
    for _ in range(3):
        loss_a, grads_a = run("async_scheduling")
        assert loss_a == loss_s
        for k in grads_s:
            for a, b in zip(grads_a[k], grads_s[k]):
                np.testing.assert_array_equal(a, b, err_msg=k)
    assert len(grads_s["emb"]) == 2  # the embedding table's gradient stayed sparse
