"""RecurrentNetwork's outputs found by name (aliases or whole states) and its step blobs."""

import numpy as np
import pytest

from asyncnet.errors import NetDefinitionError
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(120)


def _op(outputs, outputs_with_grads=(0,)):
    step = core.Net("acc_step")
    step.Proto().external_input.extend(["x_t", "h_prev"])
    step.Tanh(step.Sum(["x_t", "h_prev"], "s_t"), "h_t")
    step.Proto().external_output.extend(["h_t"])
    return core.CreateOperator(
        "RecurrentNetwork",
        ["x", "h0"],
        outputs,
        alias_src=["h", "h"],
        alias_dst=["h_all", "h_last"],
        alias_offset=[1, -1],
        recurrent_states=["h"],
        initial_recurrent_state_ids=[1],
        link_internal=["h_prev", "h_t", "x_t"],
        link_external=["h", "h", "x"],
        link_offset=[0, 1, 0],
        step_net=step.Proto(),
        outputs_with_grads=list(outputs_with_grads),
    )


def _numpy_states(x, h0):
    h = [h0[0]]
    for t in range(x.shape[0]):
        h.append(np.tanh(x[t] + h[-1]))
    return np.stack(h)


def _feed(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    h0 = rng.standard_normal((1, 2, 3)).astype(np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("h0", h0)
    return x, h0


def test_a_recurrent_state_named_as_an_output_is_the_whole_state():
    x, h0 = _feed(0)
    workspace.RunOperatorOnce(_op(["h_all", "h", "h_last", "ws"]))
    want = _numpy_states(x, h0)
    np.testing.assert_allclose(workspace.FetchBlob("h"), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("h_all"), want[1:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("h_last"), want[-1:], rtol=1e-5, atol=1e-6)


def test_outputs_may_come_in_any_order():
    x, h0 = _feed(1)
    workspace.RunOperatorOnce(_op(["h_last", "h_all", "ws"]))
    want = _numpy_states(x, h0)
    np.testing.assert_allclose(workspace.FetchBlob("h_last"), want[-1:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("h_all"), want[1:], rtol=1e-5, atol=1e-6)


def test_an_output_that_is_neither_alias_nor_state_is_refused():
    _feed(2)
    with pytest.raises(NetDefinitionError, match="'other' is neither an alias_dst"):
        workspace.RunOperatorOnce(_op(["h_all", "other", "ws"]))


def test_step_blobs_hold_each_steps_linked_rows():
    x, h0 = _feed(3)
    workspace.RunOperatorOnce(_op(["h_all", "h_last", "ws"]))
    scratch = workspace.FetchBlob("ws")
    assert scratch.steps == 4
    want = _numpy_states(x, h0)
    for t in range(4):
        blobs = scratch.step_blobs(t)
        np.testing.assert_array_equal(blobs["x_t"], x[t : t + 1])
        np.testing.assert_allclose(blobs["h_t"], want[t + 1 : t + 2], rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexError, match="expected a step in 0..3, got 4"):
        scratch.step_blobs(4)


def test_lstm_puts_string_initial_states_under_the_name_scope():
    from caffe2.python import model_helper, rnn_cell, scope

    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="scoped_lstm")
    with scope.NameScope("dev0"):
        h_all, h_last, _, _ = rnn_cell.LSTM(m, "data", "lengths", ("h0", "c0"), 2, 3, scope="l")
    op = next(o for o in m.net.Proto().op if o.type == "RecurrentNetwork")
    assert {"dev0/h0", "dev0/c0"} <= set(op.input)
    assert str(h_all) == "dev0/l/hidden_state_all" and str(h_all) in op.output
    rng = np.random.default_rng(4)
    feeds = {
        "dev0/data": rng.standard_normal((3, 1, 2)).astype(np.float32),
        "dev0/lengths": np.array([3], np.int32),
        "dev0/h0": np.zeros((1, 1, 3), np.float32),
        "dev0/c0": np.zeros((1, 1, 3), np.float32),
    }
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(m.param_init_net)
    workspace.RunNetOnce(m.net)
    assert workspace.FetchBlob(str(h_all)).shape == (3, 1, 3)
    np.testing.assert_array_equal(workspace.FetchBlob(str(h_last))[0], workspace.FetchBlob(str(h_all))[-1])


def _window_op(outputs):
    step = core.Net("window_step")
    step.Proto().external_input.extend(["x_t", "win"])
    step.Copy("x_t", "new_t")
    step.ReduceFrontSum("win", "y_t")
    step.Proto().external_output.extend(["new_t", "y_t"])
    return core.CreateOperator(
        "RecurrentNetwork",
        ["x", "s0", "y0"],
        outputs,
        alias_src=["s", "y"],
        alias_dst=["s_all", "y_all"],
        alias_offset=[1, 1],
        recurrent_states=["s", "y"],
        initial_recurrent_state_ids=[1, 2],
        link_internal=["win", "new_t", "y_t", "x_t"],
        link_external=["s", "s", "y", "x"],
        link_offset=[0, 1, 1, 0],
        link_window=[2, 1, 1, 1],
        step_net=step.Proto(),
        outputs_with_grads=[],
    )


def test_a_window_sees_the_row_its_step_writes_as_in_caffe2s_shared_memory():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    s0 = rng.standard_normal((1, 2, 3)).astype(np.float32)
    workspace.ResetWorkspace()
    for k, v in {"x": x, "s0": s0, "y0": np.zeros((1, 2, 3), np.float32)}.items():
        workspace.FeedBlob(k, v)
    workspace.RunOperatorOnce(_window_op(["s_all", "y_all", "ws"]))
    prev = np.concatenate([s0, x[:-1]])
    np.testing.assert_allclose(workspace.FetchBlob("y_all"), prev + x, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob("s_all"), x)


def test_an_initial_state_of_no_rows_starts_an_empty_history():
    step = core.Net("empty_init_step")
    step.Proto().external_input.extend(["x_t"])
    step.Copy("x_t", "s_t")
    op = core.CreateOperator(
        "RecurrentNetwork",
        ["x", "s0"],
        ["s", "ws"],
        alias_src=["s"],
        alias_dst=["s_all"],
        alias_offset=[0],
        recurrent_states=["s"],
        initial_recurrent_state_ids=[1],
        link_internal=["s_t", "x_t"],
        link_external=["s", "x"],
        link_offset=[0, 0],
        step_net=step.Proto(),
        outputs_with_grads=[],
    )
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("s0", np.zeros((0, 2, 2), np.float32))
    workspace.RunOperatorOnce(op)
    np.testing.assert_array_equal(workspace.FetchBlob("s"), x)


def _sum_mul_rnn(state_output):
    from caffe2.python import model_helper, recurrent

    m = model_helper.ModelHelper(name=f"whole_state_{state_output}")
    step = model_helper.ModelHelper(name="whole_state_step", param_model=m)
    x_t, prev = step.net.AddExternalInput("x_t", "h_prev")
    h_t = step.net.Tanh(step.net.Sum([x_t, prev], "s_t"), "h_t")
    step.net.AddExternalOutput(h_t)
    h_all, _ = recurrent.recurrent_net(m.net, step.net, [(x_t, "x")], [(prev, "h0")], {prev: h_t}, scope="r")
    op = next(o for o in m.net.Proto().op if o.type == "RecurrentNetwork")
    target = h_all
    if state_output:
        state = [a for a in op.arg if a.name == "recurrent_states"][0].strings[0].decode()
        outputs = list(op.output)
        del op.output[:]
        op.output.extend([*outputs[:-1], state, outputs[-1]])
        owg = [a for a in op.arg if a.name == "outputs_with_grads"][0]
        del owg.ints[:]
        owg.ints.append(2)
        target = state
    m.AddGradientOperators([m.net.SumElements(m.net.Sqr(target, "sq"), "loss")])
    return m


def test_the_gradient_through_a_whole_state_output():
    x, h0 = _feed(6)
    grads = []
    for state_output in (False, True):
        workspace.RunNetOnce(_sum_mul_rnn(state_output).net)
        grads.append((workspace.FetchBlob("x_grad").copy(), workspace.FetchBlob("h0_grad").copy()))
    (dx_all, dh0_all), (dx_state, dh0_state) = grads
    assert np.abs(dx_all).max() > 1e-3
    np.testing.assert_allclose(dx_state, dx_all, rtol=1e-5, atol=1e-6)  # row 0 of the state is h0 itself
    np.testing.assert_allclose(dh0_state, dh0_all + 2 * h0, rtol=1e-5, atol=1e-6)
