"""The examples in the ONNX modules' docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytest.importorskip("onnx")

MODULES = [
    "asyncnet.interop.onnx",
    "asyncnet.interop.onnx._import",
    "asyncnet.interop.onnx._export",
    "asyncnet.interop.onnx.backend",
    "asyncnet.ops.onnx_ref",
    "asyncnet.ops.onnx_nn",
    "asyncnet.ops.onnx_rnn",
    "asyncnet.ops.onnx_control",
    "asyncnet.ops.onnx_attention",
    "asyncnet.ops.onnx_conv",
    "asyncnet.interop.onnx._optimize",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
