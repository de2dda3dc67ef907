"""The docstring examples of the op-family modules run and print what they say."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("name", ["shape", "conv", "pool", "norm", "sparse", "recurrent"])
def test_docstring_examples(name):
    module = importlib.import_module(f"asyncnet.ops.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
