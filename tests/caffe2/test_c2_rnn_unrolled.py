"""rnn_cell.UnrolledCell and LSTM(static_rnn_unroll_size=T) against the RecurrentNetwork path."""

import numpy as np
import pytest

from caffe2.python import model_helper, rnn_cell, scope, workspace

pytestmark = pytest.mark.timeout(120)

T, N, D_IN = 3, 2, 4


def _lstm(unroll, dims, name_scope=""):
    m = model_helper.ModelHelper(name=f"lstm_{'unrolled' if unroll else 'dynamic'}")
    with scope.NameScope(name_scope):
        states = [f"init_{i}" for i in range(2 * len(dims))]
        out = rnn_cell.LSTM(
            m,
            "x",
            "lengths",
            states,
            D_IN,
            dims,
            scope="enc",
            static_rnn_unroll_size=unroll,
            return_last_layer_only=True,
        )
    return m, out


def _feed(dims, prefix=""):
    rng = np.random.default_rng(7)
    workspace.FeedBlob(prefix + "x", rng.standard_normal((T, N, D_IN)).astype(np.float32))
    workspace.FeedBlob(prefix + "lengths", np.array([T, T - 1], np.int32))
    for i, d in enumerate(np.repeat(dims, 2)):
        workspace.FeedBlob(f"{prefix}init_{i}", rng.standard_normal((1, N, d)).astype(np.float32))


@pytest.mark.parametrize("dims", [[3], [3, 2]])
def test_unrolled_lstm_equals_the_recurrent_network_lstm(dims):
    workspace.ResetWorkspace()
    dynamic, d_out = _lstm(None, dims)
    unrolled, u_out = _lstm(T, dims)
    assert sorted(map(str, dynamic.GetParams())) == sorted(map(str, unrolled.GetParams()))
    assert "RecurrentNetwork" not in {op.type for op in unrolled.net.Proto().op}
    _feed(dims)
    for m in (dynamic, unrolled):  # both read the same parameter blobs (the second fill's values)
        workspace.RunNetOnce(m.param_init_net)
    got = []
    for m, outs in ((dynamic, d_out), (unrolled, u_out)):
        workspace.RunNetOnce(m.net)
        got.append([workspace.FetchBlob(str(b)).copy() for b in outs])
    for want, have in zip(*got):
        np.testing.assert_allclose(have.reshape(want.shape), want, rtol=1e-5, atol=1e-6)


def test_unrolled_steps_share_one_set_of_parameters_under_the_outer_scope():
    workspace.ResetWorkspace()
    m, _ = _lstm(T, [3], name_scope="dev")
    params = sorted(map(str, m.GetParams()))
    assert params and all(p.startswith("dev/") and "timestep_" not in p for p in params)
    step_blobs = {o for op in m.net.Proto().op for o in op.output}
    assert {f"dev/timestep_{t}/enc/hidden_state" for t in range(T)} <= step_blobs


def test_outputs_without_gradient_are_marked_zero_gradient():
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="zero_grad_marks")
    cell = rnn_cell.UnrolledCell(rnn_cell.LSTMCell(D_IN, 3, 0.0, False, name="l"), T=T)
    _, outputs = cell.apply_over_sequence(m, "x", "lengths", ["h0", "c0"], outputs_with_grads=[0])
    marked = [op.input[0] for op in m.net.Proto().op if op.type == "ZeroGradient"]
    assert marked == [str(b) for b in outputs[1:]]


def test_unrolled_cell_needs_initial_states():
    cell = rnn_cell.UnrolledCell(rnn_cell.LSTMCell(D_IN, 3, 0.0, False, name="l"), T=T)
    with pytest.raises(ValueError, match="needs initial_states"):
        cell.apply_over_sequence(model_helper.ModelHelper(name="no_init"), "x")


def test_unrolled_gradients_equal_the_recurrent_network_gradients():
    dims = [3, 2]
    workspace.ResetWorkspace()
    models = []
    for unroll in (None, T):
        m, (h_all, *_) = _lstm(unroll, dims)
        loss = m.net.SumElements(m.net.Sqr(h_all, f"sq_{m.name}"), f"loss_{m.name}")
        m.AddGradientOperators([loss])
        models.append(m)
    _feed(dims)
    for m in models:
        workspace.RunNetOnce(m.param_init_net)
    names = ["x", "init_0", *sorted(map(str, models[0].GetParams()))]
    grads = []
    for m in models:
        workspace.RunNetOnce(m.net)
        grads.append({n: workspace.FetchBlob(str(m.param_to_grad[n]) if n in m.param_to_grad else n + "_grad").copy()
                      for n in names})  # fmt: skip
    for n in names:
        assert np.abs(grads[0][n]).max() > 1e-3, n  # a gradient reaches every input compared
        np.testing.assert_allclose(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-5, err_msg=n)
