"""The docstring examples of the benchmarks package run and print what they say."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.timeout(60)

MODULES = ["benchmarks", "benchmarks._single", "benchmarks._table", "benchmarks._ranks", "benchmarks.overlap"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
