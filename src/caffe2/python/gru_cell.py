"""Caffe2's ``gru_cell``: a GRU step (``GRUCell``) run over a sequence by ``RecurrentNetwork``.

The step: the precomputed input projection ``i2h(x_t)`` [1, N, 3H] is split into reset, update
and output parts; ``r = sigmoid(x_r + reset_gate_t(h))``, the output gate reads
``output_gate_t(r * h)`` (or ``r * output_gate_t(h)`` with ``linear_before_reset``, cuDNN's
form), and ``GRUUnit`` gives ``h_t = u * h + (1 - u) * tanh(x_o + ...)`` with
``u = sigmoid(x_u + update_gate_t(h))``. :func:`GRU` takes :func:`caffe2.python.rnn_cell.LSTM`'s
arguments and returns ``(hidden_all, hidden_last)`` per layer.

    >>> import numpy as np
    >>> from caffe2.python import gru_cell, model_helper, workspace
    >>> m = model_helper.ModelHelper(name="gru_doc")
    >>> h_all, h_last = gru_cell.GRU(m, "x", "lengths", ["h0"], dim_in=3, dim_out=4, scope="gru")
    >>> _ = workspace.RunNetOnce(m.param_init_net)
    >>> _ = workspace.FeedBlob("x", np.zeros((5, 2, 3), np.float32))
    >>> _ = workspace.FeedBlob("h0", np.ones((1, 2, 4), np.float32))
    >>> _ = workspace.FeedBlob("lengths", np.array([5, 0], np.int32)); _ = workspace.RunNetOnce(m.net)
    >>> str(h_all), workspace.FetchBlob(h_all).shape, workspace.FetchBlob(h_last)[0, 1].tolist()
    ('gru/hidden_t_all', (5, 2, 4), [1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

import functools
from typing import Any

from caffe2.python import brew, rnn_cell

__all__ = ["GRU", "GRUCell"]


class GRUCell(rnn_cell.RNNCell):
    """One GRU step on ``GRUUnit`` (``forget_bias`` is accepted and unused, as in Caffe2)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        forget_bias: float,
        memory_optimization: bool,
        drop_states: bool = False,
        linear_before_reset: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.forget_bias = float(forget_bias)
        self.memory_optimization = memory_optimization
        self.drop_states = drop_states
        self.linear_before_reset = linear_before_reset

    def _fc(self, model: Any, blob: Any, name: str) -> Any:
        return brew.fc(model, blob, self.scope(name), dim_in=self.hidden_size, dim_out=self.hidden_size, axis=2)

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        hidden_t_prev = states[0]
        x_reset, x_update, x_output = model.net.Split(
            [input_t], [self.scope(f"input_t_{g}") for g in ("reset", "update", "output")], axis=2
        )
        reset = self._fc(model, hidden_t_prev, "reset_gate_t")
        update = self._fc(model, hidden_t_prev, "update_gate_t")
        reset = model.net.Sum([reset, x_reset], self.scope("reset_gate_t"))
        reset_sigmoid = model.net.Sigmoid(reset, self.scope("reset_gate_t_sigmoid"))
        if self.linear_before_reset:
            output_fc = self._fc(model, hidden_t_prev, "output_gate_t")
            output = model.net.Mul([reset_sigmoid, output_fc], self.scope("output_gate_t_mul"))
        else:
            modified = model.net.Mul([reset_sigmoid, hidden_t_prev], self.scope("modified_hidden_t_prev"))
            output = self._fc(model, modified, "output_gate_t")
        update = model.net.Sum([update, x_update], self.scope("update_gate_t"))
        output = model.net.Sum([output, x_output], self.scope("output_gate_t_summed"))
        gates_t, _ = model.net.Concat(
            [reset, update, output], [self.scope("gates_t"), self.scope("_gates_t_concat_dims")], axis=2
        )
        inputs = [hidden_t_prev, gates_t, *([seq_lengths] if seq_lengths is not None else []), timestep]
        hidden_t = model.net.GRUUnit(
            inputs,
            list(self.get_state_names()),
            forget_bias=self.forget_bias,
            drop_states=self.drop_states,
            sequence_lengths=seq_lengths is not None,
        )
        model.net.AddExternalOutputs(hidden_t)
        return (hidden_t,)

    def prepare_input(self, model: Any, input_blob: Any) -> Any:
        return brew.fc(
            model, input_blob, self.scope("i2h"), dim_in=self.input_size, dim_out=3 * self.hidden_size, axis=2
        )

    def get_state_names(self) -> Any:
        return (self.scope("hidden_t"),)

    def get_output_dim(self) -> int:
        return self.hidden_size


GRU = functools.partial(rnn_cell._LSTM, GRUCell)
