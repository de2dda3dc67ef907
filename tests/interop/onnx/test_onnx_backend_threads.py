"""An ONNX backend rep holds a thread-budget claim while open, and gives it back when closed."""

import gc

import numpy as np
import onnx.helper as oh
import pytest
import torch
from onnx import TensorProto

from asyncnet.errors import ExecutionError
from asyncnet.interop.onnx import backend
from asyncnet.tensor import threads as budget

pytestmark = pytest.mark.timeout(120)


def _model():
    w = oh.make_tensor("w", TensorProto.FLOAT, [3, 2], np.arange(6, dtype=np.float32))
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "mm",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[w],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


X = np.ones((2, 3), np.float32)


@pytest.fixture(autouse=True)
def no_claim_before():
    assert budget.intra_op_threads() is None, "a thread claim is live before the test"
    yield


def test_an_open_rep_runs_one_thread_and_close_restores_the_libraries():
    torch_before = torch.get_num_threads()
    rep = backend.prepare(_model())
    assert budget.intra_op_threads() == 1 and rep.intra_op_threads == 1
    assert torch.get_num_threads() == 1
    np.testing.assert_array_equal(rep.run(X)[0], X @ np.arange(6, dtype=np.float32).reshape(3, 2))
    rep.close()
    rep.close()  # idempotent
    assert rep.closed and budget.intra_op_threads() is None
    assert torch.get_num_threads() == torch_before


def test_intra_op_threads_is_an_explicit_claim_and_zero_claims_nothing():
    with backend.prepare(_model(), intra_op_threads=2) as rep:
        assert budget.intra_op_threads() == 2
        rep.run(X)
    assert budget.intra_op_threads() is None
    with backend.prepare(_model(), intra_op_threads=0) as rep:
        assert budget.intra_op_threads() is None
        assert rep.run(X)[0].shape == (2, 2)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_bad_thread_count_is_refused_and_claims_nothing(bad):
    with pytest.raises(ValueError, match="intra_op_threads"):
        backend.prepare(_model(), intra_op_threads=bad)
    assert budget.intra_op_threads() is None


def test_a_closed_rep_refuses_to_run():
    with backend.prepare(_model()) as rep:
        pass
    with pytest.raises(ExecutionError, match="closed"):
        rep.run(X)


def test_a_collected_rep_gives_its_claim_back():
    rep = backend.prepare(_model(), net_type="async_scheduling", num_workers=2)
    rep.run(X)
    assert budget.intra_op_threads() == 1
    del rep
    gc.collect()
    assert budget.intra_op_threads() is None


def test_close_live_reps_closes_every_open_rep():
    reps = [backend.prepare(_model()) for _ in range(3)]
    reps[0].close()
    assert backend.close_live_reps() == 2
    assert all(r.closed for r in reps) and budget.intra_op_threads() is None


def test_run_model_and_run_node_leave_no_claim():
    np.testing.assert_array_equal(backend.run_model(_model(), [X])[0].shape, (2, 2))
    (y,) = backend.run_node(oh.make_node("Relu", ["x"], ["y"]), [np.float32([-1, 2])])
    np.testing.assert_array_equal(y, [0, 2])
    assert budget.intra_op_threads() is None
