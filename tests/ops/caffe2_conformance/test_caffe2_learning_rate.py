"""LearningRate's policies as Caffe2 defines them (caffe2/sgd/learning_rate_functors.h, and the
tests of caffe2/python/operator_test/learning_rate_op_test.py reproduced with hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def lr_at(it: int, **args) -> float:
    ws, net = an.Workspace(), an.Net("lr")
    ws.feed("iter", np.array([it], np.int64))
    net.LearningRate("iter", "lr", dtype="float64", **args)
    ws.run_net_once(net)
    out = ws.fetch("lr")
    assert out.shape == () and out.dtype == np.float64
    return float(out)


@settings(max_examples=40, deadline=None)
@given(
    it=st.integers(1, 10**5),
    active=st.integers(1, 10**3),
    inactive=st.integers(1, 10**3),
    base=st.floats(0.0, 1.0),
    first=st.booleans(),
)
def test_alter_as_caffe2(it, active, inactive, base, first):
    in_first = it % (active + inactive) < (active if first else inactive)
    want = base if in_first == first else 0.0  # Caffe2's test: active_first=True, base while reminder < active
    assert (
        lr_at(it, policy="alter", base_lr=base, active_first=first, active_period=active, inactive_period=inactive)
        == want
    )


@settings(max_examples=40, deadline=None)
@given(it=st.integers(1, 10**5), num_iter=st.integers(100, 1000), base=st.floats(0.0, 1.0))
def test_hill_as_caffe2(it, num_iter, base):
    start, gamma, power, end = 1e-4, 1.0, 0.5, 1e-2  # the values of Caffe2's test
    if it < num_iter:
        want = start + (1.0 - start) * it / num_iter
    else:
        want = max(math.pow(1.0 + gamma * (it - num_iter), -power), end)
    got = lr_at(
        it,
        policy="hill",
        base_lr=base,
        num_iter=num_iter,
        start_multiplier=start,
        gamma=gamma,
        power=power,
        end_multiplier=end,
    )
    assert got == pytest.approx(base * want, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "args, multiplier",
    [
        ({"policy": "fixed"}, lambda t: 1.0),
        ({"policy": "step", "stepsize": 7, "gamma": 0.5}, lambda t: 0.5 ** (t // 7)),
        ({"policy": "exp", "gamma": 0.99}, lambda t: 0.99**t),
        ({"policy": "inv", "gamma": 0.01, "power": 0.75}, lambda t: (1 + 0.01 * t) ** -0.75),
        ({"policy": "poly", "power": 2.0, "max_iter": 100}, lambda t: (1 - t / 100) ** 2),
        (
            {"policy": "linearWarmup", "start_multiplier": 0.1, "num_iter": 20},
            lambda t: 1.0 if t >= 20 else 0.1 + 0.9 * t / 20,
        ),
        ({"policy": "constantWarmup", "multiplier": 0.25, "num_iter": 20}, lambda t: 1.0 if t >= 20 else 0.25),
    ],
)
@pytest.mark.parametrize("it", [0, 1, 19, 20, 21, 63, 100])
def test_every_policy_is_its_functor(args, multiplier, it):
    assert lr_at(it, base_lr=-0.3, **args) == pytest.approx(-0.3 * multiplier(it), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "args, match",
    [
        ({"policy": "inv", "gamma": 0.1}, "needs power > 0"),
        ({"policy": "poly", "power": 1.0}, "needs max_iter > 0"),
        ({"policy": "step", "stepsize": 0}, "needs stepsize >= 1"),
        ({"policy": "exp", "gamma": 0.0}, "needs gamma > 0"),
        ({"policy": "alter"}, "active_period"),
        ({"policy": "slope"}, "needs num_iter_1 > 0"),
        ({"policy": "slope", "num_iter_1": 5, "num_iter_2": 5}, "num_iter_2 > num_iter_1"),
        ({"policy": "sloped"}, "expected one of"),
    ],
)
def test_missing_policy_args_fail_at_creation(args, match):
    with pytest.raises(an.NetDefinitionError, match=match):
        an.Net("lr").LearningRate("iter", "lr", base_lr=0.1, **args)


def test_poly_past_max_iter_is_an_error_not_nan():
    with pytest.raises(an.OperatorError, match="past max_iter 10"):
        lr_at(11, base_lr=0.1, policy="poly", power=0.5, max_iter=10)
