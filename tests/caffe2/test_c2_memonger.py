"""caffe2.python.memonger: renamed nets compute the same values with fewer blobs; live-range
packing, orders, graph equality and frees on small cases worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import brew, core, memonger, model_helper, workspace

pytestmark = pytest.mark.timeout(120)
R = memonger.LiveRange


def _blobs(proto):
    return {n for op in proto.op for n in list(op.input) + list(op.output)}


def _mlp(depth=4):
    m = model_helper.ModelHelper(name="mlp")
    h = "data"
    for i in range(depth):
        h = brew.fc(m, h, f"fc{i}", dim_in=3, dim_out=3)
        h = brew.relu(m, h, f"relu{i}")
    m.net.SoftmaxWithLoss([h, "label"], ["softmax", "loss"])
    return m


def _feed(seed=0):
    rng = np.random.default_rng(seed)
    workspace.FeedBlob("data", rng.standard_normal((5, 3)).astype(np.float32))
    workspace.FeedBlob("label", rng.integers(0, 3, 5).astype(np.int32))


def test_inference_fast_shares_a_chain_and_keeps_the_result():
    m = _mlp()
    workspace.RunNetOnce(m.param_init_net)
    _feed()
    workspace.RunNetOnce(m.net)
    want = workspace.FetchBlob("softmax").copy()
    static = [o for op in m.param_init_net.Proto().op for o in op.output] + ["data", "label", "softmax", "loss"]
    opt = memonger.optimize_inference_fast(m.net.Proto(), static)
    assert len(_blobs(opt)) < len(_blobs(m.net.Proto()))
    assert all(len(set(op.output)) == len(op.output) for op in opt.op)
    workspace.FeedBlob("softmax", np.zeros(1, np.float32))
    workspace.RunNetOnce(opt)
    np.testing.assert_array_equal(workspace.FetchBlob("softmax"), want)


@pytest.mark.parametrize("algo", list(memonger.AssignmentAlgorithm))
def test_shared_gradients_give_the_same_gradient(algo):
    m = _mlp()
    grads = m.AddGradientOperators(["loss"])
    workspace.RunNetOnce(m.param_init_net)
    _feed(1)
    workspace.RunNetOnce(m.net)
    want = workspace.FetchBlob(str(grads["fc0_w"])).copy()
    static = [o for op in m.param_init_net.Proto().op for o in op.output] + ["data", "label", "loss", grads["fc0_w"]]
    opt = memonger.optimize_interference(m.net.Proto(), static, algo=algo)
    assert len(_blobs(opt.net)) < len(_blobs(m.net.Proto()))
    stats = memonger.compute_statistics(opt.assignments)
    assert stats.optimized_nbytes < stats.baseline_nbytes
    workspace.FeedBlob(str(grads["fc0_w"]), np.zeros(1, np.float32))
    workspace.RunNetOnce(opt.net)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["fc0_w"])), want, rtol=1e-6)
    shared = memonger.share_grad_blobs(m.net, ["loss"], set(m.param_to_grad.values()), "", share_activations=True)
    assert len(_blobs(shared)) < len(_blobs(m.net.Proto()))
    workspace.FeedBlob(str(grads["fc0_w"]), np.zeros(1, np.float32))
    workspace.RunNetOnce(shared)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["fc0_w"])), want, rtol=1e-6)


def test_greedy_packs_by_nearest_size_and_dp_finds_the_least_memory():
    ranges = [("a", R(1, 2, 10)), ("b", R(4, 6, 1)), ("c", R(5, 6, 10))]
    greedy = memonger.compute_assignments_greedy(ranges, None)
    assert [[n for n, _ in g] for g in greedy] == [["a", "b"], ["c"]]
    assert memonger.get_memory_usage(greedy) == 20
    best = memonger.compute_assignments_dp(ranges, None)
    assert memonger.get_memory_usage(best) == 11 and sorted(n for g in best for n, _ in g) == ["a", "b", "c"]


def test_a_range_that_touches_another_does_not_share_with_it():
    groups = memonger.compute_assignments_greedy([("a", R(0, 3, 1)), ("b", R(3, 5, 1))], None)
    assert len(groups) == 2


def test_orders_of_two_chains():
    net = core.Net("n")
    net.Relu("s", "t")  # 0: a chain of one
    net.Relu("a", "b")  # 1
    net.Relu("b", "c")  # 2
    net.Relu("c", "d")  # 3
    g = memonger.compute_interference_graph(net.Proto().op)
    assert g.edges() == [(1, 2), (2, 3)]
    assert memonger.topological_sort_traversal(g) == [1, 2, 3, 0]
    assert memonger.topological_sort_traversal_longest_path(g) == [1, 2, 3, 0]


def test_graph_equality_follows_producers_not_names():
    a, b, c = core.Net("a"), core.Net("b"), core.Net("c")
    for net, names in ((a, "pqr"), (b, "stu"), (c, "pqq")):
        net.Relu("x", names[0])
        net.Relu(names[0], names[1])
        net.Sigmoid(names[0], names[2])
        net.Add([names[1], names[2]], "y")
    assert memonger.verify_graph_equality(a.Proto(), b.Proto())
    assert not memonger.verify_graph_equality(a.Proto(), c.Proto())  # c's Add reads q from the Sigmoid twice


def test_frees_follow_the_last_use():
    net = core.Net("n")
    net.Relu("x", "h")
    net.Relu("h", "k")
    net.Alias("k", "k_alias")
    net.Add(["h", "x"], "y")
    out = memonger.release_blobs_when_used(net.Proto(), set())
    types = [(op.type, list(op.input)) for op in out.op]
    assert types == [("Relu", ["x"]), ("Relu", ["h"]), ("Alias", ["k"]), ("Add", ["h", "x"]), ("Free", ["h"])]


def test_the_net_with_frees_runs_and_frees():
    net = core.Net("frees")
    net.Relu("x", "h")
    net.Relu("h", "k")
    net.Add(["h", "k"], "y")
    workspace.FeedBlob("x", np.array([-1.0, 2.0], np.float32))
    workspace.RunNetOnce(memonger.release_blobs_when_used(net.Proto(), set()))
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 4.0])
    assert workspace.FetchBlob("h").size == 0 and workspace.FetchBlob("k").size == 0
