"""caffe2.python.modeling.initializers: Caffe2's older spellings of the pseudo-fp16 initializers and
create_constant_fill_initializer, through brew as Caffe2's models use them."""

import numpy as np
import pytest

from caffe2.python import brew, core, model_helper, workspace
from caffe2.python.modeling import initializers

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _fc_model(weight_init, bias_init):
    model = model_helper.ModelHelper(name="fp16_init")
    brew.fc(model, "x", "y", dim_in=5, dim_out=3, WeightInitializer=weight_init, BiasInitializer=bias_init)
    workspace.RunNetOnce(model.param_init_net)
    return model


def test_old_names_are_the_renamed_classes():
    assert initializers.pFP16Initializer is initializers.PseudoFP16Initializer
    assert initializers.ReversepFP16Initializer is initializers.ReversePseudoFP16Initializer


def test_pfp16_initializer_makes_fp16_params_with_fp32_masters():
    model = _fc_model(initializers.pFP16Initializer, initializers.pFP16Initializer)
    w, w32 = workspace.FetchBlob("y_w"), workspace.FetchBlob("y_w_fp32")
    assert w.dtype == np.float16 and w32.dtype == np.float32 and w.shape == (3, 5)
    np.testing.assert_array_equal(w, w32.astype(np.float16))
    copies = {name: model.get_param_info(name).blob_copy for name in ("y_w", "y_b")}
    assert str(copies["y_w"][core.DataType.FLOAT]) == "y_w_fp32"


def test_reverse_pfp16_initializer_keeps_fp32_params_with_fp16_copies():
    model = _fc_model(initializers.ReversepFP16Initializer, initializers.ReversepFP16Initializer)
    w, w16 = workspace.FetchBlob("y_w"), workspace.FetchBlob("y_w_fp16")
    assert w.dtype == np.float32 and w16.dtype == np.float16
    np.testing.assert_array_equal(w16, w.astype(np.float16))
    copies = {name: model.get_param_info(name).blob_copy for name in ("y_w", "y_b")}
    assert str(copies["y_b"][core.DataType.FLOAT16]) == "y_b_fp16"


def test_constant_fill_initializer_with_and_without_a_value():
    init = core.Net("const_init")
    initializers.create_constant_fill_initializer(0.25).create_param("a", init, shape=[2, 2])
    initializers.create_constant_fill_initializer().create_param("z", init, shape=[3])
    workspace.RunNetOnce(init)
    np.testing.assert_array_equal(workspace.FetchBlob("a"), np.full((2, 2), 0.25, np.float32))
    np.testing.assert_array_equal(workspace.FetchBlob("z"), np.zeros(3, np.float32))
