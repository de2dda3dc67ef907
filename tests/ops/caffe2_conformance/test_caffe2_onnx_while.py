"""ONNXWhile (ONNX's Loop as Caffe2 ran it) against a Python loop: Fibonacci numbers carried,
each iteration's value scanned, the trip count and the body's condition ending the loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


def _body(limit: float = 100.0) -> str:
    body = an.Net("body")
    body.Add(["first", "second"], "third")
    body.ConstantFill([], "limit", shape=[1], value=limit)
    body.LT(["third", "limit"], "cond_new")
    nd = body.to_def()
    nd.external_inputs[:] = ["i", "cond", "first", "second"]
    nd.external_outputs[:] = ["cond_new", "second", "third", "third"]
    return nd.to_json()


def _reference(trips, start, limit):
    first, second, seen = 1.0, 1.0, []
    if start:
        for _ in range(trips):
            first, second = second, first + second
            seen.append(second)
            if second >= limit:
                break
    return first, second, seen


@settings(max_examples=30, deadline=None)
@given(trips=st.integers(0, 15), start=st.booleans(), limit=st.sampled_from([5.0, 50.0, 1e9]))
def test_fibonacci_matches_a_python_loop(trips, start, limit):
    ws = an.Workspace()
    ws.feed("n", np.array(trips, np.int64))
    ws.feed("go", np.array(start))
    ws.feed("a", np.array([1.0], np.float32))
    ws.feed("b", np.array([1.0], np.float32))
    op = an.OperatorDef(
        "ONNXWhile", ["n", "go", "a", "b"], ["first", "second", "all"],
        {"body": _body(limit), "has_trip_count": True, "has_cond": True},
    )  # fmt: skip
    ws.run_operator_once(op)
    first, second, seen = _reference(trips, start, limit)
    assert float(ws.fetch("first")[0]) == first and float(ws.fetch("second")[0]) == second
    np.testing.assert_array_equal(ws.fetch("all"), np.array(seen, np.float32))
    assert not {"cond_new", "third", "limit"} & set(ws.blobs())  # the body's blobs stay in the op


def test_a_body_of_the_wrong_arity_is_refused():
    with pytest.raises(an.NetDefinitionError, match="external inputs"):
        an.Net("n").ONNXWhile(["n", "a"], ["a"], body=_body(), has_trip_count=True)
