"""DeviceOption.random_seed for the random fills, and Caffe2's asynchronous net type names.

Sources: caffe2/core/context.h (CPUContext seeds its generator from option.random_seed when
set, once per op context; every op of a net whose device_option has a seed gets that seed),
caffe2/core/net.cc's registry (net types "async_polling", "parallel" are asynchronous
executors), caffe2.proto (DeviceOption.random_seed).
"""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FILLS = [("GaussianFill", {}), ("UniformFill", {"min": -1.0, "max": 1.0}), ("XavierFill", {})]


def _init(op, args, device=None, net_device=None, **extra):
    net = an.Net("init", device_option=net_device)
    getattr(net, op)([], "a", shape=[4, 3], device_option=device, **args, **extra)
    getattr(net, op)([], "b", shape=[4, 3], device_option=device, **args, **extra)
    return net


@pytest.mark.parametrize("op,args", FILLS)
def test_random_seed_of_the_net_device_option(op, args):
    seeded = an.DeviceOption(random_seed=1234)
    ws1, ws2 = an.Workspace(), an.Workspace()
    ws1.create_net(_init(op, args, net_device=seeded))
    ws2.create_net(_init(op, args, net_device=seeded))
    ws1.run_net("init")
    ws2.run_net("init")
    a1 = ws1.fetch("a").copy()
    np.testing.assert_array_equal(a1, ws2.fetch("a"))  # same seed, same values in another workspace
    np.testing.assert_array_equal(a1, ws1.fetch("b"))  # each op's context is seeded alike (Caffe2)
    ws1.run_net("init")
    assert not np.array_equal(a1, ws1.fetch("a"))  # the op's stream goes on: a second run differs
    ws1.create_net(_init(op, args, net_device=seeded), overwrite=True)
    ws1.run_net("init")
    np.testing.assert_array_equal(a1, ws1.fetch("a"))  # a new net instance starts the stream again


def test_op_device_option_wins_and_seed_argument_wins_over_both():
    ws = an.Workspace()
    ws.run_net_once(
        _init("GaussianFill", {}, device=an.DeviceOption(random_seed=5), net_device=an.DeviceOption(random_seed=6))
    )
    a5 = ws.fetch("a")
    ws.run_net_once(_init("GaussianFill", {}, net_device=an.DeviceOption(random_seed=5)))
    np.testing.assert_array_equal(a5, ws.fetch("a"))
    ws.run_net_once(_init("GaussianFill", {}, net_device=an.DeviceOption(random_seed=5), seed=9))
    s9 = ws.fetch("a")
    assert not np.array_equal(a5, s9)
    ws.run_net_once(_init("GaussianFill", {}, seed=9))
    np.testing.assert_array_equal(s9, ws.fetch("a"))
    ws.run_net_once(_init("GaussianFill", {}))  # no seed anywhere: fresh entropy
    assert not np.array_equal(ws.fetch("a"), ws.fetch("b"))


def test_random_seed_json_and_validation():
    net = _init("UniformFill", {}, net_device=an.DeviceOption(random_seed=3))
    text = net.to_def().to_json()
    assert '"random_seed": 3' in text
    again = an.NetDef.from_json(text)
    assert again.device_option.random_seed == 3
    for bad in (-1, 2**32, 1.5, True):
        with pytest.raises(an.NetDefinitionError, match="random_seed"):
            an.DeviceOption(random_seed=bad)
    with pytest.raises(an.NetDefinitionError, match="random_seed"):
        an.NetDef.from_json('{"name": "n", "device_option": {"random_seed": -4}}')


@pytest.mark.parametrize("net_type", ["async_polling", "parallel"])
def test_caffe2_async_net_types(net_type):
    with an.Workspace() as ws:
        ws.feed("x", np.arange(4.0))
        net = an.Net("n", type=net_type, num_workers=2)
        net.Scale("x", "a", scale=2.0)
        net.Scale("x", "b", scale=3.0)
        net.Add(["a", "b"], "y")
        instance = ws.create_net(net)
        ws.run_net("n", num_iter=3)
        np.testing.assert_array_equal(ws.fetch("y"), 5 * np.arange(4.0))
        assert type(instance).__name__ == "AsyncSchedulingNet"
        ws.run_net_async("n").wait(timeout=30)


def test_caffe2_async_simple_is_the_sequential_net():
    with an.Workspace() as ws:
        ws.feed("x", np.arange(3.0))
        net = an.Net("s", type="async_simple")
        net.Scale("x", "x", scale=2.0)
        net.Scale("x", "x", scale=3.0)  # order matters: in place
        instance = ws.create_net(net)
        ws.run_net("s", num_iter=2)
        np.testing.assert_array_equal(ws.fetch("x"), 36 * np.arange(3.0))
        assert type(instance).__name__ == "SimpleNet"
