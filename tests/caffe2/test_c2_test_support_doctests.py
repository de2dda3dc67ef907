"""The docstring examples of the modules that net_builder and Caffe2's own unit tests use."""

import doctest
import importlib

import pytest

MODULES = [
    "caffe2.python.cnn",
    "caffe2.python.context",
    "caffe2.python.control",
    "caffe2.python.net_builder",
    "caffe2.python.task",
    "caffe2.python.session",
    "caffe2.python.test_util",
    "caffe2.python.hypothesis_test_util",
    "caffe2.python.gradient_checker",
    "caffe2.python.device_checker",
    "caffe2.python.mkl_test_util",
    "caffe2.python.serialized_test.serialized_test_util",
    "caffe2.python._cworkspace",
]

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
