"""The examples in asyncnet.compat.kizzasi's docstrings run and print what they say."""

import doctest

import pytest

from asyncnet.compat import kizzasi


@pytest.mark.timeout(30)
def test_docstring_examples():
    result = doctest.testmod(kizzasi, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
