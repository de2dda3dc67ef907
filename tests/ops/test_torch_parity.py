"""One kernel, two libraries: every converted op gives the same values on numpy arrays and on torch
CPU tensors, and its results keep the inputs' library, dtype and device; in-place updates stay in
place on torch tensors (Hogwild shares them as it shares numpy arrays)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def pos(rng, *shape):
    return (rng.random(shape) + 0.5).astype(np.float32)


def probs(rng, n, d):
    p = rng.random((n, d)).astype(np.float32) + 0.1
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def labels(rng, n, d):
    return rng.integers(0, d, n).astype(np.int64)


def one(v):
    return np.asarray(v, np.float32)


# (op type, inputs(rng, n, d), number of outputs, args); n rows, d columns
CASES = {
    "Add": (lambda r, n, d: [f32(r, n, d), f32(r, d)], 1, {}),
    "Sub": (lambda r, n, d: [f32(r, n, d), f32(r, n, d)], 1, {}),
    "Mul-legacy": (lambda r, n, d: [f32(r, n, d), f32(r, n)], 1, {"broadcast": 1, "axis": 0}),
    "Div": (lambda r, n, d: [f32(r, n, d), pos(r, n, d)], 1, {}),
    "Sum": (lambda r, n, d: [f32(r, n, d), f32(r, n, d), f32(r, n, d)], 1, {}),
    "Scale": (lambda r, n, d: [f32(r, n, d)], 1, {"scale": 0.3}),
    "MatMul": (lambda r, n, d: [f32(r, n, d), f32(r, 3, d)], 1, {"trans_b": 1}),
    "BatchMatMul": (lambda r, n, d: [f32(r, 2, n, d), f32(r, 2, d, 3)], 1, {}),
    "FC": (lambda r, n, d: [f32(r, n, d), f32(r, 4, d), f32(r, 4)], 1, {}),
    "FCTransposed": (lambda r, n, d: [f32(r, n, d), f32(r, d, 4), f32(r, 4)], 1, {}),
    "Relu": (lambda r, n, d: [f32(r, n, d)], 1, {}),
    "Sigmoid": (lambda r, n, d: [f32(r, n, d) * 10], 1, {}),
    "Tanh": (lambda r, n, d: [f32(r, n, d)], 1, {}),
    "Softmax": (lambda r, n, d: [f32(r, n, d) * 5], 1, {}),
    "SumReduceLike": (lambda r, n, d: [f32(r, n, d), f32(r, d)], 1, {"scale": -1.0}),
    "SumReduceLike-legacy": (lambda r, n, d: [f32(r, n, d, 2), f32(r, d)], 1, {"axis": 1}),
    "MatMulGradient": (lambda r, n, d: [f32(r, n, d), f32(r, d, 3), f32(r, n, 3)], 2, {}),
    "FCGradient": (lambda r, n, d: [f32(r, n, d), f32(r, 4, d), f32(r, n, 4)], 3, {}),
    "FCTransposedGradient": (lambda r, n, d: [f32(r, n, d), f32(r, d, 4), f32(r, n, 4)], 3, {}),
    "ReluGradient": (lambda r, n, d: [np.maximum(f32(r, n, d), 0), f32(r, n, d)], 1, {}),
    "SigmoidGradient": (lambda r, n, d: [pos(r, n, d) / 2, f32(r, n, d)], 1, {}),
    "TanhGradient": (lambda r, n, d: [pos(r, n, d) - 1, f32(r, n, d)], 1, {}),
    "SoftmaxGradient": (lambda r, n, d: [probs(r, n, d), f32(r, n, d)], 1, {}),
    "SoftmaxWithLoss": (lambda r, n, d: [f32(r, n, d) * 5, labels(r, n, d)], 2, {}),
    "SoftmaxWithLossGradient": (lambda r, n, d: [probs(r, n, d), labels(r, n, d), one(0.7)], 1, {}),
    "LabelCrossEntropy": (lambda r, n, d: [probs(r, n, d), labels(r, n, d)], 1, {}),
    "LabelCrossEntropyGradient": (lambda r, n, d: [probs(r, n, d), labels(r, n, d), f32(r, n)], 1, {}),
    "AveragedLoss": (lambda r, n, d: [f32(r, n, d)], 1, {}),
    "AveragedLossGradient": (lambda r, n, d: [f32(r, n, d), one(2.0)], 1, {}),
    "SquaredL2": (lambda r, n, d: [f32(r, n, d), f32(r, n, d)], 1, {}),
    "SquaredL2Gradient": (lambda r, n, d: [f32(r, n, d), f32(r, n, d), f32(r, n)], 2, {}),
    "Accuracy": (lambda r, n, d: [f32(r, n, d), labels(r, n, d)], 1, {"top_k": 2}),
    "WeightedSum": (lambda r, n, d: [f32(r, n, d), one(0.5), f32(r, n, d), one(-2.0)], 1, {}),
    "WeightedSumGradient": (
        lambda r, n, d: [f32(r, n, d), f32(r, n, d), one(0.5), f32(r, n, d), one(2.0)],
        4,
        {"grad_on_w": 1},
    ),
    "MomentumSGD": (lambda r, n, d: [f32(r, n, d), f32(r, n, d), one(0.1)], 2, {"momentum": 0.9, "nesterov": 1}),
    "LearningRate": (lambda r, n, d: [np.array([n * d], np.int64)], 1, {"base_lr": 0.5, "policy": "exp", "gamma": 0.9}),
    "Copy": (lambda r, n, d: [f32(r, n, d)], 1, {}),
    "LT": (lambda r, n, d: [f32(r, n, d), f32(r, d)], 1, {}),
    "EQ": (lambda r, n, d: [np.round(f32(r, n, d)), np.round(f32(r, n, d))], 1, {}),
    "GE-legacy": (lambda r, n, d: [f32(r, n, d), f32(r, n)], 1, {"broadcast": 1, "axis": 0}),
    "Xor": (lambda r, n, d: [f32(r, n, d) > 0, f32(r, n, d) > 0], 1, {}),
    "And": (lambda r, n, d: [f32(r, n, d) > 0, f32(r, d) > 0], 1, {}),
    "Not": (lambda r, n, d: [f32(r, n, d) > 0], 1, {}),
    "Cast": (lambda r, n, d: [f32(r, n, d) * 10], 1, {"to": "int32"}),
    "Cast-bool": (lambda r, n, d: [np.round(f32(r, n, d))], 1, {"to": 5}),
    "EnsureCPUOutput": (lambda r, n, d: [f32(r, n, d)], 1, {}),
    "CopyFromCPUInput": (lambda r, n, d: [f32(r, n, d)], 1, {}),
}

# updates run in place: inputs -> outputs as written (blob names), and the updated inputs
INPLACE = {
    "SGD": (lambda r, n, d: [f32(r, n, d), f32(r, n, d), one(0.1)], ["in0"], {"weight_decay": 0.01}),
    "MomentumSGDUpdate": (
        lambda r, n, d: [f32(r, n, d), f32(r, n, d), one(0.1), f32(r, n, d)],
        ["in0", "in1", "in3"],
        {"momentum": 0.9, "weight_decay": 0.01},
    ),
    "MomentumSGDUpdate-torch": (
        lambda r, n, d: [f32(r, n, d), f32(r, n, d), one(0.1), f32(r, n, d)],
        ["in0", "in1", "in3"],
        {"momentum": 0.9, "nesterov": 1, "formula": "torch"},
    ),
    "Adam": (
        lambda r, n, d: [f32(r, n, d), f32(r, n, d), pos(r, n, d), f32(r, n, d), one(-0.01), np.array([3], np.int64)],
        ["in0", "in1", "in2"],
        {},
    ),
    "Adam-torch": (
        lambda r, n, d: [f32(r, n, d), f32(r, n, d), pos(r, n, d), f32(r, n, d), one(0.01), np.array([3], np.int64)],
        ["in0", "in1", "in2"],
        {"formula": "torch", "weight_decay": 0.1},
    ),
    "WeightedSum": (lambda r, n, d: [f32(r, n, d), one(0.9), f32(r, n, d), one(-0.1)], ["in0"], {}),
    "Iter": (lambda r, n, d: [np.array([n], np.int64)], ["in0"], {}),
}


def run(op_type, inputs, outputs, args, as_torch):
    ws = an.Workspace()
    names = [f"in{i}" for i in range(len(inputs))]
    fed = [torch.from_numpy(v.copy()) if as_torch else v.copy() for v in inputs]
    for name, v in zip(names, fed):
        ws.feed(name, v)
    net = an.Net("t")
    net.add_op(op_type.split("-")[0], names, outputs, **args)
    ws.run_net_once(net)
    return fed, [ws.fetch(o) for o in outputs]


def assert_same(np_out, t_out, where):
    assert isinstance(t_out, torch.Tensor), f"{where}: torch inputs gave {type(t_out).__name__}"
    assert isinstance(np_out, np.ndarray), f"{where}: numpy inputs gave {type(np_out).__name__}"
    assert t_out.device.type == "cpu"
    assert str(t_out.dtype).rpartition(".")[2] == str(np_out.dtype), where
    assert tuple(t_out.shape) == np_out.shape, where
    # float32 sums in another order: the rounding error scales with the largest values summed,
    # so an element near 0 is compared on the output's scale (a conv gradient once differed by
    # 7.1e-6 where its largest value was ~20 and torch used another thread count)
    scale = float(np.max(np.abs(np_out), initial=1.0)) if np_out.dtype.kind == "f" else 1.0
    np.testing.assert_allclose(t_out.numpy(), np_out, rtol=2e-5, atol=2e-6 * scale, err_msg=where)


def check_same_values(cases, case, n, d, seed):
    """Case ``case`` of ``cases`` gives the same values (assert_same) on numpy and on torch inputs."""
    make, n_out, args = cases[case]
    inputs = make(np.random.default_rng(seed), n, d)
    outs = [f"out{i}" for i in range(n_out)]
    _, np_outs = run(case, inputs, outs, args, as_torch=False)
    _, t_outs = run(case, inputs, outs, args, as_torch=True)
    for i, (a, b) in enumerate(zip(np_outs, t_outs)):
        assert_same(a, b, f"{case} output {i}")


def check_in_place(cases, case, n, d, seed):
    """Outputs named ``in{i}`` of case ``case`` update input i's array or tensor in place, and
    every output has the same values on numpy and on torch."""
    make, outputs, args = cases[case]
    inputs = make(np.random.default_rng(seed), n, d)
    np_fed, np_outs = run(case, inputs, outputs, args, as_torch=False)
    t_fed, t_outs = run(case, inputs, outputs, args, as_torch=True)
    for name, a, b in zip(outputs, np_outs, t_outs):
        if name.startswith("in"):
            i = int(name[2:])
            assert b is t_fed[i], f"{case}: {name} was rebound, not updated in place"
            assert a is np_fed[i]
        assert_same(a, b, f"{case} {name}")


@settings(max_examples=250)
@given(case=st.sampled_from(sorted(CASES)), n=st.integers(1, 5), d=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_same_values_on_numpy_and_torch(case, n, d, seed):
    check_same_values(CASES, case, n, d, seed)


@settings(max_examples=60)
@given(case=st.sampled_from(sorted(INPLACE)), n=st.integers(1, 5), d=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_updates_stay_in_place_on_torch(case, n, d, seed):
    check_in_place(INPLACE, case, n, d, seed)


def test_fills_give_torch_tensors_with_the_numpy_values():
    def init(library):
        net = an.Net("init", device_option=an.DeviceOption(random_seed=3))
        net.XavierFill([], "w", shape=[4, 3], library=library)
        net.GaussianFill([], "g", shape=[2], library=library)
        net.UniformFill([], "u", shape=[2], min=-1.0, max=1.0, library=library)
        net.ConstantFill([], "c", shape=[2], value=7, dtype="int64", library=library)
        ws = an.Workspace()
        ws.run_net_once(net)
        return ws

    a, b = init("numpy"), init("torch")
    for name in ("w", "g", "u", "c"):
        assert_same(a.fetch(name), b.fetch(name), name)
        np.testing.assert_array_equal(b.fetch(name, host=True), a.fetch(name))


def test_fill_follows_a_torch_input_whose_shape_it_copies():
    ws = an.Workspace()
    ws.feed("x", torch.zeros(2, 3, dtype=torch.float64))
    net = an.Net("n")
    net.ConstantFill(["x"], "y", value=1.5)
    ws.run_net_once(net)
    y = ws.fetch("y")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and tuple(y.shape) == (2, 3)


def test_integer_division_truncates_on_torch_as_on_numpy():
    a = np.array([7, -7, 7, -7, 2**62 + 1], np.int64)
    b = np.array([2, 2, -2, -2, 1], np.int64)
    _, (np_out,) = run("Div", [a, b], ["c"], {}, as_torch=False)
    _, (t_out,) = run("Div", [a, b], ["c"], {}, as_torch=True)
    assert np_out.tolist() == [3, -3, -3, 3, 2**62 + 1]
    assert t_out.tolist() == np_out.tolist() and t_out.dtype == torch.int64


def test_mixed_dtypes_are_refused_on_torch_as_on_numpy():
    for as_torch in (False, True):
        with pytest.raises(an.OperatorError, match="one dtype"):
            ws = an.Workspace()
            a, b = np.ones(2, np.float32), np.ones(2, np.float64)
            ws.feed("a", torch.from_numpy(a) if as_torch else a)
            ws.feed("b", torch.from_numpy(b) if as_torch else b)
            net = an.Net("n")
            net.Add(["a", "b"], "c")
            ws.run_net_once(net)


def test_mixing_libraries_names_both_inputs():
    ws = an.Workspace()
    ws.feed("x", np.ones((2, 3), np.float32))
    ws.feed("w", torch.ones(4, 3))
    ws.feed("b", np.ones(4, np.float32))
    net = an.Net("n")
    net.FC(["x", "w", "b"], "y")
    with pytest.raises(an.OperatorError) as info:
        ws.run_net_once(net)
    msg = str(info.value)
    assert "TypeError" in msg and "'x' (numpy on cpu)" in msg and "'w' (torch on cpu)" in msg
    assert isinstance(info.value.__cause__, TypeError)


def test_a_numpy_learning_rate_drives_a_torch_update():
    """One-element inputs are read as numbers: a numpy lr (from a numpy Iter) updates torch params."""
    ws = an.Workspace()
    p = torch.ones(3)
    ws.feed("p", p)
    ws.feed("g", torch.full((3,), 2.0))
    ws.feed("iter", np.array([0], np.int64))
    net = an.Net("n")
    net.Iter("iter", "iter")
    net.LearningRate("iter", "lr", base_lr=0.25)
    net.SGD(["p", "g", "lr"], "p")
    ws.run_net_once(net)
    assert ws.fetch("p") is p and p.tolist() == [0.5, 0.5, 0.5]
