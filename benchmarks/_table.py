"""Cells of the benchmarks' printed tables.

>>> cell(None, ".2f"), cell(1.234, ".2f")
('-', '1.23')
"""

from __future__ import annotations

from typing import Any

__all__ = ["cell"]


def cell(v: Any, spec: str) -> str:
    """``v`` formatted with ``spec``, or "-" for a figure the run does not have."""
    return "-" if v is None else format(v, spec)
