"""The shape of LearningRate's output as a Caffe2 program sees it.

Caffe2's LearningRateOp::RunOnDevice (caffe2/sgd/learning_rate_op.h, every release) writes
``output->Resize(vector<int64_t>())``: a 0-d tensor, which ``FetchBlob`` returned as a 0-d numpy
array; its learning_rate_op_test.py reference is ``np.array(base_lr)``. Only the schema's shape
inference (``out[0] = in[0]``) says [1], the counter's shape. asyncnet's op gives the same 0-d
array, through asyncnet's API and through the ``caffe2`` package alike."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.python import brew, core, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(120)


def test_learning_rate_op_fetches_0d_as_in_caffe2():
    workspace.FeedBlob("it", np.array([7], np.int64))
    workspace.RunOperatorOnce(
        core.CreateOperator("LearningRate", ["it"], ["lr"], base_lr=-0.1, policy="step", stepsize=5, gamma=0.5)
    )
    lr = workspace.FetchBlob("lr")
    assert lr.shape == () and lr.dtype == np.float32
    np.testing.assert_allclose(lr, np.array(-0.1 * 0.5), rtol=1e-6)  # Caffe2's test reference: np.array(base_lr * ...)
    assert float(lr) == pytest.approx(-0.05)


def test_build_sgd_learning_rate_blob_is_0d_and_its_consumers_take_it():
    workspace.FeedBlob("data", np.ones((4, 3), np.float32))
    workspace.FeedBlob("label", np.zeros((4, 1), np.float32))
    m = model_helper.ModelHelper(name="lr_shape")
    dist = m.SquaredL2Distance([brew.fc(m, "data", "fc", 3, 1), "label"], "dist")
    m.AddGradientOperators([m.AveragedLoss(dist, "loss")])
    optimizer.build_sgd(m, base_learning_rate=0.5, policy="fixed")
    workspace.RunNetOnce(m.param_init_net)
    w0 = workspace.FetchBlob("fc_w")
    workspace.RunNetOnce(m.net)
    (lr_blob,) = [op.output[0] for op in m.net.Proto().op if op.type == "LearningRate"]
    lr = workspace.FetchBlob(lr_blob)
    assert lr.shape == () and float(lr) == pytest.approx(-0.5)
    assert not np.array_equal(workspace.FetchBlob("fc_w"), w0)  # WeightedSum took the 0-d rate


def test_asyncnet_and_caffe2_package_agree():
    ws = an.Workspace()
    ws.feed("it", np.array([3], np.int64))
    net = an.Net("lr")
    net.LearningRate(["it"], ["lr"], base_lr=0.2, policy="exp", gamma=0.9)
    ws.run_net_once(net)
    workspace.FeedBlob("it", np.array([3], np.int64))
    workspace.RunOperatorOnce(core.CreateOperator("LearningRate", ["it"], ["lr"], base_lr=0.2, policy="exp", gamma=0.9))
    assert ws.fetch("lr").shape == workspace.FetchBlob("lr").shape == ()
    assert ws.fetch("lr") == workspace.FetchBlob("lr")
