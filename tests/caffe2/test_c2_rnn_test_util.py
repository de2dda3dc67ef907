"""caffe2.python.rnn.rnn_cell_test_util: _prepare_rnn builds an LSTM under a name scope whose
RecurrentNetwork reads the projected input under its single-scoped name, as Caffe2's tests feed it."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import rnn_cell, workspace
from caffe2.python.rnn.rnn_cell_test_util import _prepare_rnn, sigmoid, tanh

pytestmark = pytest.mark.timeout(120)


def test_activations_match_numpy():
    x = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(sigmoid(x), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(tanh(x), np.tanh(x), atol=1e-12)


def test_prepare_rnn_builds_a_runnable_lstm():
    workspace.ResetWorkspace()
    np.random.seed(0)
    outputs, net, inputs = _prepare_rnn(
        4, 2, 3, rnn_cell.LSTM, outputs_with_grads=[0], forget_bias=0.0, two_d_initial_states=False
    )
    op = net.Proto().op[-1]
    assert op.type == "RecurrentNetwork"
    assert op.input[0] == "test_name_scope/external/recurrent/i2h"
    assert [str(b) for b in inputs[-1:]] == ["test_name_scope/input_blob"]
    workspace.FeedBlob("test_name_scope/input_blob", np.random.randn(4, 2, 3).astype(np.float32))
    workspace.RunNetOnce(net)
    lengths = workspace.FetchBlob("test_name_scope/seq_lengths")
    assert lengths.dtype == np.int32 and ((lengths >= 1) & (lengths <= 4)).all()
    assert workspace.FetchBlob(outputs[0]).shape == (4, 2, 3)
