"""The docstring examples of the caffe2 functional, workspace, db, observer and core modules."""

import doctest
import importlib

import pytest

MODULES = [
    "caffe2.python.functional",
    "caffe2.python._cdb",
    "caffe2.python._observers",
    "caffe2.python.workspace",
    "caffe2.python.core",
]

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
