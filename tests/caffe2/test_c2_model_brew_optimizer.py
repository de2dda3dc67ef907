"""brew, ModelHelper and optimizer: the parameters and op sequences Caffe2 emits, one update step
of SGD, Adagrad and Adam against numpy formulas (Caffe2's kernels), and a small model that trains."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import brew, core, model_helper, optimizer, workspace
from caffe2.python.modeling import initializers

pytestmark = pytest.mark.timeout(120)


def _linear_model(name="lin"):
    m = model_helper.ModelHelper(name=name)
    fc = brew.fc(m, "x", "fc", dim_in=3, dim_out=2)
    sq = m.net.Mul([fc, fc], "sq")
    loss = m.AveragedLoss(sq, "loss")
    m.AddGradientOperators([loss])
    return m


def _feed(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    workspace.FeedBlob("x", x)
    return x


def _grads(x, w, b):
    y = x @ w.T + b
    dy = 2 * y / y.size
    return dy.T @ x, dy.sum(0)


def test_brew_fc_params_and_init_ops():
    m = model_helper.ModelHelper(name="p")
    brew.fc(m, "x", "fc1", dim_in=4, dim_out=3)
    with core.NameScope("tower"):
        brew.fc(m, "x", "fc2", dim_in=4, dim_out=2, weight_init=("GaussianFill", {"std": 0.1}))
    assert [str(p) for p in m.params] == ["fc1_w", "fc1_b", "tower/fc2_w", "tower/fc2_b"]
    assert [str(p) for p in m.weights] == ["fc1_w", "tower/fc2_w"]
    ops = m.param_init_net.Proto().op
    assert [o.type for o in ops] == ["XavierFill", "ConstantFill", "GaussianFill", "ConstantFill"]
    assert list(ops[0].output) == ["fc1_w"] and [a.ints for a in ops[0].arg if a.name == "shape"][0] == [3, 4]
    assert [str(p) for p in m.GetParams("tower")] == ["tower/fc2_w", "tower/fc2_b"]
    fc = m.net.Proto().op[1]
    assert list(fc.input) == [
        "tower/x",
        "tower/fc2_w",
        "tower/fc2_b",
    ]  # a string blob takes the scope and list(fc.output) == ["tower/fc2"]


def test_init_params_false_adds_no_init_ops():
    m = model_helper.ModelHelper(name="noinit", init_params=False)
    brew.conv(m, "data", "conv", dim_in=1, dim_out=2, kernel=3)
    assert len(m.param_init_net.Proto().op) == 0 and [str(p) for p in m.params] == ["conv_w", "conv_b"]


def test_arg_scope_and_conv_weight_shape():
    m = model_helper.ModelHelper(name="scoped", arg_scope={"order": "NHWC"})
    with brew.arg_scope([brew.conv], kernel=3, stride=2):
        brew.conv(m, "data", "c", dim_in=4, dim_out=8, group=2)
    shape = [a.ints for a in m.param_init_net.Proto().op[0].arg if a.name == "shape"][0]
    assert list(shape) == [8, 3, 3, 2]  # NHWC: [M, kh, kw, C/group]
    args = {a.name for a in m.net.Proto().op[0].arg}
    assert {"kernel", "stride", "order", "group"} <= args


def test_sgd_step_matches_weighted_sum_formula():
    rng = np.random.default_rng(0)
    m = _linear_model("sgd1")
    optimizer.build_sgd(m, base_learning_rate=0.1, policy="step", stepsize=1, gamma=0.5)
    types = [o.type for o in m.net.Proto().op]
    assert types[-4:] == ["AtomicIter", "LearningRate", "WeightedSum", "WeightedSum"]
    lr_op = m.net.Proto().op[types.index("LearningRate")]
    assert {a.name: a for a in lr_op.arg}["base_lr"].f == pytest.approx(-0.1)
    x = _feed(rng)
    workspace.RunNetOnce(m.param_init_net)
    w0, b0 = workspace.FetchBlob("fc_w"), workspace.FetchBlob("fc_b")
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    # step policy: lr = 0.1 * 0.5 ** (iter // 1), and AtomicIter has already counted the run (iter 1)
    gw, gb = _grads(x, w0, b0)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w0 - 0.05 * gw, rtol=1e-5, atol=1e-6)
    w1, b1 = workspace.FetchBlob("fc_w"), workspace.FetchBlob("fc_b")
    workspace.RunNet(m.net)
    gw, gb = _grads(x, w1, b1)
    np.testing.assert_allclose(workspace.FetchBlob("fc_b"), b1 - 0.025 * gb, rtol=1e-5, atol=1e-6)
    assert int(workspace.FetchBlob("optimizer_iteration")[0]) == 2


def test_adagrad_step():
    rng = np.random.default_rng(1)
    m = _linear_model("ada")
    optimizer.build_adagrad(m, base_learning_rate=0.5, epsilon=1e-4)
    assert "Adagrad" in [o.type for o in m.net.Proto().op]
    x = _feed(rng)
    workspace.RunNetOnce(m.param_init_net)
    w0, b0 = workspace.FetchBlob("fc_w"), workspace.FetchBlob("fc_b")
    workspace.RunNetOnce(m.net)
    gw, _ = _grads(x, w0, b0)
    h = gw * gw
    np.testing.assert_allclose(
        workspace.FetchBlob("fc_w_squared_sum"), h, rtol=1e-4, atol=1e-8
    )  # float32 net, float64 reference
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w0 - 0.5 * gw / (np.sqrt(h) + 1e-4), rtol=1e-4, atol=1e-6)


def test_adam_step():
    rng = np.random.default_rng(2)
    m = _linear_model("adam")
    optimizer.build_adam(m, base_learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8)
    x = _feed(rng)
    workspace.RunNetOnce(m.param_init_net)
    w0, b0 = workspace.FetchBlob("fc_w"), workspace.FetchBlob("fc_b")
    workspace.RunNetOnce(m.net)
    gw, _ = _grads(x, w0, b0)
    m1, m2 = 0.1 * gw, 0.001 * gw * gw
    t = 2  # AtomicIter has counted this run when Adam reads the counter (Caffe2's t = iter + 1)
    corr = np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w_first_moment"), m1, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        workspace.FetchBlob("fc_w"), w0 - 0.01 * corr * m1 / (np.sqrt(m2) + 1e-8), rtol=1e-4, atol=1e-6
    )


def test_weight_decay_touches_weights_only():
    m = _linear_model("wd")
    optimizer.add_weight_decay(m, 1e-2)
    decayed = [list(o.input) for o in m.net.Proto().op if o.type == "WeightedSum"]
    assert decayed == [["fc_w_grad", "ONE_0_0", "fc_w", "wd_0_0"]]


def test_model_helper_errors():
    m = _linear_model("twice")
    with pytest.raises(RuntimeError, match="twice"):
        m.AddGradientOperators(["loss"])
    fresh = model_helper.ModelHelper(name="nograd")
    with pytest.raises(RuntimeError, match="AddGradientOperators first"):
        optimizer.build_sgd(fresh, 0.1)


def test_initializer_update():
    init = initializers.update_initializer(None, None, ("ConstantFill", {"value": 2.0}))
    assert init.operator_name == "ConstantFill" and init.operator_kwargs == {"value": 2.0}


def test_small_classifier_trains():
    rng = np.random.default_rng(3)
    n, d = 64, 8
    centers = rng.standard_normal((3, d)) * 3
    labels = rng.integers(0, 3, n).astype(np.int32)
    data = (centers[labels] + rng.standard_normal((n, d))).astype(np.float32)
    m = model_helper.ModelHelper(name="clf")
    h = brew.fc(m, "data", "h", dim_in=d, dim_out=16)
    h = brew.relu(m, h, h)
    pred = brew.fc(m, h, "pred", dim_in=16, dim_out=3)
    softmax = brew.softmax(m, pred, "softmax")
    xent = m.LabelCrossEntropy([softmax, "label"], "xent")
    loss = m.AveragedLoss(xent, "loss")
    brew.accuracy(m, [softmax, "label"], "accuracy")
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, base_learning_rate=0.1, policy="fixed", momentum=0.9)
    workspace.FeedBlob("data", data)
    workspace.FeedBlob("label", labels)
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    first = float(workspace.FetchBlob("loss"))
    workspace.RunNet(m.net, 60)
    assert float(workspace.FetchBlob("loss")) < 0.3 * first
    assert float(workspace.FetchBlob("accuracy")) > 0.9


def test_brew_register_refuses_a_second_helper_of_one_name():
    def c2_doubled_helper(model, val=-1):
        return val * 2

    if not brew.has_helper(c2_doubled_helper):
        brew.Register(c2_doubled_helper)
    assert brew.c2_doubled_helper(model_helper.ModelHelper(name="reg"), val=4) == 8
    with pytest.raises(AttributeError, match="c2_doubled_helper already exists"):
        brew.Register(c2_doubled_helper)
    with pytest.raises(AttributeError, match="fc already exists"):
        brew.Register(brew.fc)


@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_max_gradient_norm_scales_the_sgd_step_to_the_clip_norm(max_norm):
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="clip")
    fc = brew.fc(m, "x", "y", dim_in=3, dim_out=2)
    m.AddGradientOperators([m.net.AveragedLoss(m.net.SquaredL2Distance([fc, "t"], "d"), "loss")])
    optimizer.build_sgd(m, base_learning_rate=0.1, max_gradient_norm=max_norm)
    rng = np.random.default_rng(0)
    workspace.FeedBlob("x", rng.normal(size=(4, 3)).astype(np.float32))
    workspace.FeedBlob("t", rng.normal(size=(4, 2)).astype(np.float32))
    workspace.RunNetOnce(m.param_init_net)
    before = {p: workspace.FetchBlob(p).copy() for p in ("y_w", "y_b")}
    workspace.RunNetOnce(m.net)
    grads = {p: workspace.FetchBlob(str(m.param_to_grad[core.BlobReference(p)])) for p in before}
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values()))
    np.testing.assert_allclose(workspace.FetchBlob("norm_clipped_grad_update/global_norm"), norm, rtol=1e-5)
    ratio = min(1.0, max_norm / norm)
    assert (ratio < 1.0) == (max_norm < 1.0)  # one case clips, the other does not
    for p, w in before.items():
        np.testing.assert_allclose(workspace.FetchBlob(p), w - 0.1 * ratio * grads[p], rtol=1e-5, atol=1e-7)
