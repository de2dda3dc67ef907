"""The docstring examples of the caffe2 compatibility modules (memonger, muji, regularizer, ...)."""

import doctest
import importlib

import pytest

MODULES = [
    "caffe2.python._legacy_numpy",
    "caffe2.python.memonger",
    "caffe2.python.muji",
    "asyncnet.ops.caffe2_tt",
    "caffe2.python.convnet_benchmarks",
    "caffe2.python.regularizer",
    "caffe2.python.regularizer_context",
    "caffe2.python._observers",
    "asyncnet.ops.caffe2_free",
]

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
