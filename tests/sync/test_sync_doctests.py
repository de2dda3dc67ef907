"""The examples in the sync modules' docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "asyncnet.sync._bucket",
    "asyncnet.sync._rounds",
    "asyncnet.sync._reduce",
    "asyncnet.sync._robustcond",
    "asyncnet.atomic._futex",
    "asyncnet.sync.base",
    "asyncnet.sync.threaded",
    "asyncnet.sync.launch",
    "asyncnet.sync._failures",
    "asyncnet.ops.collective",
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
