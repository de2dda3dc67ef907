"""Tensor-train (TT) cores for Caffe2's TT layer: :func:`init_tt_cores` draws the cores of a
TT-decomposed weight matrix of shape [prod(inp_sizes), prod(out_sizes)].

    >>> from caffe2.python import tt_core
    >>> cores = tt_core.init_tt_cores([2, 2], [3, 3], [1, 2, 1])
    >>> cores.dtype, cores.shape  # 1*2*3*2 + 2*2*3*1 values
    (dtype('float32'), (24,))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["init_tt_cores"]


def init_tt_cores(
    inp_sizes: Sequence[int], out_sizes: Sequence[int], tt_ranks: Sequence[int], seed: int = 1234
) -> np.ndarray:
    """The cores, flattened one after the other into one float32 vector, as Caffe2 drew them.

    Core k has shape [r_k, inp_k, out_k, r_{k+1}]; it is drawn from N(0, 1) (after
    ``np.random.seed(seed)``), multiplied on the left by the R factor carried from the previous
    core, and made orthonormal by a QR decomposition (all but the last core). The whole vector is
    scaled by 0.1 / (prod(inp_sizes) * prod(tt_ranks)) ** (1 / d), d the number of cores.
    """
    inp, out, ranks = (np.asarray(v, dtype=np.int64) for v in (inp_sizes, out_sizes, tt_ranks))
    d = inp.shape[0]
    if out.shape[0] != d or ranks.shape[0] != d + 1:
        raise ValueError(
            f"expected {d} out_sizes and {d + 1} tt_ranks for {d} inp_sizes, got {out.shape[0]} and {ranks.shape[0]}"
        )
    np.random.seed(seed)
    parts = []
    carry: np.ndarray | int = 1
    for k in range(d):
        r0, r1 = int(ranks[k]), int(ranks[k + 1])
        rest = int(inp[k] * out[k] * r1)
        core = np.dot(carry, np.random.normal(0, 1, size=(r0, rest))).reshape(r0 * int(inp[k] * out[k]), r1)
        if k < d - 1:
            core, carry = np.linalg.qr(core)
        parts.append(core.reshape(-1))
    scale = 0.1 / float(np.prod(inp) * np.prod(ranks)) ** (1.0 / d)
    return scale * np.concatenate(parts).astype(np.float32)
