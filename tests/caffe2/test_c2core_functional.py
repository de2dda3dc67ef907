"""caffe2.python.functional: one operator run on numpy arrays, outputs as a named tuple."""

import numpy as np
import pytest

from caffe2.python.functional import Functional

pytestmark = pytest.mark.timeout(60)


def test_outputs_are_named_and_indexed() -> None:
    x = np.array([[-1.0, 0.5], [2.0, -3.0]], dtype=np.float32)
    out = Functional.Relu(x)
    np.testing.assert_array_equal(out[0], np.maximum(x, 0))
    np.testing.assert_array_equal(out["output_0"], out.output_0)


def test_split_needs_num_output_and_follows_split_arg() -> None:
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    parts = Functional.Split(x, axis=0, split=[1, 2, 3], num_output=3)
    for got, want in zip(parts, np.split(x, [1, 3])):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="num_output"):
        Functional.Split(x, axis=0, split=[3, 3])


def test_too_many_inputs_is_refused() -> None:
    with pytest.raises(ValueError, match="inputs"):
        Functional.Relu(np.ones(2, np.float32), np.ones(2, np.float32))
