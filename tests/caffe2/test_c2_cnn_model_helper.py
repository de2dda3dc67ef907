"""cnn.CNNModelHelper's layer methods build the nets brew builds, and ModelHelper.Validate
refuses a parameter registered twice."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import brew, cnn, model_helper, workspace

pytestmark = pytest.mark.timeout(60)


def test_cnn_model_helper_matches_brew():
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    workspace.FeedBlob("x", x)
    cnn_model = cnn.CNNModelHelper(order="NCHW", name="cnn_net")
    out = cnn_model.Relu(cnn_model.Conv("x", "conv", dim_in=3, dim_out=4, kernel=3), "relu")
    pooled = cnn_model.MaxPool(out, "pool", kernel=2, stride=2)
    brew_model = model_helper.ModelHelper(name="brew_net")
    b_out = brew.relu(brew_model, brew.conv(brew_model, "x", "b_conv", dim_in=3, dim_out=4, kernel=3), "b_relu")
    brew.max_pool(brew_model, b_out, "b_pool", kernel=2, stride=2)
    assert [op.type for op in cnn_model.net.Proto().op] == [op.type for op in brew_model.net.Proto().op]
    assert [str(p) for p in cnn_model.params] == ["conv_w", "conv_b"]
    workspace.RunNetOnce(cnn_model.param_init_net)
    workspace.FeedBlob("b_conv_w", workspace.FetchBlob("conv_w"))
    workspace.FeedBlob("b_conv_b", workspace.FetchBlob("conv_b"))
    workspace.RunNetOnce(cnn_model.net)
    workspace.RunNetOnce(brew_model.net)
    np.testing.assert_array_equal(workspace.FetchBlob(str(pooled)), workspace.FetchBlob("b_pool"))
    assert workspace.FetchBlob(str(pooled)).shape == (2, 4, 3, 3)


def test_cnn_model_helper_checks_its_order():
    assert cnn.CNNModelHelper(order="NHWC").arg_scope["order"] == "NHWC"
    with pytest.raises(ValueError, match="storage order"):
        cnn.CNNModelHelper(order="CHWN")


def test_validate_refuses_duplicate_params():
    model = model_helper.ModelHelper(name="dupes")
    model.params.extend(["a", "b"])
    assert model._Validate() == []
    model.Validate()
    model.params.extend(["c", "b"])
    assert model._Validate() == ["b"]
    with pytest.raises(AssertionError, match="Duplicate params"):
        model.Validate()
