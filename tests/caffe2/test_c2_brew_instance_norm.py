"""brew.instance_norm: Caffe2's parameter names and initial values, training and test outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caffe2.python import brew, model_helper, workspace

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("is_test", [False, True])
def test_brew_instance_norm_builds_caffe2s_blobs(is_test):
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="inorm")
    out = brew.instance_norm(m, "x", "y", dim_in=3, order="NCHW", is_test=is_test)
    assert str(out) == "y"
    assert [str(p) for p in m.params] == ["y_s", "y_b"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(m.param_init_net)
    workspace.RunNetOnce(m.net)
    np.testing.assert_allclose(workspace.FetchBlob("y_s"), np.ones(3))
    ref = torch.nn.functional.instance_norm(torch.tensor(x), eps=1e-5).numpy()
    np.testing.assert_allclose(workspace.FetchBlob("y"), ref, rtol=1e-4, atol=1e-5)
    assert workspace.HasBlob("y_siv") is not is_test
