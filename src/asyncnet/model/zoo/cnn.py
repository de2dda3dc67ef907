"""A LeNet-style CNN for the 8x8 digits: two Conv + Relu + MaxPool stages, then FC.

>>> from asyncnet.model.zoo import cnn
>>> [p for p in cnn().params if p.endswith("_w")]
['conv1_w', 'conv2_w', 'logits_w']
"""

from __future__ import annotations

from typing import Any

from asyncnet.model.builder import ModelHelper


def cnn(
    channels: tuple[int, int] = (16, 32), num_classes: int = 10, side: int = 8, seed: int = 0, **kw: Any
) -> ModelHelper:
    """Input ``data`` [B, side*side] (reshaped to [B, 1, side, side] in the net), ``label`` [B] int32.
    conv 3x3 pad 1 -> relu -> maxpool 2, twice, then FC to ``num_classes``; SoftmaxWithLoss."""
    m = ModelHelper("cnn", seed=seed, **kw)
    c1, c2 = channels
    img = m.op("Reshape", "data", ["img", "data_shape"], shape=[-1, 1, side, side])[0]
    x = m.max_pool(m.relu(m.conv(img, "conv1", 1, c1, 3, pad=1), "relu1"), "pool1", 2)
    x = m.max_pool(m.relu(m.conv(x, "conv2", c1, c2, 3, pad=1), "relu2"), "pool2", 2)
    flat = m.flatten(x, "flat")
    m.softmax_with_loss(m.fc(flat, "logits", c2 * (side // 4) ** 2, num_classes), "label")
    return m
