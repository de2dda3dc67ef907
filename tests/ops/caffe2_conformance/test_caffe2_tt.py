"""TT against its definition: the weight entry of each (input, output) multi-index is the
product of the cores' slices."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _c2run import run_op
from hypothesis import given, settings
from hypothesis import strategies as st

from caffe2.python import tt_core

pytestmark = pytest.mark.timeout(120)


def _weight_by_definition(cores, inp, out, ranks):
    d = len(inp)
    sizes = [inp[k] * out[k] * ranks[k] * ranks[k + 1] for k in range(d)]
    g, at = {}, 0
    for k in reversed(range(d)):  # stored last core first, each as [inp, r_next, r, out]
        g[k] = cores[at : at + sizes[k]].reshape(inp[k], ranks[k + 1], ranks[k], out[k])
        at += sizes[k]
    m = np.zeros((int(np.prod(inp)), int(np.prod(out))))
    for i in itertools.product(*(range(n) for n in inp)):
        for o in itertools.product(*(range(n) for n in out)):
            prod = np.eye(1)
            for k in range(d):
                prod = prod @ g[k][i[k], :, :, o[k]].T  # the r_k x r_k+1 slice
            m[np.ravel_multi_index(i, inp), np.ravel_multi_index(o, out)] = prod[0, 0]
    return m


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    inp=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    data=st.data(),
)
def test_tt_is_x_times_the_weight_its_cores_define(seed, inp, data):
    d = len(inp)
    out = data.draw(st.lists(st.integers(1, 3), min_size=d, max_size=d))
    ranks = [1] + data.draw(st.lists(st.integers(1, 3), min_size=d - 1, max_size=d - 1)) + [1]
    rng = np.random.default_rng(seed)
    n_cores = sum(inp[k] * out[k] * ranks[k] * ranks[k + 1] for k in range(d))
    cores = rng.standard_normal(n_cores)
    x, b = rng.standard_normal((2, int(np.prod(inp)))), rng.standard_normal(int(np.prod(out)))
    (y,) = run_op("TT", {"x": x, "b": b, "c": cores}, ["y"], inp_sizes=inp, out_sizes=out, tt_ranks=ranks)
    np.testing.assert_allclose(y, x @ _weight_by_definition(cores, inp, out, ranks) + b, rtol=1e-10, atol=1e-12)


def test_tt_of_caffe2_random_cores_gives_caffe2_values():
    """tt_core.init_tt_cores' draw after np.random.seed(1234) (2 x 2 x 2 x 2 both ways, ranks
    1, 3, 3, 3, 1) against the definition, on one input row."""
    inp, out, ranks = [2, 2, 2, 2], [2, 2, 2, 2], [1, 3, 3, 3, 1]
    cores = tt_core.init_tt_cores(inp, out, ranks)
    x = np.random.default_rng(3).random((1, 16)).astype(np.float32)
    (y,) = run_op("TT", {"x": x, "b": np.zeros(16, np.float32), "c": cores}, ["y"], inp_sizes=inp, out_sizes=out,
                  tt_ranks=ranks)  # fmt: skip
    want = x.astype(np.float64) @ _weight_by_definition(cores.astype(np.float64), inp, out, ranks)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-9)


def test_cores_of_the_wrong_size_are_refused():
    import asyncnet as an

    with pytest.raises(an.OperatorError, match="expected 6 core values"):
        run_op("TT", {"x": np.ones((1, 2)), "b": np.zeros(3), "c": np.ones(5)}, ["y"],
               inp_sizes=[2], out_sizes=[3], tt_ranks=[1, 1])  # fmt: skip


def test_module_example_runs():
    import doctest

    from asyncnet.ops import caffe2_tt

    result = doctest.testmod(caffe2_tt, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
