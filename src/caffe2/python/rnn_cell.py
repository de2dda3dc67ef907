"""Caffe2's ``rnn_cell``: recurrent cells run over a sequence by one ``RecurrentNetwork`` op.

A cell builds one timestep into a step net (``LSTMCell``: an FC of the previous hidden state
added to the precomputed input projection, then ``LSTMUnit``, gates in Caffe2's order i, f, o,
g, with ``forget_bias`` and ``seq_lengths``/``drop_states`` as LSTMUnit takes them);
:meth:`RNNCell.apply_over_sequence` hands it to :func:`caffe2.python.recurrent.recurrent_net`.
:func:`LSTM` and :func:`BasicRNN` build one layer or, with a list of sizes, a
:class:`MultiRNNCell`. Names are Caffe2's: with ``scope="lstm"`` the parameters are
``lstm/i2h_w`` ``[4H, D]``, ``lstm/i2h_b``, ``lstm/gates_t_w`` ``[4H, H]``, ``lstm/gates_t_b``,
and the outputs ``lstm/hidden_state_all`` ``[T, N, H]``, ``lstm/hidden_state_last``
``[1, N, H]``, ``lstm/cell_state_all``, ``lstm/cell_state_last``.

    >>> import numpy as np
    >>> from caffe2.python import model_helper, rnn_cell, workspace
    >>> m = model_helper.ModelHelper(name="lstm_doc")
    >>> outs = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), dim_in=3, dim_out=4, scope="lstm", forget_bias=1.0)
    >>> [str(o) for o in outs]
    ['lstm/hidden_state_all', 'lstm/hidden_state_last', 'lstm/cell_state_all', 'lstm/cell_state_last']
    >>> _ = workspace.RunNetOnce(m.param_init_net)
    >>> for name, shape in (("x", (5, 2, 3)), ("h0", (1, 2, 4)), ("c0", (1, 2, 4))):
    ...     _ = workspace.FeedBlob(name, np.zeros(shape, np.float32))
    >>> _ = workspace.FeedBlob("lengths", np.full(2, 5, np.int32)); _ = workspace.RunNetOnce(m.net)
    >>> workspace.FetchBlob("lstm/hidden_state_all").shape, workspace.FetchBlob("lstm/cell_state_last").shape
    ((5, 2, 4), (1, 2, 4))
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np

from caffe2.python import brew, core, recurrent, scope, workspace
from caffe2.python.attention import (
    AttentionType,
    apply_dot_attention,
    apply_recurrent_attention,
    apply_regular_attention,
)
from caffe2.python.model_helper import ModelHelper
from caffe2.python.modeling.initializers import Initializer

__all__ = [
    "AttentionCell",
    "BasicRNN",
    "BasicRNNCell",
    "DropoutCell",
    "GetLSTMParamNames",
    "InitFromLSTMParams",
    "LSTM",
    "LSTMCell",
    "LSTMInitializer",
    "LSTMWithAttention",
    "LSTMWithAttentionCell",
    "LayerNormLSTM",
    "UnrolledCell",
    "LayerNormLSTMCell",
    "LayerNormMILSTM",
    "LayerNormMILSTMCell",
    "MILSTM",
    "MILSTMCell",
    "MILSTMWithAttentionCell",
    "MultiRNNCell",
    "MultiRNNCellInitializer",
    "RNNCell",
]


def _RectifyName(blob: Any) -> Any:
    if blob is None:
        return None
    if isinstance(blob, str):
        return core.ScopedBlobReference(blob)
    if not isinstance(blob, core.BlobReference):
        raise TypeError(f"expected a blob name or BlobReference, got {type(blob).__name__}")
    return blob


def _RectifyNames(blobs: Any) -> Any:
    return None if blobs is None else [_RectifyName(b) for b in blobs]


class RNNCell:
    """A recurrent cell: :meth:`apply_override` (or ``_apply``) builds one step; the base class
    runs it over a sequence (:meth:`apply_over_sequence`) or applies it once (:meth:`apply`)."""

    def __init__(self, name: str | None = None, forward_only: bool = False, initializer: Any = None):
        self.name = name
        self.recompute_blobs: list[Any] = []
        self.forward_only = forward_only
        self._initializer = initializer

    @property
    def initializer(self) -> Any:
        return self._initializer

    @initializer.setter
    def initializer(self, value: Any) -> None:
        self._initializer = value

    def scope(self, name: str) -> str:
        return self.name + "/" + name if self.name is not None else name

    def apply_over_sequence(
        self,
        model: Any,
        inputs: Any,
        seq_lengths: Any = None,
        initial_states: Any = None,
        outputs_with_grads: Any = None,
    ) -> tuple[Any, Any]:
        """Run the cell over ``inputs`` [T, N, D]; returns (output sequence, (state_all,
        state_last) for each state)."""
        if initial_states is None:
            with scope.NameScope(self.name):
                if self.initializer is None:
                    raise ValueError("Either initial states or initializer have to be set")
                initial_states = self.initializer.create_states(model)
        preprocessed = self.prepare_input(model, inputs)
        step_model = ModelHelper(name=self.name, param_model=model)
        input_t, timestep = step_model.net.AddScopedExternalInputs("input_t", "timestep")
        names = self.get_state_names()
        if len(initial_states) != len(names):
            raise ValueError(f"expected {len(names)} initial states ({list(names)}), got {len(initial_states)}")
        states_prev = step_model.net.AddScopedExternalInputs(*[s + "_prev" for s in names])
        states = self._apply(
            model=step_model, input_t=input_t, seq_lengths=seq_lengths, states=states_prev, timestep=timestep
        )
        external = set(step_model.net.Proto().external_output)
        for state in states:
            if str(state) not in external:
                step_model.net.AddExternalOutput(state)
        if outputs_with_grads is None:
            outputs_with_grads = [self.get_output_state_index() * 2]
        all_states = recurrent.recurrent_net(
            net=model.net,
            cell_net=step_model.net,
            inputs=[(input_t, preprocessed)],
            initial_cell_inputs=list(zip(states_prev, initial_states)),
            links=dict(zip(map(str, states_prev), states)),
            timestep=timestep,
            scope=self.name,
            forward_only=self.forward_only,
            outputs_with_grads=outputs_with_grads,
            recompute_blobs_on_backward=self.recompute_blobs,
        )
        return self._prepare_output_sequence(model, all_states), all_states

    def apply(self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any) -> tuple[Any, Any]:
        """One step in ``model``'s net; returns (output, new states)."""
        input_t = self.prepare_input(model, input_t)
        states = self._apply(model, input_t, seq_lengths, states, timestep)
        return self._prepare_output(model, states), states

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        args = self._rectify_apply_inputs(input_t, seq_lengths, states, timestep, extra_inputs)
        with core.NameScope(self.name):
            return self.apply_override(model, *args)

    def _rectify_apply_inputs(
        self, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any
    ) -> list[Any]:
        input_t, seq_lengths, timestep = _RectifyNames([input_t, seq_lengths, timestep])
        states = _RectifyNames(states)
        if extra_inputs:
            blobs, sizes = zip(*extra_inputs)
            extra_inputs = list(zip(_RectifyNames(blobs), sizes))
        rectified = [input_t, seq_lengths, states, timestep]
        if "extra_inputs" in inspect.signature(self.apply_override).parameters:
            rectified.append(extra_inputs)
        return rectified

    def apply_override(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        """One step of the cell (each cell implements it)."""
        raise NotImplementedError("Abstract method")

    def prepare_input(self, model: Any, input_blob: Any) -> Any:
        """Work on the whole input sequence done before the recurrence (an input projection)."""
        return input_blob

    def get_output_state_index(self) -> int:
        return 0

    def get_state_names(self) -> Any:
        return [self.scope(name) for name in self.get_state_names_override()]

    def get_state_names_override(self) -> Any:
        raise NotImplementedError("Abstract method")

    def get_output_dim(self) -> int:
        raise NotImplementedError("Abstract method")

    def _prepare_output(self, model: Any, states: Any) -> Any:
        return states[self.get_output_state_index()]

    def _prepare_output_sequence(self, model: Any, state_outputs: Any) -> Any:
        return state_outputs[2 * self.get_output_state_index()]


class UnrolledCell(RNNCell):
    """``cell`` over a sequence of a fixed length ``T`` as ``T`` copies of its step in the outer
    net (no RecurrentNetwork op): step t's blobs live under the name scope ``timestep_<t>``, its
    parameters outside it, so every step shares them; returns what
    :meth:`RNNCell.apply_over_sequence` returns.

    Example: ``rnn_cell.UnrolledCell(rnn_cell.LSTMCell(4, 8, name="l"), T=5)``.
    """

    def __init__(self, cell: RNNCell, T: int):
        super().__init__(name=cell.name, forward_only=cell.forward_only)
        self.cell = cell
        self.T = T

    def apply_over_sequence(
        self,
        model: Any,
        inputs: Any,
        seq_lengths: Any = None,
        initial_states: Any = None,
        outputs_with_grads: Any = None,
    ) -> tuple[Any, Any]:
        if initial_states is None:
            raise ValueError("UnrolledCell needs initial_states")
        prepared = self.cell.prepare_input(model, inputs)
        step_inputs = self._split_steps(model, prepared)
        states = [_outer_blob(b) for b in initial_states]
        seq_lengths = _outer_blob(seq_lengths)
        history = []
        for t, input_t in enumerate(step_inputs):
            states = self._unrolled_step(model, t, input_t, seq_lengths, states)
            history.append(states)
        sequences = [self._join_steps(model, per_step) for per_step in zip(*history)]
        outputs = tuple(blob for pair in zip(sequences, states) for blob in pair)
        if outputs_with_grads is None:
            outputs_with_grads = [2 * self.cell.get_output_state_index()]
        for i, blob in enumerate(outputs):
            if i not in outputs_with_grads:
                model.net.ZeroGradient(blob, [])
        return self.cell._prepare_output_sequence(model, outputs), outputs

    def _split_steps(self, model: Any, prepared: Any) -> list[Any]:
        names = [core.BlobReference(f"{prepared}_timestep_{t}") for t in range(self.T)]
        pieces = model.net.Split(prepared, names, axis=0)
        return [pieces] if self.T == 1 else list(pieces)

    def _unrolled_step(self, model: Any, t: int, input_t: Any, seq_lengths: Any, states: list[Any]) -> list[Any]:
        with scope.NameScope(f"timestep_{t}"), _params_outside(model, scope.CurrentNameScope()):
            timestep = model.param_init_net.ConstantFill([], "timestep", value=t, shape=[1], dtype=core.DataType.INT32)
            return list(self.cell._apply(model, input_t, seq_lengths, states, timestep))

    @staticmethod
    def _join_steps(model: Any, per_step: tuple[Any, ...]) -> Any:
        base = str(per_step[0]).replace("timestep_0/", "", 1)
        outputs = [core.BlobReference(base + "_concat"), core.BlobReference(base + "_concat_info")]
        return model.net.Concat(list(per_step), outputs, axis=0)[0]


def _outer_blob(blob: Any) -> Any:
    """A string names a blob under the current name scope (as an op input would); others as they are."""
    return core.ScopedBlobReference(blob) if isinstance(blob, str) else blob


class _params_outside:
    """Within it, ``model.create_param`` names a parameter as if the last component of the name
    scope ``inner`` (a timestep's) were absent, so every timestep creates the same parameters
    (what Caffe2's ParameterSharing({"timestep_<t>": ""}) does)."""

    def __init__(self, model: Any, inner: str):
        self.model, self.inner = model, inner
        self.outer = inner[: inner.rstrip("/").rfind("/") + 1]

    def __enter__(self) -> None:
        create = type(self.model).create_param
        inner, outer = self.inner, self.outer

        def create_shared(param_name: Any, *args: Any, **kwargs: Any) -> Any:
            current = scope.CurrentNameScope()
            if not isinstance(param_name, core.BlobReference) and current.startswith(inner):
                param_name = core.BlobReference(outer + current[len(inner) :] + str(param_name))
            return create(self.model, param_name, *args, **kwargs)

        self.model.create_param = create_shared

    def __exit__(self, *exc: Any) -> None:
        del self.model.create_param


class LSTMInitializer:
    """Initial hidden and cell states as parameters (zeros, ``[hidden_size]``)."""

    def __init__(self, hidden_size: int):
        self.hidden_size = hidden_size

    def create_states(self, model: Any) -> list[Any]:
        return [
            model.create_param(
                param_name=name,
                initializer=Initializer(operator_name="ConstantFill", value=0.0),
                shape=[self.hidden_size],
            )
            for name in ("initial_hidden_state", "initial_cell_state")
        ]


class BasicRNNCell(RNNCell):
    """``h_t = activation(i2h(x_t) + gates_t(h_{t-1}))`` (tanh or relu), as torch.nn.RNNCell."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        forget_bias: float,
        memory_optimization: bool,
        drop_states: bool = False,
        initializer: Any = None,
        activation: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.drop_states = drop_states
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.activation = activation
        if self.activation not in ("relu", "tanh"):
            raise RuntimeError(f"BasicRNNCell with unknown activation function ({self.activation})")

    def apply_override(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        hidden_t_prev = states[0]
        gates_t = brew.fc(model, hidden_t_prev, "gates_t", dim_in=self.hidden_size, dim_out=self.hidden_size, axis=2)
        brew.sum(model, [gates_t, input_t], gates_t)
        act = model.net.Tanh if self.activation == "tanh" else model.net.Relu
        # with seq_lengths the masked state is hidden_t, so the activation (whose gradient reads
        # it) gets a blob of its own rather than being overwritten in place
        hidden_t = act(gates_t, "hidden_t" if seq_lengths is None else "hidden_t_unmasked")
        if seq_lengths is not None:
            timestep = model.net.CopyFromCPUInput(timestep, "timestep_gpu")
            valid_b = model.net.GT([seq_lengths, timestep], "valid_b", broadcast=1)
            invalid_b = model.net.LE([seq_lengths, timestep], "invalid_b", broadcast=1)
            valid = model.net.Cast(valid_b, "valid", to="float", from_type="bool")
            invalid = model.net.Cast(invalid_b, "invalid", to="float", from_type="bool")
            hidden_valid = model.net.Mul([hidden_t, valid], "hidden_valid", broadcast=1, axis=1)
            if self.drop_states:
                hidden_t = hidden_valid
            else:
                hidden_invalid = model.net.Mul([hidden_t_prev, invalid], "hidden_invalid", broadcast=1, axis=1)
                hidden_t = model.net.Add([hidden_valid, hidden_invalid], "hidden_t")
        return (hidden_t,)

    def prepare_input(self, model: Any, input_blob: Any) -> Any:
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size, dim_out=self.hidden_size, axis=2)

    def get_state_names(self) -> Any:
        return (self.scope("hidden_t"),)

    def get_output_dim(self) -> int:
        return self.hidden_size


class LSTMCell(RNNCell):
    """Caffe2's LSTM step: ``gates = i2h(x_t) + gates_t(h_{t-1})`` then ``LSTMUnit`` (gate order
    i, f, o, g; ``forget_bias`` added to f; sequences past ``seq_lengths`` keep their state, or
    zero it with ``drop_states``)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        forget_bias: float,
        memory_optimization: bool,
        drop_states: bool = False,
        initializer: Any = None,
        **kwargs: Any,
    ):
        super().__init__(initializer=initializer, **kwargs)
        self.initializer = initializer or LSTMInitializer(hidden_size=hidden_size)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.forget_bias = float(forget_bias)
        self.memory_optimization = memory_optimization
        self.drop_states = drop_states
        self.gates_size = 4 * self.hidden_size

    def _gates(self, model: Any, input_t: Any, hidden_t_prev: Any, extra_inputs: Any, name: str) -> Any:
        fc_input, fc_input_dim = hidden_t_prev, self.hidden_size
        if extra_inputs:
            blobs, sizes = zip(*extra_inputs)
            fc_input = brew.concat(model, [hidden_t_prev, *blobs], name("gates_concatenated_input_t"), axis=2)
            fc_input_dim += sum(sizes)
        gates_t = brew.fc(model, fc_input, name("gates_t"), dim_in=fc_input_dim, dim_out=self.gates_size, axis=2)
        brew.sum(model, [gates_t, input_t], gates_t)
        return gates_t

    def _unit(self, model: Any, gates_t: Any, states: Any, seq_lengths: Any, timestep: Any, outputs: Any) -> Any:
        hidden_t_prev, cell_t_prev = states
        inputs = [hidden_t_prev, cell_t_prev, gates_t, *([seq_lengths] if seq_lengths is not None else []), timestep]
        hidden_t, cell_t = model.net.LSTMUnit(
            inputs,
            outputs,
            forget_bias=self.forget_bias,
            drop_states=self.drop_states,
            sequence_lengths=seq_lengths is not None,
        )
        model.net.AddExternalOutputs(hidden_t, cell_t)
        if self.memory_optimization:
            self.recompute_blobs = [gates_t]
        return hidden_t, cell_t

    def apply_override(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        gates_t = self._gates(model, input_t, states[0], extra_inputs, lambda n: n)
        return self._unit(model, gates_t, states, seq_lengths, timestep, ["hidden_state", "cell_state"])

    def get_input_params(self) -> dict[str, str]:
        return {"weights": self.scope("i2h") + "_w", "biases": self.scope("i2h") + "_b"}

    def get_recurrent_params(self) -> dict[str, str]:
        return {"weights": self.scope("gates_t") + "_w", "biases": self.scope("gates_t") + "_b"}

    def prepare_input(self, model: Any, input_blob: Any) -> Any:
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size, dim_out=self.gates_size, axis=2)

    def get_state_names_override(self) -> list[str]:
        return ["hidden_t", "cell_t"]

    def get_output_dim(self) -> int:
        return self.hidden_size


class LayerNormLSTMCell(LSTMCell):
    """:class:`LSTMCell` with a LayerNorm of the gates before ``LSTMUnit``."""

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        gates_t = self._gates(model, input_t, states[0], extra_inputs, self.scope)
        gates_t, _, _ = brew.layer_norm(
            model, self.scope("gates_t"), self.scope("gates_t_norm"), dim_in=self.gates_size, axis=-1
        )
        return self._unit(model, gates_t, states, seq_lengths, timestep, list(self.get_state_names()))

    def get_state_names(self) -> Any:
        return (self.scope("hidden_t"), self.scope("cell_t"))


class MILSTMCell(LSTMCell):
    """The multiplicative-integration LSTM (https://arxiv.org/abs/1606.06630):
    ``gates = (alpha * x_t + beta_h) * W h + beta_i * x_t + b`` (``ElementwiseLinear``)."""

    def _mi_gates(self, model: Any, input_t: Any, hidden_t_prev: Any, extra_inputs: Any) -> Any:
        fc_input, fc_input_dim = hidden_t_prev, self.hidden_size
        if extra_inputs:
            blobs, sizes = zip(*extra_inputs)
            fc_input = brew.concat(model, [hidden_t_prev, *blobs], self.scope("gates_concatenated_input_t"), axis=2)
            fc_input_dim += sum(sizes)
        prev_t = brew.fc(model, fc_input, self.scope("prev_t"), dim_in=fc_input_dim, dim_out=self.gates_size, axis=2)

        def param(name: str, value: float) -> Any:
            return model.create_param(
                self.scope(name), shape=[self.gates_size], initializer=Initializer("ConstantFill", value=value)
            )

        alpha, beta_h, beta_i, b = param("alpha", 1.0), param("beta1", 1.0), param("beta2", 1.0), param("b", 0.0)
        alpha_x = model.net.ElementwiseLinear(
            [input_t, alpha, beta_h], self.scope("alpha_by_input_t_plus_beta_h"), axis=2
        )
        alpha_x_prev = model.net.Mul([alpha_x, prev_t], self.scope("alpha_by_input_t_plus_beta_h_by_prev_t"))
        beta_x = model.net.ElementwiseLinear([input_t, beta_i, b], self.scope("beta_i_by_input_t_plus_b"), axis=2)
        return brew.sum(model, [alpha_x_prev, beta_x], self.scope("gates_t"))

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        gates_t = self._mi_gates(model, input_t, states[0], extra_inputs)
        names = [self.scope("hidden_t_intermediate"), self.scope("cell_t")]
        return self._unit(model, gates_t, states, seq_lengths, timestep, names)


class LayerNormMILSTMCell(MILSTMCell):
    """:class:`MILSTMCell` with a LayerNorm of the gates before ``LSTMUnit``."""

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        self._mi_gates(model, input_t, states[0], extra_inputs)
        gates_t, _, _ = brew.layer_norm(
            model, self.scope("gates_t"), self.scope("gates_t_norm"), dim_in=self.gates_size, axis=-1
        )
        names = [self.scope("hidden_t_intermediate"), self.scope("cell_t")]
        return self._unit(model, gates_t, states, seq_lengths, timestep, names)


class DropoutCell(RNNCell):
    """Wraps a cell, applying dropout to its output (not to its recurrent state)."""

    def __init__(self, internal_cell: RNNCell, dropout_ratio: float | None = None, use_cudnn: bool = False, **kwargs):
        self.internal_cell = internal_cell
        self.dropout_ratio = dropout_ratio
        if "is_test" not in kwargs:
            raise ValueError("DropoutCell: argument 'is_test' is required")
        self.is_test = kwargs.pop("is_test")
        self.use_cudnn = use_cudnn
        super().__init__(**kwargs)
        self.prepare_input = internal_cell.prepare_input  # type: ignore[method-assign]
        self.get_output_state_index = internal_cell.get_output_state_index  # type: ignore[method-assign]
        self.get_state_names = internal_cell.get_state_names  # type: ignore[method-assign]
        self.get_output_dim = internal_cell.get_output_dim  # type: ignore[method-assign]
        self.mask = 0

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        return self.internal_cell._apply(model, input_t, seq_lengths, states, timestep, extra_inputs)

    def _prepare_output(self, model: Any, states: Any) -> Any:
        return self._apply_dropout(model, self.internal_cell._prepare_output(model, states))

    def _prepare_output_sequence(self, model: Any, state_outputs: Any) -> Any:
        return self._apply_dropout(model, self.internal_cell._prepare_output_sequence(model, state_outputs))

    def _apply_dropout(self, model: Any, output: Any) -> Any:
        if self.dropout_ratio and not self.forward_only:
            with core.NameScope(self.name or ""):
                output = brew.dropout(
                    model,
                    output,
                    f"{output}_with_dropout_mask{self.mask}",
                    ratio=float(self.dropout_ratio),
                    is_test=self.is_test,
                    use_cudnn=self.use_cudnn,
                )
                self.mask += 1
        return output


class MultiRNNCellInitializer:
    """The initial states of every layer of a :class:`MultiRNNCell`, from each cell's initializer."""

    def __init__(self, cells: list[RNNCell]):
        self.cells = cells

    def create_states(self, model: Any) -> list[Any]:
        states = []
        for i, cell in enumerate(self.cells):
            if cell.initializer is None:
                raise ValueError("Either initial states or initializer have to be set")
            with core.NameScope(f"layer_{i}"), core.NameScope(cell.name):
                states.extend(cell.initializer.create_states(model))
        return states


class MultiRNNCell(RNNCell):
    """Layers of cells in one step net: each layer's output is the next one's input
    (``residual_output_layers``: that layer's input is added to its output)."""

    def __init__(self, cells: list[RNNCell], residual_output_layers: list[int] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cells = cells
        self.residual_output_layers = residual_output_layers or []
        per_layer, base = [], 0
        for cell in cells:
            per_layer.append(base + cell.get_output_state_index())
            base += len(cell.get_state_names())
        self.output_connected_layers: list[int] = []
        self.output_indices: list[int] = []
        for i in range(len(cells) - 1):
            if i + 1 in self.residual_output_layers:
                self.output_connected_layers.append(i)
                self.output_indices.append(per_layer[i])
            else:
                self.output_connected_layers, self.output_indices = [], []
        self.output_connected_layers.append(len(cells) - 1)
        self.output_indices.append(per_layer[-1])
        self.state_names = [
            self.layer_scoper(i)(name) for i, cell in enumerate(cells) for name in cell.get_state_names()
        ]
        self.initializer = MultiRNNCellInitializer(cells)

    def layer_scoper(self, layer_id: int) -> Any:
        return lambda name: f"{self.name}/layer_{layer_id}/{name}"

    def prepare_input(self, model: Any, input_blob: Any) -> Any:
        input_blob = _RectifyName(input_blob)
        with core.NameScope(self.name or ""):
            return self.cells[0].prepare_input(model, input_blob)

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        input_t, seq_lengths, states, timestep, extra_inputs = self._rectify_all(
            input_t, seq_lengths, states, timestep, extra_inputs
        )
        counts = [len(cell.get_state_names()) for cell in self.cells]
        if len(states) != sum(counts):
            raise ValueError(f"expected {sum(counts)} states for {len(self.cells)} layers, got {len(states)}")
        next_states: list[Any] = []
        index = 0
        layer_input = input_t
        for i, cell in enumerate(self.cells):
            with core.NameScope(self.name), core.NameScope(f"layer_{i}"):
                layer_states = states[index : index + counts[i]]
                index += counts[i]
                prepared = cell.prepare_input(model, layer_input) if i > 0 else layer_input
                layer_next = cell._apply(
                    model, prepared, seq_lengths, layer_states, timestep, extra_inputs=None if i > 0 else extra_inputs
                )
                if i != len(self.cells) - 1:
                    layer_output = cell._prepare_output(model, layer_next)
                    if i > 0 and i in self.residual_output_layers:
                        layer_input = brew.sum(model, [layer_output, layer_input], self.scope(f"residual_output_{i}"))
                    else:
                        layer_input = layer_output
                next_states.extend(layer_next)
        return next_states

    def _rectify_all(self, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any) -> Any:
        input_t, seq_lengths, timestep = _RectifyNames([input_t, seq_lengths, timestep])
        if extra_inputs:
            blobs, sizes = zip(*extra_inputs)
            extra_inputs = list(zip(_RectifyNames(blobs), sizes))
        return input_t, seq_lengths, _RectifyNames(states), timestep, extra_inputs

    def get_state_names(self) -> Any:
        return self.state_names

    def get_output_state_index(self) -> int:
        return sum(len(c.get_state_names()) for c in self.cells[:-1]) + self.cells[-1].get_output_state_index()

    def _connected(self, model: Any, states: Any, per_state: int, name: str, prepare: str) -> Any:
        outputs, index = [], 0
        for i, cell in enumerate(self.cells):
            n = per_state * len(cell.get_state_names())
            if i in self.output_connected_layers:
                outputs.append(getattr(cell, prepare)(model, states[index : index + n]))
            index += n
        return brew.sum(model, outputs, self.scope(name)) if len(outputs) > 1 else outputs[0]

    def _prepare_output(self, model: Any, states: Any) -> Any:
        return self._connected(model, states, 1, "residual_output", "_prepare_output")

    def _prepare_output_sequence(self, model: Any, states: Any) -> Any:
        return self._connected(model, states, 2, "residual_output_sequence", "_prepare_output_sequence")


class AttentionCell(RNNCell):
    """A decoder cell with attention over ``encoder_outputs`` [T_enc, N, E]: each step feeds the
    previous context to ``decoder_cell`` (beside its hidden state), then attends with the new
    hidden state; its states are the decoder's plus the context (``attention_type``: Regular,
    Recurrent or Dot from :mod:`caffe2.python.attention`)."""

    def __init__(
        self,
        encoder_output_dim: int,
        encoder_outputs: Any,
        encoder_lengths: Any,
        decoder_cell: RNNCell,
        decoder_state_dim: int,
        attention_type: int,
        weighted_encoder_outputs: Any,
        attention_memory_optimization: bool,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if attention_type not in (AttentionType.Regular, AttentionType.Recurrent, AttentionType.Dot):
            raise NotImplementedError(f"attention_type {attention_type}: Regular, Recurrent and Dot are supported")
        self.encoder_output_dim = encoder_output_dim
        self.encoder_outputs = encoder_outputs
        self.encoder_lengths = encoder_lengths
        self.decoder_cell = decoder_cell
        self.decoder_state_dim = decoder_state_dim
        self.weighted_encoder_outputs = weighted_encoder_outputs
        self.encoder_outputs_transposed: Any = None
        self.attention_type = attention_type
        self.attention_memory_optimization = attention_memory_optimization

    def _apply(
        self, model: Any, input_t: Any, seq_lengths: Any, states: Any, timestep: Any, extra_inputs: Any = None
    ) -> Any:
        if extra_inputs is not None:
            raise ValueError("AttentionCell takes no extra_inputs")
        decoder_prev_states, context_prev = states[:-1], states[-1]
        decoder_states = self.decoder_cell._apply(
            model, input_t, seq_lengths, decoder_prev_states, timestep,
            extra_inputs=[(context_prev, self.encoder_output_dim)],
        )  # fmt: skip
        self.hidden_t_intermediate = self.decoder_cell._prepare_output(model, decoder_states)
        common = dict(
            model=model,
            encoder_output_dim=self.encoder_output_dim,
            encoder_outputs_transposed=self.encoder_outputs_transposed,
            decoder_hidden_state_t=self.hidden_t_intermediate,
            decoder_hidden_state_dim=self.decoder_state_dim,
            scope=self.name,
            encoder_lengths=self.encoder_lengths,
        )
        if self.attention_type == AttentionType.Recurrent:
            context, self.attention_weights_3d, blobs = apply_recurrent_attention(
                weighted_encoder_outputs=self.weighted_encoder_outputs,
                attention_weighted_encoder_context_t_prev=context_prev,
                **common,
            )
        elif self.attention_type == AttentionType.Regular:
            context, self.attention_weights_3d, blobs = apply_regular_attention(
                weighted_encoder_outputs=self.weighted_encoder_outputs, **common
            )
        else:
            context, self.attention_weights_3d, blobs = apply_dot_attention(**common)
        if self.attention_memory_optimization:
            self.recompute_blobs.extend(blobs)
        output = [*decoder_states, context]
        k = self.decoder_cell.get_output_state_index()
        output[k] = model.net.Copy(output[k], self.scope("hidden_t_external"))
        model.net.AddExternalOutputs(*output)
        return output

    def get_attention_weights(self) -> Any:
        """[N, T_enc, 1] attention weights of the step."""
        return self.attention_weights_3d

    def prepare_input(self, model: Any, input_blob: Any) -> Any:
        if self.encoder_outputs_transposed is None:
            self.encoder_outputs_transposed = brew.transpose(
                model, self.encoder_outputs, self.scope("encoder_outputs_transposed"), axes=[1, 2, 0]
            )
        if self.weighted_encoder_outputs is None and self.attention_type != AttentionType.Dot:
            self.weighted_encoder_outputs = brew.fc(
                model,
                self.encoder_outputs,
                self.scope("weighted_encoder_outputs"),
                dim_in=self.encoder_output_dim,
                dim_out=self.encoder_output_dim,
                axis=2,
            )
        return self.decoder_cell.prepare_input(model, input_blob)

    def get_state_names(self) -> Any:
        names = list(self.decoder_cell.get_state_names())
        names[self.get_output_state_index()] = self.scope("hidden_t_external")
        names.append(self.scope("attention_weighted_encoder_context_t"))
        return names

    def get_output_dim(self) -> int:
        return self.decoder_state_dim + self.encoder_output_dim

    def get_output_state_index(self) -> int:
        return self.decoder_cell.get_output_state_index()

    def _prepare_output(self, model: Any, states: Any) -> Any:
        with core.NameScope(self.name or ""):
            return brew.concat(
                model, [self.hidden_t_intermediate, states[-1]], "states_and_context_combination", axis=2
            )

    def _prepare_output_sequence(self, model: Any, state_outputs: Any) -> Any:
        decoder_output = self.decoder_cell._prepare_output_sequence(model, state_outputs[:-2])
        context = state_outputs[2 * (len(self.get_state_names()) - 1)]
        with core.NameScope(self.name or ""):
            return brew.concat(model, [decoder_output, context], "states_and_context_combination", axis=2)


def _decoder(
    cell: type, input_size: int, hidden_size: int, forget_bias: float, memory_optimization: bool, name: str
) -> Any:
    """The decoder cell ``<name>/decoder`` an attention cell wraps (always with its backward pass)."""
    return cell(
        input_size=input_size,
        hidden_size=hidden_size,
        forget_bias=forget_bias,
        memory_optimization=memory_optimization,
        name=f"{name}/decoder",
        forward_only=False,
        drop_states=False,
    )


class LSTMWithAttentionCell(AttentionCell):
    """:class:`AttentionCell` over an :class:`LSTMCell` named ``<name>/decoder``."""

    def __init__(
        self,
        encoder_output_dim: int,
        encoder_outputs: Any,
        encoder_lengths: Any,
        decoder_input_dim: int,
        decoder_state_dim: int,
        name: str,
        attention_type: int,
        weighted_encoder_outputs: Any,
        forget_bias: float,
        lstm_memory_optimization: bool,
        attention_memory_optimization: bool,
        forward_only: bool = False,
    ):
        decoder_cell = _decoder(
            LSTMCell, decoder_input_dim, decoder_state_dim, forget_bias, lstm_memory_optimization, name
        )
        super().__init__(
            encoder_output_dim=encoder_output_dim,
            encoder_outputs=encoder_outputs,
            encoder_lengths=encoder_lengths,
            decoder_cell=decoder_cell,
            decoder_state_dim=decoder_state_dim,
            name=name,
            attention_type=attention_type,
            weighted_encoder_outputs=weighted_encoder_outputs,
            attention_memory_optimization=attention_memory_optimization,
            forward_only=forward_only,
        )


class MILSTMWithAttentionCell(AttentionCell):
    """:class:`AttentionCell` over an :class:`MILSTMCell` named ``<name>/decoder``."""

    def __init__(
        self,
        encoder_output_dim: int,
        encoder_outputs: Any,
        decoder_input_dim: int,
        decoder_state_dim: int,
        name: str,
        attention_type: int,
        weighted_encoder_outputs: Any,
        forget_bias: float,
        lstm_memory_optimization: bool,
        attention_memory_optimization: bool,
        forward_only: bool = False,
        encoder_lengths: Any = None,
    ):
        decoder_cell = _decoder(
            MILSTMCell, decoder_input_dim, decoder_state_dim, forget_bias, lstm_memory_optimization, name
        )
        super().__init__(
            encoder_output_dim=encoder_output_dim,
            encoder_outputs=encoder_outputs,
            encoder_lengths=encoder_lengths,
            decoder_cell=decoder_cell,
            decoder_state_dim=decoder_state_dim,
            name=name,
            attention_type=attention_type,
            weighted_encoder_outputs=weighted_encoder_outputs,
            attention_memory_optimization=attention_memory_optimization,
            forward_only=forward_only,
        )


def LSTMWithAttention(
    model: Any,
    decoder_inputs: Any,
    decoder_input_lengths: Any,
    initial_decoder_hidden_state: Any,
    initial_decoder_cell_state: Any,
    initial_attention_weighted_encoder_context: Any,
    encoder_output_dim: int,
    encoder_outputs: Any,
    encoder_lengths: Any,
    decoder_input_dim: int,
    decoder_state_dim: int,
    scope: str,
    attention_type: int = AttentionType.Regular,
    outputs_with_grads: Any = (0, 4),
    weighted_encoder_outputs: Any = None,
    lstm_memory_optimization: bool = False,
    attention_memory_optimization: bool = False,
    forget_bias: float = 0.0,
    forward_only: bool = False,
) -> Any:
    """An LSTM decoder with attention over ``encoder_outputs`` (arXiv:1409.0473, context computed
    after the hidden state as in arXiv:1508.04025). Returns (hidden_all, hidden_last, cell_all,
    cell_last, context_all, context_last)."""
    cell = LSTMWithAttentionCell(
        encoder_output_dim=encoder_output_dim,
        encoder_outputs=encoder_outputs,
        encoder_lengths=encoder_lengths,
        decoder_input_dim=decoder_input_dim,
        decoder_state_dim=decoder_state_dim,
        name=scope,
        attention_type=attention_type,
        weighted_encoder_outputs=weighted_encoder_outputs,
        forget_bias=forget_bias,
        lstm_memory_optimization=lstm_memory_optimization,
        attention_memory_optimization=attention_memory_optimization,
        forward_only=forward_only,
    )
    initial_states = [
        initial_decoder_hidden_state,
        initial_decoder_cell_state,
        initial_attention_weighted_encoder_context,
    ]
    _, result = cell.apply_over_sequence(
        model=model,
        inputs=decoder_inputs,
        seq_lengths=decoder_input_lengths,
        initial_states=initial_states,
        outputs_with_grads=outputs_with_grads,
    )
    return result


def _LSTM(
    cell_class: Any,
    model: Any,
    input_blob: Any,
    seq_lengths: Any,
    initial_states: Any,
    dim_in: int,
    dim_out: Any,
    scope: str | None = None,
    outputs_with_grads: Any = (0,),
    return_params: bool = False,
    memory_optimization: bool = False,
    forget_bias: float = 0.0,
    forward_only: bool = False,
    drop_states: bool = False,
    return_last_layer_only: bool = True,
    static_rnn_unroll_size: int | None = None,
    **cell_kwargs: Any,
) -> tuple[Any, ...]:
    """Layers of ``cell_class`` (one per entry of ``dim_out``) over ``input_blob`` [T, N, dim_in].

    Returns (hidden_all, hidden_last, cell_all, cell_last) of the last layer (of every layer
    with ``return_last_layer_only=False``), plus the parameter names with ``return_params``."""
    dims = list(dim_out) if isinstance(dim_out, (list, tuple)) else [dim_out]
    cells = [
        cell_class(
            input_size=dim_in if i == 0 else dims[i - 1],
            hidden_size=d,
            forget_bias=forget_bias,
            memory_optimization=memory_optimization,
            name=scope if len(dims) == 1 else None,
            forward_only=forward_only,
            drop_states=drop_states,
            **cell_kwargs,
        )
        for i, d in enumerate(dims)
    ]
    cell = MultiRNNCell(cells, name=scope, forward_only=forward_only) if len(dims) > 1 else cells[0]
    if static_rnn_unroll_size is not None:
        cell = UnrolledCell(cell, T=static_rnn_unroll_size)
    per_layer = 2 * len(cells[-1].get_state_names())
    offset = per_layer * (len(dims) - 1)
    _, result = cell.apply_over_sequence(
        model=model,
        inputs=input_blob,
        seq_lengths=seq_lengths,
        initial_states=initial_states,
        outputs_with_grads=[offset + i for i in outputs_with_grads],
    )
    result = list(result[offset:] if return_last_layer_only else result)
    if return_params:
        result.append({"input": cell.get_input_params(), "recurrent": cell.get_recurrent_params()})
    return tuple(result)


LSTM = functools.partial(_LSTM, LSTMCell)
BasicRNN = functools.partial(_LSTM, BasicRNNCell)
MILSTM = functools.partial(_LSTM, MILSTMCell)
LayerNormLSTM = functools.partial(_LSTM, LayerNormLSTMCell)
LayerNormMILSTM = functools.partial(_LSTM, LayerNormMILSTMCell)


def GetLSTMParamNames() -> dict[str, list[str]]:
    return {
        "weights": ["input_gate_w", "forget_gate_w", "output_gate_w", "cell_w"],
        "biases": ["input_gate_b", "forget_gate_b", "output_gate_b", "cell_b"],
    }


def InitFromLSTMParams(lstm_pblobs: dict[str, dict[str, Any]], param_values: dict[str, dict[str, Any]]) -> None:
    """Set an LSTM's weight and bias blobs from per-gate arrays (:func:`GetLSTMParamNames`'
    keys, concatenated in that order)."""
    names = GetLSTMParamNames()
    for input_type, values in param_values.items():
        for kind in ("weights", "biases"):
            blob = lstm_pblobs[input_type][kind]
            current = workspace.FetchBlob(blob)
            flat = np.concatenate([np.asarray(values[p]).ravel() for p in names[kind]])
            workspace.FeedBlob(blob, flat.reshape(current.shape).astype(np.float32))
