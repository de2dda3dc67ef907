"""The TT op against the dense matrix of its cores (built here with numpy from the definition)
and against FC on cores from caffe2.python.tt_core.matrix_to_tt."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.python import tt_core

pytestmark = pytest.mark.timeout(60)


def _dense(cores, inp, out, ranks):
    """M[(i_1..i_d), (o_1..o_d)] = G_1[:, i_1, o_1, :] @ ... @ G_d[:, i_d, o_d, :], loop by loop."""
    m = np.zeros((int(np.prod(inp)), int(np.prod(out))))
    for i in np.ndindex(*inp):
        for o in np.ndindex(*out):
            prod = np.eye(1)
            for k, g in enumerate(cores):
                prod = prod @ g[:, i[k], o[k], :]
            m[np.ravel_multi_index(i, inp), np.ravel_multi_index(o, out)] = prod[0, 0]
    return m


def _stored(cores):
    return np.concatenate([g.transpose(1, 3, 0, 2).ravel() for g in cores[::-1]]).astype(np.float32)


def _run(x, b, flat, inp, out, ranks):
    ws = an.Workspace()
    for k, v in {"x": x, "b": b, "cores": flat}.items():
        ws.feed(k, v)
    net = an.Net("tt")
    net.TT(["x", "b", "cores"], "y", inp_sizes=inp, out_sizes=out, tt_ranks=ranks)
    ws.run_net_once(net)
    return ws.fetch("y")


@pytest.mark.parametrize(("inp", "out", "ranks"), [([2, 3], [3, 2], [1, 2, 1]), ([2, 2, 3], [1, 4, 2], [1, 3, 2, 1])])
def test_tt_is_x_times_the_dense_matrix_plus_b(inp, out, ranks):
    rng = np.random.default_rng(0)
    cores = [rng.standard_normal((ranks[k], inp[k], out[k], ranks[k + 1])) for k in range(len(inp))]
    x = rng.standard_normal((3, int(np.prod(inp)))).astype(np.float32)
    b = rng.standard_normal(int(np.prod(out))).astype(np.float32)
    want = x.astype(np.float64) @ _dense(cores, inp, out, ranks) + b
    np.testing.assert_allclose(_run(x, b, _stored(cores), inp, out, ranks), want, rtol=1e-4, atol=1e-4)


def test_full_rank_cores_of_a_matrix_give_fc():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 6)).astype(np.float32)  # FC weight [out, in]
    x = rng.standard_normal((2, 6)).astype(np.float32)
    flat = tt_core.matrix_to_tt(w, [2, 3], [3, 2], [1, 6, 1])
    np.testing.assert_allclose(_run(x, np.zeros(6, np.float32), flat, [2, 3], [3, 2], [1, 6, 1]), x @ w.T, atol=1e-4)


def test_a_wrong_number_of_core_values_is_refused():
    with pytest.raises(an.OperatorError, match="expected 16 core values"):
        _run(np.ones((1, 4), np.float32), np.zeros(4, np.float32), np.ones(5, np.float32), [2, 2], [2, 2], [1, 2, 1])
