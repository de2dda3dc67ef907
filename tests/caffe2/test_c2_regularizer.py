"""caffe2.python.regularizer: the L1 and L2 terms against numpy, their gradient through the
model's backward pass against the analytic one, and the sparse projections against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import core, workspace
from caffe2.python.regularizer import ConstantNorm, L1Norm, L2Norm, MaxNorm

pytestmark = pytest.mark.timeout(60)

W = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)


@pytest.mark.parametrize(
    ("reg", "want", "dwant"), [(L1Norm(0.3), 0.3 * 6.5, 0.3 * np.sign(W)), (L2Norm(0.2), 0.2 * 14.25, 0.4 * W)]
)
def test_loss_terms_and_their_gradients(reg, want, dwant):
    workspace.FeedBlob("w", W)
    net = core.Net("reg")
    term = reg(net, core.Net("init"), core.BlobReference("w"))
    loss = net.AveragedLoss(term, "loss")
    grads = net.AddGradientOperators([loss])
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob(term), [want], rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grads["w"]), dwant, rtol=1e-6)
    assert not reg.apply_after_optimizer


def test_a_negative_factor_and_a_name_are_refused():
    with pytest.raises(ValueError, match="0 or more"):
        L1Norm(-1.0)
    with pytest.raises(TypeError, match="BlobReference"):
        L2Norm(1.0)(core.Net("n"), core.Net("i"), "w")


@pytest.mark.parametrize(("reg", "scale_small"), [(MaxNorm(1.0), False), (ConstantNorm(1.0), True)])
def test_sparse_projections_rescale_the_touched_rows(reg, scale_small):
    table = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], np.float32)
    workspace.FeedBlob("table", table)
    workspace.FeedBlob("idx", np.array([0, 1], np.int64))
    workspace.FeedBlob("g", np.zeros((2, 2), np.float32))
    net = core.Net("proj")
    reg(net, core.Net("init"), core.BlobReference("table"), core.GradientSlice("idx", "g"))
    workspace.RunNetOnce(net)
    out = workspace.FetchBlob("table")
    np.testing.assert_allclose(out[0], [0.6, 0.8], rtol=1e-5)
    np.testing.assert_allclose(out[1], [0.6, 0.8] if scale_small else [0.3, 0.4], rtol=1e-5)
    np.testing.assert_array_equal(out[2], table[2])  # not touched
    assert reg.apply_after_optimizer
    with pytest.raises(NotImplementedError, match="sparse"):
        reg(net, core.Net("init"), core.BlobReference("table"), core.BlobReference("g"))
