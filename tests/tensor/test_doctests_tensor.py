"""The docstring examples of the tensor modules and of the converted op modules run as written."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.timeout(60)

MODULES = [
    "asyncnet.tensor",
    "asyncnet.tensor.namespace",
    "asyncnet.tensor.place",
    "asyncnet.tensor.streams",
    "asyncnet.ops.device",
    "asyncnet.ops.math",
    "asyncnet.ops.optim",
    "asyncnet.ops.loss",
    "asyncnet.ops.fill",
    "asyncnet.ops.grad",
    "asyncnet.ops.collective",
    "asyncnet.ops.logic",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
