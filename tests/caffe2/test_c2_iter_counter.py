"""Caffe2's Iter on a counter made as int32 (ConstantFill dtype INT32, as Caffe2's toy regression
does): the blob becomes an int64 counter of the same value, incremented; asyncnet's own Iter
keeps refusing other dtypes unless asked with ``widen_to_int64``."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(60)


def test_an_int32_counter_becomes_int64_and_counts_on():
    init = core.Net("init")
    init.ConstantFill([], "ITER", shape=[1], value=7, dtype=core.DataType.INT32)
    train = core.Net("train")
    train.Iter("ITER", "ITER")
    train.LearningRate("ITER", "LR", base_lr=-0.1, policy="step", stepsize=2, gamma=0.5)
    workspace.RunNetOnce(init)
    workspace.CreateNet(train)
    workspace.RunNet(train.Name(), 3)
    it = workspace.FetchBlob("ITER")
    assert it.dtype == np.int64 and it.tolist() == [10]
    np.testing.assert_allclose(workspace.FetchBlob("LR"), [-0.1 * 0.5 ** (10 // 2)], rtol=1e-6)


def test_the_caffe2_proto_keeps_only_its_own_arguments():
    net = core.Net("n")
    net.Iter("ITER", "ITER")
    assert [a.name for a in net.Proto().op[0].arg] == []


@pytest.mark.parametrize("widen", [False, True])
def test_asyncnet_iter_widens_only_when_asked(widen):
    ws = an.Workspace()
    ws.feed("it", np.array([3], np.int32))
    net = an.Net("n")
    net.Iter("it", "it", widen_to_int64=widen)
    if not widen:
        with pytest.raises(an.OperatorError, match="got dtype int32"):
            ws.run_net_once(net)
        return
    ws.run_net_once(net)
    assert ws.fetch("it").dtype == np.int64 and ws.fetch("it").tolist() == [4]
