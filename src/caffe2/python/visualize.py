"""Caffe2's ``visualize``: show image batches with matplotlib (``visualize.NCHW.ShowMultiple(data)``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["NCHW", "NHWC", "ChannelFirst", "ChannelLast", "PatchVisualizer"]


class PatchVisualizer:
    """Tiles a batch of images [N, H, W, C] into one picture and shows it."""

    def __init__(self, gap: int = 1):
        self.gap = gap

    def get_patch_shape(self, patch: np.ndarray) -> tuple[int, ...]:
        return patch.shape[:2]

    def ShowSingle(self, patch: np.ndarray, cmap: Any = None) -> Any:
        from matplotlib import pyplot

        p = np.asarray(patch)
        if p.ndim == 3 and p.shape[2] == 1:
            p = p[:, :, 0]
        pyplot.axis("off")
        return pyplot.imshow(p, cmap=cmap or ("gray" if p.ndim == 2 else None), interpolation="nearest")

    def ShowMultiple(
        self, patches: np.ndarray, ncols: int | None = None, cmap: Any = None, bg_func: Callable[..., Any] = np.mean
    ) -> Any:
        return PatchVisualizer.ShowSingle(self, self.get_tiled(patches, ncols, bg_func), cmap)

    def get_tiled(
        self, patches: np.ndarray, ncols: int | None = None, bg_func: Callable[..., Any] = np.mean
    ) -> np.ndarray:
        p = np.asarray(patches, dtype=np.float64)
        n, h, w, c = p.shape
        ncols = ncols or int(np.ceil(np.sqrt(n)))
        nrows = int(np.ceil(n / ncols))
        g = self.gap
        out = np.full((nrows * (h + g) - g, ncols * (w + g) - g, c), bg_func(p) if p.size else 0.0)
        for i in range(n):
            r, col = divmod(i, ncols)
            out[r * (h + g) : r * (h + g) + h, col * (w + g) : col * (w + g) + w] = p[i]
        return out


class ChannelLast(PatchVisualizer):
    """Batches stored [N, H, W, C]."""


class ChannelFirst(PatchVisualizer):
    """Batches stored [N, C, H, W]."""

    def ShowSingle(self, patch: np.ndarray, cmap: Any = None) -> Any:
        return super().ShowSingle(np.asarray(patch).transpose(1, 2, 0), cmap)

    def ShowMultiple(
        self, patches: np.ndarray, ncols: int | None = None, cmap: Any = None, bg_func: Callable[..., Any] = np.mean
    ) -> Any:
        return super().ShowMultiple(np.asarray(patches).transpose(0, 2, 3, 1), ncols, cmap, bg_func)


NCHW = ChannelFirst()
NHWC = ChannelLast()
