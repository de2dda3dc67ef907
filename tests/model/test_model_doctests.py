"""The docstring examples of asyncnet.model run and print what they say."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.timeout(60)

MODULES = [
    "asyncnet.model.builder",
    "asyncnet.model.optimizer",
    "asyncnet.model.checkpoint",
    "asyncnet.model.zoo.mlp",
    "asyncnet.model.zoo.cnn",
    "asyncnet.model.zoo.lstm",
    "asyncnet.model.zoo.dlrm",
    "benchmarks.peers.torch_twins",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
