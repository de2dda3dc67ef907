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

__all__ = ["init_tt_cores", "matrix_to_tt", "tt_svd"]


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


def matrix_to_tt(
    W: np.ndarray, inp_sizes: Sequence[int], out_sizes: Sequence[int], tt_ranks: Sequence[int]
) -> np.ndarray:
    """The TT cores of a trained FC weight ``W`` ([prod(inp_sizes), prod(out_sizes)]), laid out
    for Caffe2's ``TT`` operator (each core as [inp_k, r_{k+1}, r_k, out_k], last core first).

    The decomposition is :func:`tt_svd` of ``W``'s transpose with its input and output axes
    interleaved; with full ranks it is exact, with smaller ranks it is the truncated SVD chain.
    """
    if len(inp_sizes) != len(out_sizes):
        raise ValueError(f"{len(inp_sizes)} input sizes but {len(out_sizes)} output sizes")
    if len(tt_ranks) != len(inp_sizes) + 1:
        raise ValueError(f"expected {len(inp_sizes) + 1} tt_ranks, got {len(tt_ranks)}")
    if W.shape[0] != np.prod(inp_sizes) or W.shape[1] != np.prod(out_sizes):
        raise ValueError(
            f"W has shape {W.shape}; expected [{int(np.prod(inp_sizes))}, {int(np.prod(out_sizes))}] "
            "(the products of inp_sizes and out_sizes)"
        )
    inp, out, ranks = [int(n) for n in inp_sizes], [int(n) for n in out_sizes], [int(r) for r in tt_ranks]
    d = len(inp)
    # W's transpose, read as a tensor (inp_1..inp_d, out_1..out_d), with the axes interleaved
    # (inp_1, out_1, inp_2, ...), then each (inp_k, out_k) pair merged into one mode.
    modes = np.asarray(W).T.reshape(inp + out)
    modes = modes.transpose([axis for k in range(d) for axis in (k, d + k)])
    modes = modes.reshape([i * o for i, o in zip(inp, out)])
    flat = tt_svd(modes, np.array([i * o for i, o in zip(inp, out)]), np.array(ranks))
    blocks, start = [], 0
    for k in range(d):
        shape = (ranks[k], inp[k], out[k], ranks[k + 1])
        stop = start + int(np.prod(shape))
        blocks.append(flat[start:stop].reshape(shape).transpose(1, 3, 0, 2).ravel())
        start = stop
    return np.concatenate(blocks[::-1]).astype(np.float32)


def tt_svd(W: np.ndarray, sizes: np.ndarray, tt_ranks: np.ndarray) -> np.ndarray:
    """TT-SVD: core k (shape [r_k, sizes[k], r_{k+1}], flattened and concatenated) is the left
    factor of a reduced SVD truncated to rank r_{k+1}; the rest is carried to the next core."""
    sizes, ranks = [int(n) for n in sizes], [int(r) for r in tt_ranks]
    if len(ranks) != len(sizes) + 1:
        raise ValueError(f"expected {len(sizes) + 1} tt_ranks, got {len(ranks)}")
    pieces, carry = [], np.asarray(W)
    for k, n in enumerate(sizes[:-1]):
        u, s, vt = np.linalg.svd(carry.reshape(ranks[k] * n, -1), full_matrices=False)
        r = ranks[k + 1]
        if u.shape[1] < r:
            raise ValueError(f"tt_ranks[{k + 1}]={r} exceeds the {u.shape[1]} singular values of core {k}")
        pieces.append(u[:, :r])
        carry = s[:r, None] * vt[:r]
    if carry.size != ranks[-2] * sizes[-1] * ranks[-1]:
        raise ValueError(f"the last core has {carry.size} values; tt_ranks and sizes give another count")
    pieces.append(carry)
    return np.concatenate([p.ravel() for p in pieces]).astype(np.float32)
