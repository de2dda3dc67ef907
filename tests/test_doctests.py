"""The examples in docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "asyncnet",
    "asyncnet.errors",
    "asyncnet.core.defs",
    "asyncnet.core.workspace",
    "asyncnet.core.net",
    "asyncnet.exec.simple",
    "asyncnet.exec.straight",
    "asyncnet.exec.draw",
    "asyncnet.exec.plan",
    "asyncnet.exec.control",
    "asyncnet.ops.atomic",
    "asyncnet.cli.common",
    "asyncnet.autodiff",
    "asyncnet._atomicio",
    "asyncnet.tensor.threads",
    "asyncnet.cleanup",
    "asyncnet.simulate",
    "asyncnet.simulate.model",
    "asyncnet.simulate.measure",
    "asyncnet._shm",
    "asyncnet._flatviews",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
