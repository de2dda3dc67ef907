"""The examples in the docstrings of the caffe2 package and of its new asyncnet ops run as shown."""

import doctest
import importlib

import pytest

MODULES = [
    "caffe2.proto.caffe2_pb2",
    "caffe2.convert",
    "caffe2.python",
    "caffe2.python.scope",
    "caffe2.python.utils",
    "caffe2.python.workspace",
    "caffe2.python.core",
    "caffe2.python.brew",
    "caffe2.python.model_helper",
    "caffe2.python.optimizer",
    "caffe2.python.modeling.initializers",
    "asyncnet.ops._tensorproto",
    "asyncnet.ops.dbio",
    "asyncnet.ops.caffe2_misc",
    "caffe2.proto.metanet_pb2",
    "caffe2.python.predictor_constants",
    "caffe2.python.predictor.predictor_exporter",
    "caffe2.python.dyndep",
    "caffe2.python.timeout_guard",
    "caffe2.python.experiment_util",
    "caffe2.python.models.resnet",
    "caffe2.python.data_parallel_model",
    "caffe2.python.onnx.frontend",
    "caffe2.python.rnn_cell",
]

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
