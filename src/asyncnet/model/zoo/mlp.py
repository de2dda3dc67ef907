"""An MLP classifier: FC + Relu layers, then SoftmaxWithLoss on ``label``.

>>> from asyncnet.model.zoo import mlp
>>> mlp(64, (32,), 10).params
['fc1_w', 'fc1_b', 'fc2_w', 'fc2_b']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asyncnet.model.builder import ModelHelper


def mlp(input_dim: int, hidden: Sequence[int] = (64,), num_classes: int = 10, seed: int = 0, **kw: Any) -> ModelHelper:
    """Inputs ``data`` [B, input_dim], ``label`` [B] int32; outputs ``softmax``, ``loss``, ``accuracy``.
    What ``asyncnet train --model mlp`` trains (as an :class:`asyncnet.train.Program`)."""
    m = ModelHelper("mlp", seed=seed, **kw)
    dims = [input_dim, *hidden, num_classes]
    x = "data"
    for i, (d_in, d_out) in enumerate(zip(dims, dims[1:]), 1):
        last = i == len(dims) - 1
        x = m.fc(x, f"fc{i}", d_in, d_out, output="logits" if last else None)
        if not last:
            x = m.relu(x, f"relu{i}")
    m.softmax_with_loss(x, "label")
    return m
