"""optimizer.build_fp16_sgd and the ops it emits (FloatToHalf, HalfToFloat, FP16MomentumSGDUpdate,
FP32MomentumSGDUpdate) on the CPU: the updates follow torch.optim.SGD's trajectory (Caffe2's
moment is lr times torch's buffer), the op sequence is Caffe2's, and fp16 models train."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import OperatorError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)


def _torch_sgd_steps(p0, grads, lr, momentum, wd, nesterov):
    p = torch.tensor(p0.astype(np.float64), requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov)
    for g in grads:
        p.grad = torch.tensor(g.astype(np.float64))
        opt.step()
    return p.detach().numpy()


def _caffe2_steps(op_type, dtype, p0, grads, lr, momentum, wd, nesterov, **extra):
    ws = an.Workspace()
    ws.feed("param", p0.astype(dtype))
    ws.feed("moment", np.zeros_like(p0, dtype=dtype))
    ws.feed("lr", np.array([lr], np.float32))
    net = an.Net("update")
    net.add_op(op_type, ["grad", "moment", "lr", "param"], ["grad", "moment", "param"],
               momentum=momentum, nesterov=nesterov, weight_decay=wd, **extra)  # fmt: skip
    ws.feed("grad", grads[0].astype(dtype))
    ws.create_net(net)
    for g in grads:
        ws.feed("grad", g.astype(dtype))
        ws.run_net("update")
    return ws.fetch("param")


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize(
    "op_type,dtype,extra,atol",
    [
        ("FP32MomentumSGDUpdate", np.float32, {}, 1e-5),
        ("FP16MomentumSGDUpdate", np.float16, {"fp32_update": True}, 2e-2),
        ("FP16MomentumSGDUpdate", np.float16, {}, 3e-2),
    ],
)
def test_momentum_updates_follow_torch_sgd(op_type, dtype, extra, atol, nesterov):
    rng = np.random.default_rng(0)
    p0 = rng.uniform(-1, 1, 64)
    grads = [rng.uniform(-1, 1, 64) for _ in range(5)]
    got = _caffe2_steps(op_type, dtype, p0, grads, 0.1, 0.9, 1e-2, nesterov, **extra)
    assert got.dtype == dtype
    want = _torch_sgd_steps(p0.astype(dtype), [g.astype(dtype) for g in grads], 0.1, 0.9, 1e-2, nesterov)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=atol)
    assert np.abs(want - p0).max() > 20 * atol  # the params did move


def test_fp16_update_rounds_like_the_half_kernel():
    """One plain step: each fused multiply-add rounds to float16, so the step is exactly
    half(lr * half(g + wd * p) + half(mu * m)) and param = half(p - step)."""
    rng = np.random.default_rng(1)
    p, g, m = (rng.uniform(-1, 1, 33).astype(np.float16) for _ in range(3))
    ws = an.Workspace()
    for k, v in {"p": p, "g": g, "m": m, "lr": np.array([0.3], np.float32)}.items():
        ws.feed(k, v)
    net = an.Net("one")
    net.FP16MomentumSGDUpdate(["g", "m", "lr", "p"], ["step", "m2", "p2"], momentum=0.7, weight_decay=0.05)
    ws.run_net_once(net)
    f32, h = np.float32, np.float16
    ng = (f32(h(0.05)) * p.astype(f32) + g.astype(f32)).astype(h).astype(f32)
    step = (f32(h(0.3)) * ng + (f32(h(0.7)) * m.astype(f32)).astype(h).astype(f32)).astype(h)
    np.testing.assert_array_equal(ws.fetch("step"), step)
    np.testing.assert_array_equal(ws.fetch("m2"), step)
    np.testing.assert_array_equal(ws.fetch("p2"), (p.astype(f32) - step.astype(f32)).astype(h))
    np.testing.assert_array_equal(ws.fetch("p"), p)  # not in place: the input is untouched


def test_update_checks_dtypes():
    ws = an.Workspace()
    for k in "gmp":
        ws.feed(k, np.zeros(3, np.float32))
    ws.feed("lr", np.array([0.1], np.float32))
    net = an.Net("bad")
    net.FP16MomentumSGDUpdate(["g", "m", "lr", "p"], ["g", "m", "p"])
    with pytest.raises(OperatorError, match="expected float16"):
        ws.run_net_once(net)


def test_float_half_conversions_and_gradients():
    x = np.array([0.1, -2.5, 1e5, -1e5], np.float32)
    ws = an.Workspace()
    ws.feed("x", x)
    net = an.Net("conv")
    net.FloatToHalf("x", "h")
    net.FloatToHalf("x", "hc", clip=True)
    net.HalfToFloat("h", "y")
    ws.run_net_once(net)
    with np.errstate(over="ignore"):  # overflow gives inf, as a cast does
        np.testing.assert_array_equal(ws.fetch("h"), x.astype(np.float16))
    np.testing.assert_array_equal(ws.fetch("hc"), np.array([0.1, -2.5, 65504, -65504], np.float16))
    assert ws.fetch("y").dtype == np.float32
    t = torch.tensor(x[:2])
    assert torch.equal(torch.from_numpy(ws.fetch("h")[:2]), t.half())
    from asyncnet.autodiff import add_gradient_ops

    train = an.Net("grad")
    train.FloatToHalf("x2", "h2")
    train.HalfToFloat("h2", "y2")
    train.AveragedLoss("y2", "loss")
    ws.feed("x2", x[:2])
    grads = add_gradient_ops(train, "loss")
    ws.run_net_once(train)
    assert ws.fetch(grads["x2"]).dtype == np.float32 and np.allclose(ws.fetch(grads["x2"]), 0.5)
    bad = an.Net("bad")
    bad.HalfToFloat("x", "z")
    with pytest.raises(OperatorError, match="expected float16"):
        ws.run_net_once(bad)


def _fp16_model(name, spatbn_name="fc"):
    from caffe2.python import brew, model_helper
    from caffe2.python.modeling import initializers

    m = model_helper.ModelHelper(name=name)
    fc = brew.fc(m, "data", spatbn_name, 4, 1, WeightInitializer=initializers.PseudoFP16Initializer,
                 BiasInitializer=initializers.PseudoFP16Initializer)  # fmt: skip
    pred = m.HalfToFloat(fc, "pred32")
    dist = m.SquaredL2Distance([pred, "label"], "dist")
    loss = m.AveragedLoss(dist, "loss")
    m.AddGradientOperators([loss])
    return m


def test_build_fp16_sgd_emits_caffe2_op_sequence():
    from caffe2.python import core, optimizer

    m = _fp16_model("fp16_ops")
    opt = optimizer.build_fp16_sgd(m, 0.1, momentum=0.9, nesterov=1, weight_decay=1e-4, policy="step",
                                   stepsize=10, gamma=0.1)  # fmt: skip
    assert isinstance(opt, optimizer.FP16SgdOptimizer)
    init_ops = [(op.type, list(op.input), list(op.output)) for op in m.param_init_net.Proto().op]
    assert ("ConstantFill", ["fc_w_fp32"], ["fc_w_momentum_fp32"]) in init_ops
    assert ("FloatToHalf", ["fc_w_momentum_fp32"], ["fc_w_momentum"]) in init_ops
    updates = [op for op in m.net.Proto().op if op.type.endswith("MomentumSGDUpdate")]
    assert [op.type for op in updates] == ["FP16MomentumSGDUpdate"] * 2
    w = next(op for op in updates if "fc_w" in op.input)
    grad = str(m.param_to_grad[core.BlobReference("fc_w")])
    assert list(w.input) == [grad, "fc_w_momentum", w.input[2], "fc_w"]
    assert list(w.output) == [grad, "fc_w_momentum", "fc_w"]
    args = {a.name: (a.f if a.HasField("f") else a.i) for a in w.arg}
    assert args["momentum"] == pytest.approx(0.9) and args["nesterov"] == 1
    assert args["weight_decay"] == pytest.approx(1e-4)
    lr_op = next(op for op in m.net.Proto().op if op.type == "LearningRate")
    lr_args = {a.name: (a.f if a.HasField("f") else a.i if a.HasField("i") else a.s) for a in lr_op.arg}
    assert lr_args["base_lr"] == pytest.approx(0.1) and lr_args["policy"] == b"step"


def test_build_fp16_sgd_fp32_update_for_spatbn_and_plain_params():
    from caffe2.python import brew, model_helper, optimizer

    m = model_helper.ModelHelper(name="fp32_params")
    fc = brew.fc(m, "data", "spatbn_fc", 4, 1)  # fp32 params: no fp16 copy
    loss = m.AveragedLoss(m.SquaredL2Distance([fc, "label"], "dist"), "loss")
    m.AddGradientOperators([loss])
    optimizer.build_fp16_sgd(m, 0.1, momentum=0.9)
    updates = [op for op in m.net.Proto().op if op.type.endswith("MomentumSGDUpdate")]
    assert [op.type for op in updates] == ["FP32MomentumSGDUpdate"] * 2
    assert all(op.input[1].endswith("_momentum_fp32") for op in updates)


@pytest.mark.parametrize("build", ["fp16", "multi_precision"])
def test_fp16_model_trains_on_cpu(build):
    from caffe2.python import optimizer, workspace

    m = _fp16_model(f"fp16_train_{build}")
    if build == "fp16":
        optimizer.build_fp16_sgd(m, 0.05, momentum=0.9, nesterov=1, weight_decay=1e-4)
    else:
        optimizer.build_multi_precision_sgd(m, 0.05, momentum=0.9, nesterov=1)
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (32, 4)).astype(np.float16)
    y = (x.astype(np.float32) @ np.array([[0.5], [-1.0], [0.25], [0.75]], np.float32) + 0.1).astype(np.float32)
    workspace.SwitchWorkspace(f"fp16_train_{build}", True)
    try:
        workspace.FeedBlob("data", x)
        workspace.FeedBlob("label", y)
        workspace.RunNetOnce(m.param_init_net)
        assert workspace.FetchBlob("fc_w").dtype == np.float16
        workspace.CreateNet(m.net)
        losses = []
        for _ in range(60):
            workspace.RunNet(m.net)
            losses.append(float(workspace.FetchBlob("loss")))
        assert workspace.FetchBlob("fc_w").dtype == np.float16
    finally:
        workspace.ResetWorkspace()
        workspace.SwitchWorkspace("default")
    assert np.isfinite(losses).all() and losses[-1] < 0.1 * losses[0]


def test_resnet50_fp16_training_net_builds_on_cpu():
    """ResNet-50 with fp16 parameters and build_fp16_sgd, as resnet50_trainer's --dtype float16
    --float16_compute sets it up with data_parallel_model on a CPU device: the nets create."""
    from caffe2.python import brew, core, data_parallel_model, model_helper, optimizer, workspace
    from caffe2.python.modeling.initializers import PseudoFP16Initializer
    from caffe2.python.models import resnet

    model = model_helper.ModelHelper(name="resnet50_fp16", arg_scope={"order": "NCHW", "use_cudnn": True})

    def add_input(m):
        m.param_init_net.GaussianFill([], ["data_fp16"], shape=[2, 3, 32, 32])
        m.param_init_net.FloatToHalf("data_fp16", "data")
        m.param_init_net.ConstantFill([], ["label"], shape=[2], value=1, dtype=core.DataType.INT32)

    def add_forward(m, loss_scale):
        with brew.arg_scope([brew.conv, brew.fc], WeightInitializer=PseudoFP16Initializer,
                            BiasInitializer=PseudoFP16Initializer, float16_compute=True):  # fmt: skip
            pred = resnet.create_resnet50(m, "data", num_input_channels=3, num_labels=10, no_bias=True, no_loss=True)
        pred = m.net.HalfToFloat(pred, pred + "_fp32")
        softmax, loss = m.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
        brew.accuracy(m, [softmax, "label"], "accuracy")
        return [m.Scale(loss, scale=loss_scale)]

    def add_optimizer(m):
        return optimizer.build_fp16_sgd(m, 0.1, momentum=0.9, nesterov=1, weight_decay=1e-4, policy="step",
                                        stepsize=10, gamma=0.1)  # fmt: skip

    data_parallel_model.Parallelize(model, input_builder_fun=add_input, forward_pass_builder_fun=add_forward,
                                    optimizer_builder_fun=add_optimizer, devices=[0], cpu_device=True)  # fmt: skip
    updates = [op for op in model.net.Proto().op if op.type.endswith("MomentumSGDUpdate")]
    fp16 = [op.input[3] for op in updates if op.type == "FP16MomentumSGDUpdate"]
    fp32 = [op.input[3] for op in updates if op.type == "FP32MomentumSGDUpdate"]
    assert "cpu_0/conv1_w" in fp16 and "cpu_0/last_out_L10_w" in fp16
    assert fp32 and all("spatbn" in p for p in fp32)
    workspace.RunNetOnce(model.param_init_net)
    assert workspace.FetchBlob("cpu_0/conv1_w").dtype == np.float16
    assert workspace.FetchBlob("cpu_0/conv1_w_momentum").dtype == np.float16
    assert workspace.CreateNet(model.net)
