"""caffe2.python.hypothesis_test_util accepts the spellings Caffe2's 2018 tests use against
today's Python, NumPy and hypothesis: inspect.getargspec, np.set_printoptions(threshold=np.nan),
hnp.arrays(dtype, shape, elements) and array elements outside an integer dtype's range."""

from __future__ import annotations

import inspect
import sys

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2.python.hypothesis_test_util as hu

pytestmark = pytest.mark.timeout(60)


def test_getargspec_gives_the_four_old_fields():
    def f(a, b=1, *args, c=2, **kw):
        return a

    spec = inspect.getargspec(f)
    assert spec.args == ["a", "b"] and spec.varargs == "args" and spec.keywords == "kw" and spec.defaults == (1,)


def test_a_nan_print_threshold_means_never_summarize():
    before = np.get_printoptions()["threshold"]
    try:
        np.set_printoptions(threshold=np.nan)
        assert np.get_printoptions()["threshold"] == sys.maxsize
        np.set_printoptions(threshold=7)
        assert np.get_printoptions()["threshold"] == 7
    finally:
        np.set_printoptions(threshold=before)


@settings(max_examples=20, deadline=None)
@given(a=hnp.arrays(np.int64, 3, st.integers(0, 4)))
def test_arrays_takes_elements_third(a):
    assert a.shape == (3,) and a.dtype == np.int64 and ((0 <= a) & (a <= 4)).all()


@settings(max_examples=30, deadline=None)
@given(a=hu.arrays([4], np.int32, st.integers(2**31, 2**32 - 1)), f=hu.arrays([3], np.int32, st.floats(0, 2.5)))
def test_elements_outside_the_dtype_are_converted_as_numpy_assigns_them(a, f):
    assert a.dtype == np.int32 and (a < 0).all()  # 2**31 .. 2**32 - 1 wrap to the negatives
    assert f.dtype == np.int32 and ((0 <= f) & (f <= 2)).all()  # floats truncate


def test_numpy_calls_now_refused_behave_as_they_did():
    assert np.sum(x * 2 for x in range(4)) == 12  # a generator
    assert np.sum(np.arange(4)) == 6 and np.sum([[1, 2]], axis=0).tolist() == [1, 2]
    raw = np.arange(3, dtype=np.int16).tobytes()
    np.testing.assert_array_equal(np.fromstring(raw, dtype=np.int16), [0, 1, 2])  # binary mode
    np.testing.assert_array_equal(np.fromstring("1 2", dtype=int, sep=" "), [1, 2])
    np.testing.assert_array_equal(np.delete(np.arange(3), np.array([]), axis=0), [0, 1, 2])
    np.testing.assert_array_equal(np.delete(np.arange(3), [1]), [0, 2])
    assert hu is not None
