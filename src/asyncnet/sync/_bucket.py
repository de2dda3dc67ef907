"""A gradient bucket: what ``sync_gradients`` receives, seen as flat numpy views.

``grads`` may be one float numpy array, one CPU torch tensor, or a list of them; a list is one
flat bucket (the concatenation of its members, in order). :func:`open_bucket` returns 1-D views
that share memory with the caller's arrays, so a backend reduces straight into them. A
non-contiguous member is the one exception: it is staged through a contiguous copy, which
:meth:`Bucket.close` writes back.

torch is never imported here: a tensor is recognised by its type's module and converted with
``tensor.detach().numpy()``, which shares memory.

    >>> import numpy as np
    >>> b = open_bucket([np.ones(3, np.float32), np.zeros((2, 2))])
    >>> b.layout
    (('float32', (3,)), ('float64', (2, 2)))
    >>> b.size
    7
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Layout = tuple[tuple[str, tuple[int, ...]], ...]

_FLOAT_KINDS = ("f",)
_NAMES: dict[np.dtype, str] = {}


def is_torch_tensor(x: Any) -> bool:
    """True when ``x`` is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "numpy")


def _as_numpy(x: Any, index: int) -> np.ndarray:
    if isinstance(x, np.ndarray):
        arr = x
    elif is_torch_tensor(x):
        if x.device.type != "cpu":
            raise TypeError(
                f"gradient {index} is a torch tensor on {x.device}; this backend reduces CPU memory "
                "(use TorchDistributedGradientSync for CUDA tensors)"
            )
        try:
            arr = x.detach().numpy()
        except TypeError as exc:  # bfloat16 and friends have no numpy dtype
            raise TypeError(f"gradient {index} has torch dtype {x.dtype}, which numpy cannot view") from exc
    else:
        raise TypeError(f"gradient {index}: expected a float numpy array or torch tensor, got {type(x).__name__}")
    if arr.dtype.kind not in _FLOAT_KINDS:
        raise TypeError(f"gradient {index}: expected a floating-point dtype, got {arr.dtype}")
    if not arr.dtype.isnative:
        raise TypeError(f"gradient {index}: expected native byte order, got {arr.dtype.str}")
    if not arr.flags.writeable:
        raise ValueError(f"gradient {index} is read-only; sync_gradients writes the mean in place")
    return arr


def as_list(grads: Any) -> list[Any]:
    """The members of a bucket: a list or tuple as is, anything else as a one-member list."""
    return list(grads) if isinstance(grads, (list, tuple)) else [grads]


@dataclass
class Bucket:
    """Flat 1-D views of every member, their layout, and copies to write back on close."""

    views: list[np.ndarray]
    layout: Layout
    _writeback: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Total number of elements."""
        return sum(v.size for v in self.views)

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.views)

    def digest(self, tag: str = "") -> int:
        """A 63-bit fingerprint of the layout (and ``tag``), to compare buckets across workers."""
        import hashlib  # once per bucket layout

        h = hashlib.blake2b(repr((tag, self.layout)).encode(), digest_size=8).digest()
        return int.from_bytes(h, "little") >> 1

    def close(self) -> None:
        """Write staged copies of non-contiguous members back into the caller's arrays."""
        for target, staged in self._writeback:
            target[...] = staged.reshape(target.shape)
        self._writeback.clear()


def open_bucket(grads: Any) -> Bucket:
    """Flat views of ``grads`` (an array, a tensor, or a list of them); see the module doc."""
    members = as_list(grads)
    views: list[np.ndarray] = []
    layout = []
    writeback = []
    for i, g in enumerate(members):
        arr = _as_numpy(g, i)
        dt = arr.dtype
        name = _NAMES.get(dt)
        if name is None:  # dtype.name is slow (Python code in numpy 2): once per dtype
            name = _NAMES[dt] = dt.name
        layout.append((name, arr.shape))
        if arr.flags.c_contiguous:
            views.append(arr.reshape(-1))
        else:
            staged = np.ascontiguousarray(arr)
            writeback.append((arr, staged))
            views.append(staged.reshape(-1))
    return Bucket(views, tuple(layout), writeback)


def format_layout(layout: Sequence[tuple[str, tuple[int, ...]]]) -> str:
    """Human form of a layout: ``float32[4]`` or ``[float32[4], float64[2x3]]``."""
    parts = [f"{dt}[{'x'.join(map(str, shape)) if shape else ''}]" for dt, shape in layout]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def slice_bounds(total: int, parts: int, index: int, align: int = 16) -> tuple[int, int]:
    """The ``index``-th of ``parts`` contiguous slices of ``range(total)``, cut at ``align``.

    Alignment keeps two workers from writing the same cache line.

        >>> [slice_bounds(1000, 3, i) for i in range(3)]
        [(0, 336), (336, 672), (672, 1000)]
    """
    if total <= 0:
        return (0, 0)
    per = -(-total // parts)
    per = -(-per // align) * align
    lo = min(total, index * per)
    hi = min(total, lo + per)
    return lo, hi


def segments(sizes: Sequence[int], itemsizes: Sequence[int], lo: int, hi: int, block_bytes: int):
    """Yield ``(member, start, stop)`` pieces of the flat range ``[lo, hi)``, each at most
    ``block_bytes`` long, so a piece and its partial sum stay in cache."""
    offset = 0
    for j, n in enumerate(sizes):
        a, b = max(lo, offset), min(hi, offset + n)
        block = max(1, block_bytes // itemsizes[j])
        for s in range(a, b, block):
            yield j, s - offset, min(b, s + block) - offset
        offset += n
        if offset >= hi:
            break
