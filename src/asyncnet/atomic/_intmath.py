"""Fixed-width integer rules shared by the in-process and shared-memory atomics.

Arithmetic (``fetch_add``/``add_fetch``) wraps around in two's complement, exactly like
C++ ``std::atomic<int32_t/int64_t>::fetch_add``; a value that is *stored* explicitly
(``store``, ``exchange``, ``compare_exchange``'s ``desired``, the initial value) must fit,
otherwise ``OverflowError``.

    >>> wrap(2**31, 32)
    -2147483648
"""

from __future__ import annotations

import operator

BITS = (32, 64)


def check_bits(bits: int) -> int:
    """Return ``bits`` if it is 32 or 64, else raise ``ValueError``."""
    if bits not in BITS:
        raise ValueError(f"bits must be 32 or 64, got {bits!r}")
    return bits


def as_int(value: object, what: str) -> int:
    """Return ``value`` as a Python int (accepts numpy integers), or raise ``TypeError``."""
    if isinstance(value, bool):
        return int(value)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None


def wrap(value: int, bits: int) -> int:
    """Reduce ``value`` modulo 2**bits into the signed range (two's complement)."""
    half = 1 << (bits - 1)
    return ((value + half) & ((1 << bits) - 1)) - half


def check_fits(value: object, bits: int, what: str = "value") -> int:
    """Return ``value`` as an int if it fits a signed ``bits``-bit integer, else raise."""
    v = as_int(value, what)
    half = 1 << (bits - 1)
    if not -half <= v < half:
        raise OverflowError(f"{what} {v} does not fit a signed {bits}-bit integer [{-half}, {half - 1}]")
    return v
