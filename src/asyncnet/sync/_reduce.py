"""The reduction kernel: one worker's slice of a bucket, in cache-sized blocks.

Every worker calls :func:`reduce_slice` on its own slice of the flat bucket, at the same time,
so the reduction is spread over all cores. Within a block the partial sum ``t`` lives in a
small scratch buffer that stays in cache; the sum is always taken in worker order
(``x0 + x1 + ... + x(n-1)``), then divided by ``n``, so the result does not depend on which
worker arrived first or which worker reduced the slice. Results are written straight into the
target buffers: no full-size temporary exists.

    >>> import numpy as np
    >>> a, b = [np.array([1.0, 2.0])], [np.array([3.0, 6.0])]
    >>> reduce_slice([a, b], [a, b], 0, 2, "mean", 0, {})
    >>> a[0], b[0]
    (array([2., 4.]), array([2., 4.]))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from asyncnet.sync._bucket import segments

BLOCK_BYTES = 256 * 1024


def _scratch(scratch: dict, dtype: np.dtype, n: int) -> np.ndarray:
    buf = scratch.get(dtype)
    if buf is None or buf.size < n:
        buf = scratch[dtype] = np.empty(max(n, BLOCK_BYTES // dtype.itemsize), dtype)
    return buf[:n]


def reduce_slice(
    sources: Sequence[Sequence[np.ndarray]],
    targets: Sequence[Sequence[np.ndarray]],
    lo: int,
    hi: int,
    op: str,
    root: int,
    scratch: dict,
    block_bytes: int = BLOCK_BYTES,
) -> None:
    """Reduce elements ``[lo, hi)`` of the flat bucket.

    ``sources[k][j]`` is worker ``k``'s flat member ``j``; the result goes to every
    ``targets[t][j]`` (which may be the sources themselves). ``op`` is ``"mean"`` or
    ``"broadcast"`` (copy ``sources[root]``). ``scratch`` is the caller's cache of block buffers.
    """
    n = len(sources)
    first = sources[0]
    sizes = [m.size for m in first]
    itemsizes = [m.itemsize for m in first]
    for j, a, b in segments(sizes, itemsizes, lo, hi, block_bytes):
        if op == "broadcast":
            src = sources[root][j][a:b]
            for tgt in targets:
                if tgt[j] is not sources[root][j]:
                    np.copyto(tgt[j][a:b], src)
            continue
        xs = [s[j][a:b] for s in sources]
        if n == 1:
            t = xs[0]
        else:
            t = _scratch(scratch, first[j].dtype, b - a)
            np.add(xs[0], xs[1], out=t)
            for x in xs[2:]:
                np.add(t, x, out=t)
        if len(targets) == 1:
            np.divide(t, n, out=targets[0][j][a:b])
            continue
        np.divide(t, n, out=t)
        for tgt in targets:
            np.copyto(tgt[j][a:b], t)
