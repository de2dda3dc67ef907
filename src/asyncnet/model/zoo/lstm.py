"""An LSTM classifier reading a digit row by row: 8 steps of 8 features, LSTM, then FC on h_T.

>>> from asyncnet.model.zoo import lstm
>>> lstm(hidden=16).shapes["rnn_w_ih"]
(64, 8)
"""

from __future__ import annotations

from typing import Any

from asyncnet.model.builder import ModelHelper


def lstm(
    hidden: int = 32, num_classes: int = 10, steps: int = 8, features: int = 8, seed: int = 0, **kw: Any
) -> ModelHelper:
    """Input ``data`` [B, steps*features] (row-major image), ``label`` [B] int32. The net reshapes
    it to [B, steps, features], makes it sequence-first, runs one LSTM layer and an FC on h_T."""
    m = ModelHelper("lstm", seed=seed, **kw)
    rows = m.op("Reshape", "data", ["rows", "data_shape"], shape=[-1, steps, features])[0]
    seq = m.op("Transpose", rows, "seq", axes=[1, 0, 2])
    _, h_t = m.lstm(seq, "rnn", features, hidden)
    m.softmax_with_loss(m.fc(h_t, "logits", hidden, num_classes), "label")
    return m
