"""The docstring examples of the asyncnet.train modules run and print what they say."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    "name",
    [
        "asyncnet.train.config",
        "asyncnet.train.program",
        "asyncnet.train.loop",
        "asyncnet.train.api",
        "asyncnet.train.report",
        "asyncnet.train.data",
        "asyncnet.train.trainers",
        "asyncnet.model.optimizer",
        "asyncnet.model.builder",
    ],
)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
