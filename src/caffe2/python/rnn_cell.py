"""Caffe2's ``rnn_cell.LSTM`` on asyncnet's whole-sequence ``LSTM`` operator.

Caffe2 ran an LSTM as a ``RecurrentNetwork`` op stepping a step net (``LSTMUnit``); asyncnet
has no step-net runtime, so :func:`LSTM` emits one ``LSTM`` op (its gradient runs back through
time) with Caffe2's blob and parameter names and shapes: inputs ``[T, N, D]``, initial states
``[1, N, H]``, outputs ``<scope>/hidden_t_all`` ``[T, N, H]``, ``<scope>/hidden_t_last``
``[1, N, H]``, ``<scope>/cell_t_all``, ``<scope>/cell_t_last``; parameters ``<scope>/i2h_w``
``[4H, D]``, ``<scope>/i2h_b``, ``<scope>/gates_t_w`` ``[4H, H]``, ``<scope>/gates_t_b``.

Differences: the gates are in torch's order (i, f, g, o; Caffe2's LSTMUnit used i, f, o, g), so
weights trained by Caffe2 need their last two gate blocks swapped; ``seq_lengths`` is accepted
but every sequence runs the full ``T`` steps; one layer per call.

    >>> import numpy as np
    >>> from caffe2.python import model_helper, rnn_cell, workspace
    >>> m = model_helper.ModelHelper(name="lstm_doc")
    >>> outs = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), dim_in=3, dim_out=4, scope="lstm")
    >>> [str(o) for o in outs]
    ['lstm/hidden_t_all', 'lstm/hidden_t_last', 'lstm/cell_t_all', 'lstm/cell_t_last']
    >>> _ = workspace.RunNetOnce(m.param_init_net)
    >>> for name, shape in (("x", (5, 2, 3)), ("h0", (1, 2, 4)), ("c0", (1, 2, 4))):
    ...     _ = workspace.FeedBlob(name, np.zeros(shape, np.float32))
    >>> _ = workspace.FeedBlob("lengths", np.full(2, 5, np.int32)); _ = workspace.RunNetOnce(m.net)
    >>> workspace.FetchBlob("lstm/hidden_t_all").shape, workspace.FetchBlob("lstm/cell_t_last").shape
    ((5, 2, 4), (1, 2, 4))
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core, scope
from caffe2.python.modeling.initializers import Initializer
from caffe2.python.modeling.parameter_info import ParameterTags

__all__ = ["LSTM"]


def _param(model: Any, name: str, shape: list[int], op: str, tag: str) -> Any:
    return model.create_param(core.BlobReference(name), shape, Initializer(op), tag)


def LSTM(
    model: Any,
    input_blob: Any,
    seq_lengths: Any,
    initial_states: Any,
    dim_in: int,
    dim_out: Any,
    scope: str,
    outputs_with_grads: Any = (0,),
    return_params: bool = False,
    memory_optimization: bool = False,
    forget_bias: float = 0.0,
    forward_only: bool = False,
    drop_states: bool = False,
    return_last_layer_only: bool = True,
    static_rnn_unroll_size: Any = None,
    **cell_kwargs: Any,
) -> Any:
    """One LSTM layer over ``input_blob`` [T, N, dim_in] from ``initial_states`` (h, c each [1, N, H]).

    Returns (hidden_all, hidden_last, cell_all, cell_last) (plus the parameters with ``return_params``)."""
    if isinstance(dim_out, (list, tuple)):
        if len(dim_out) != 1:
            raise NotImplementedError("rnn_cell.LSTM: one layer per call here (dim_out has several sizes)")
        dim_out = dim_out[0]
    if forget_bias:
        raise NotImplementedError("rnn_cell.LSTM: forget_bias is not supported; initialize the gate biases instead")
    h0, c0 = initial_states
    pre = _scoped(scope)
    i2h_w = _param(model, pre + "i2h_w", [4 * dim_out, dim_in], "XavierFill", ParameterTags.WEIGHT)
    i2h_b = _param(model, pre + "i2h_b", [4 * dim_out], "ConstantFill", ParameterTags.BIAS)
    gates_w = _param(model, pre + "gates_t_w", [4 * dim_out, dim_out], "XavierFill", ParameterTags.WEIGHT)
    gates_b = _param(model, pre + "gates_t_b", [4 * dim_out], "ConstantFill", ParameterTags.BIAS)
    net = model.net
    h0_2d = net.Squeeze(h0, pre + "hidden_t_init_2d", dims=[0])
    c0_2d = net.Squeeze(c0, pre + "cell_t_init_2d", dims=[0])
    hidden_all, h_last, c_last, cache = net.LSTM(
        [input_blob, h0_2d, c0_2d, i2h_w, gates_w, i2h_b, gates_b],
        [pre + "hidden_t_all", pre + "hidden_t_last_2d", pre + "cell_t_last_2d", pre + "lstm_cache"],
    )
    cell_all = net.Slice(cache, pre + "cell_t_all", starts=[0, 0, 4 * dim_out], ends=[-1, -1, 5 * dim_out])
    hidden_last = net.ExpandDims(h_last, pre + "hidden_t_last", dims=[0])
    cell_last = net.ExpandDims(c_last, pre + "cell_t_last", dims=[0])
    outs = (hidden_all, hidden_last, cell_all, cell_last)
    if return_params:
        return (
            *outs,
            {"input": {"weights": i2h_w, "biases": i2h_b}, "recurrent": {"weights": gates_w, "biases": gates_b}},
        )
    return outs


def _scoped(name: str) -> str:
    return scope.CurrentNameScope() + (name + scope._NAMESCOPE_SEPARATOR if name else "")
