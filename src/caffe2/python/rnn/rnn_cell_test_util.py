"""Caffe2's ``caffe2.python.rnn.rnn_cell_test_util``: numpy activations and ``_prepare_rnn``,
which builds a recurrent net with ``create_rnn`` (an ``rnn_cell`` builder such as
``rnn_cell.LSTM``) from external inputs, feeds random initial states and sequence lengths, and
returns (outputs, the net, the input blobs to feed).

    >>> import numpy as np
    >>> from caffe2.python.rnn.rnn_cell_test_util import sigmoid, tanh
    >>> float(sigmoid(0.0)), round(float(tanh(1.0)), 6) == round(float(np.tanh(1.0)), 6)
    (0.5, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from caffe2.python import scope, workspace
from caffe2.python.model_helper import ModelHelper

__all__ = ["sigmoid", "tanh", "_prepare_rnn"]


def sigmoid(x: Any) -> Any:
    """1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + np.exp(-x))


def tanh(x: Any) -> Any:
    """tanh written through the sigmoid, as Caffe2's reference computations do."""
    return 2.0 * sigmoid(2.0 * x) - 1


def _initial_state(n: int, d: int, two_d: bool) -> np.ndarray:
    shape = (n, d) if two_d else (1, n, d)
    return np.random.randn(*shape).astype(np.float32)


def _prepare_rnn(
    t: int,
    n: int,
    dim_in: int,
    create_rnn: Callable[..., Any],
    outputs_with_grads: Sequence[int],
    forget_bias: float,
    memory_optim: bool = False,
    forward_only: bool = False,
    drop_states: bool = False,
    T: int | None = None,
    two_d_initial_states: Any = None,
    dim_out: Sequence[int] | None = None,
    num_states: int = 2,
    **kwargs: Any,
) -> tuple[Any, Any, list[Any]]:
    """Build ``create_rnn(model, input, seq_lengths, states, ...)`` under the name scope
    ``test_name_scope`` with ``num_states`` fed initial states per layer (2-D or 3-D, drawn at
    random when ``two_d_initial_states`` is None), run the parameter init net and feed sequence
    lengths in [1, t]. Returns (the builder's outputs, the net, states + [input blob])."""
    dim_out = list(dim_out) if dim_out is not None else [dim_in]
    model = ModelHelper(name="external")
    two_d = bool(np.random.randint(2)) if two_d_initial_states is None else bool(two_d_initial_states)
    states = []
    for layer, d in enumerate(dim_out):
        for i in range(num_states):
            states.append(model.net.AddExternalInput(f"state_{i}/layer_{layer}"))
            workspace.FeedBlob(states[-1], _initial_state(n, d, two_d))
    with scope.NameScope("test_name_scope"):
        input_blob, seq_lengths = model.net.AddScopedExternalInputs("input_blob", "seq_lengths")
        outputs = create_rnn(
            model,
            input_blob,
            seq_lengths,
            states,
            dim_in=dim_in,
            dim_out=dim_out,
            scope="external/recurrent",
            outputs_with_grads=outputs_with_grads,
            memory_optimization=memory_optim,
            forget_bias=forget_bias,
            forward_only=forward_only,
            drop_states=drop_states,
            static_rnn_unroll_size=T,
            **kwargs,
        )
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob(seq_lengths, np.random.randint(1, t + 1, size=(n,)).astype(np.int32))
    return outputs, model.net, states + [input_blob]
