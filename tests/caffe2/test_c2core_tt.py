"""tt_core.tt_svd / matrix_to_tt: full-rank TT decompositions reproduce the tensor."""

import numpy as np
import pytest

from caffe2.python import tt_core

pytestmark = pytest.mark.timeout(60)


def _contract(cores: np.ndarray, sizes: list[int], ranks: list[int]) -> np.ndarray:
    out = np.ones((1, 1))
    pos = 0
    for k, n in enumerate(sizes):
        size = ranks[k] * n * ranks[k + 1]
        core = cores[pos : pos + size].reshape(ranks[k], n * ranks[k + 1])
        out = (out @ core).reshape(-1, ranks[k + 1])
        pos += size
    return out.reshape(sizes)


def test_full_rank_tt_svd_is_exact() -> None:
    rng = np.random.default_rng(0)
    sizes, ranks = [3, 4, 2], [1, 3, 2, 1]
    w = rng.standard_normal(sizes).astype(np.float32)
    cores = tt_core.tt_svd(w, np.array(sizes), np.array(ranks))
    assert cores.size == sum(ranks[k] * sizes[k] * ranks[k + 1] for k in range(3))
    np.testing.assert_allclose(_contract(cores, sizes, ranks), w, atol=1e-5)


def test_matrix_to_tt_sizes_and_checks() -> None:
    w = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32)
    cores = tt_core.matrix_to_tt(w, [2, 2], [3, 3], [1, 6, 1])
    assert cores.dtype == np.float32 and cores.size == 2 * 3 * 6 + 6 * 2 * 3
    with pytest.raises(ValueError, match="products"):
        tt_core.matrix_to_tt(w, [2, 3], [3, 3], [1, 6, 1])


def test_full_rank_matrix_to_tt_rebuilds_the_weight() -> None:
    """Undo the TT operator's layout by hand (last core first, each [inp, r_next, r, out]) and
    contract the chain: at full ranks the weight comes back."""
    inp, out, ranks = [2, 3], [2, 2], [1, 4, 1]
    w = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)
    flat = tt_core.matrix_to_tt(w, inp, out, ranks)
    sizes = [ranks[k] * inp[k] * out[k] * ranks[k + 1] for k in range(2)]
    blocks = [flat[sizes[1] :], flat[: sizes[1]]]  # core 0 is stored last
    g = [blocks[k].reshape(inp[k], ranks[k + 1], ranks[k], out[k]).transpose(2, 0, 3, 1) for k in range(2)]
    t = np.einsum("aiob,bjpc->iojp", g[0], g[1])  # (inp_1, out_1, inp_2, out_2)
    rebuilt = t.transpose(0, 2, 1, 3).reshape(w.T.shape).T
    np.testing.assert_allclose(rebuilt, w, atol=1e-5)
