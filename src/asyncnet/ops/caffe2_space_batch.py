"""Caffe2's ``SpaceToBatch`` and ``BatchToSpace`` (NCHW), each the other's gradient.

``SpaceToBatch`` zero-pads H and W (``pad``, or ``pad_t``/``pad_l``/``pad_b``/``pad_r``), cuts them
into ``block_size`` x ``block_size`` blocks and moves the position inside a block to the batch:
an (N, C, H, W) input becomes (N * b * b, C, (H + pads) / b, (W + pads) / b), output image
``(i * b + j) * N + n`` holding the pixels of image n at rows ``i::b`` and columns ``j::b``
(TensorFlow's ``space_to_batch`` order). ``BatchToSpace`` is its inverse and crops the padding.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    >>> net = an.Net("s2b"); _ = net.SpaceToBatch("x", "y", block_size=2)
    >>> _ = net.BatchToSpace("y", "z", block_size=2)
    >>> ws.run_net_once(net); ws.fetch("y")[:, 0, 0, 0], bool((ws.fetch("z") == ws.fetch("x")).all())
    (array([0., 1., 4., 5.], dtype=float32), True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array

__all__: list[str] = []  # the ops are reached through the registry

_ARGS = [
    Arg("pad", int, 0, "padding on all four sides of H and W"),
    Arg("pad_t", int, -1, "padding above (default: pad)"),
    Arg("pad_l", int, -1, "padding on the left (default: pad)"),
    Arg("pad_b", int, -1, "padding below (default: pad)"),
    Arg("pad_r", int, -1, "padding on the right (default: pad)"),
    Arg("block_size", int, 2, "the height and width of a block"),
    Arg("order", str, "NCHW", "the layout; only NCHW"),
]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _settings(ctx: Any, x: np.ndarray) -> tuple[int, tuple[int, int, int, int]]:
    """The block size and the (top, left, bottom, right) padding, checked."""
    a = ctx.args
    if a["order"] != "NCHW":
        raise ValueError(f"expected order 'NCHW' (the only layout supported), got {a['order']!r}")
    if x.ndim != 4:
        raise ValueError(f"expected a 4-D (N, C, H, W) input {ctx.op.inputs[0]!r}, got shape {x.shape}")
    block = a["block_size"]
    if block < 1:
        raise ValueError(f"expected block_size >= 1, got {block}")
    pads = tuple(a["pad"] if a[k] < 0 else a[k] for k in ("pad_t", "pad_l", "pad_b", "pad_r"))
    if min(pads) < 0:
        raise ValueError(f"expected non-negative paddings, got (t, l, b, r) = {pads}")
    return block, pads  # type: ignore[return-value]


def space_to_batch(x: np.ndarray, block: int, pads: tuple[int, int, int, int]) -> np.ndarray:
    """The NCHW ``SpaceToBatch`` of ``x``. Example: ``space_to_batch(x, 2, (0, 0, 0, 0))``."""
    top, left, bottom, right = pads
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, w = padded.shape
    if h % block or w % block:
        raise ValueError(f"expected the padded height {h} and width {w} to be multiples of block_size {block}")
    blocks = padded.reshape(n, c, h // block, block, w // block, block)
    return blocks.transpose(3, 5, 0, 1, 2, 4).reshape(block * block * n, c, h // block, w // block)


def batch_to_space(y: np.ndarray, block: int, pads: tuple[int, int, int, int]) -> np.ndarray:
    """The NCHW ``BatchToSpace`` of ``y`` (the inverse of :func:`space_to_batch`)."""
    top, left, bottom, right = pads
    nb, c, hb, wb = y.shape
    if nb % (block * block):
        raise ValueError(f"expected a batch that is a multiple of block_size^2 = {block * block}, got {nb}")
    n = nb // (block * block)
    h, w = hb * block, wb * block
    if top + bottom > h or left + right > w:
        raise ValueError(f"expected paddings (t, l, b, r) = {pads} to fit in the {h} x {w} image")
    full = y.reshape(block, block, n, c, hb, wb).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h, w)
    return np.ascontiguousarray(full[:, :, top : h - bottom, left : w - right])


@register_op(
    "SpaceToBatch",
    args=_ARGS,
    inputs_doc=("X (N, C, H, W)",),
    outputs_doc=("Y (N * b * b, C, (H + pads) / b, (W + pads) / b)",),
    doc="Zero-pads H and W, then moves each position inside a block_size block to the batch.",
)
def space_to_batch_op(ctx: Any, x: Any) -> np.ndarray:
    x = _np(array(ctx, x, 0))
    block, pads = _settings(ctx, x)
    return space_to_batch(x, block, pads)


@register_op(
    "BatchToSpace",
    args=_ARGS,
    inputs_doc=("X (N * b * b, C, h, w)",),
    outputs_doc=("Y (N, C, h * b - pads, w * b - pads)",),
    doc="The inverse of SpaceToBatch: the batch blocks back into H and W, the padding cropped.",
)
def batch_to_space_op(ctx: Any, x: Any) -> np.ndarray:
    x = _np(array(ctx, x, 0))
    block, pads = _settings(ctx, x)
    return batch_to_space(x, block, pads)


def _inverse(grad_type: str) -> Any:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None]
        return [OperatorDef(grad_type, [gout[0]], ["#dx"], dict(op.args))], ["#dx"]

    return maker


register_gradient("SpaceToBatch")(_inverse("BatchToSpace"))
register_gradient("BatchToSpace")(_inverse("SpaceToBatch"))
