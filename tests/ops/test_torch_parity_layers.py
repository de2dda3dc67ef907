"""The model-layer op families (shape, sparse, norm, pool, conv, recurrent, Adagrad,
SigmoidCrossEntropyWithLogits) give the same values on numpy arrays and on torch CPU tensors, keep
the inputs' library, dtype and device, and update in place on torch tensors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_torch_parity import assert_same, check_in_place, check_same_values, f32, one, pos, run

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


def i64(*values):
    return np.array(values, np.int64)


def idx(r, n, d, k=None, dtype=np.int64):
    """k indices into a table of n rows (repeats likely)."""
    return r.integers(0, n, k if k is not None else d).astype(dtype)


def lengths(r, b, total):
    """b non-negative int32 lengths summing to total (some empty)."""
    cuts = np.sort(r.integers(0, total + 1, b - 1))
    return np.diff(np.r_[0, cuts, total]).astype(np.int32)


def pooled(r, n, d):
    """X with ties (rounded values) of shape [n, 2, 2d, 4], its 2x2 stride-2 maxima Y, and dY."""
    x = np.round(f32(r, n, 2, 2 * d, 4))
    y = x.reshape(n, 2, d, 2, 2, 2).max(axis=(3, 5))
    return [x, y, f32(r, *y.shape)]


def lstm_inputs(r, n, d, t=4, i=3):
    return [
        f32(r, t, n, i),
        f32(r, n, d),
        f32(r, n, d),
        f32(r, 4 * d, i) / 2,
        f32(r, 4 * d, d) / 2,
        f32(r, 4 * d),
        f32(r, 4 * d),
    ]


def lstm_cache(r, n, d):
    """A forward cache [T, N, 6H] (gates, cells, Y) of the numpy LSTM on other inputs: the kernel only reads it."""
    from asyncnet.ops.recurrent import lstm_forward

    ys, cs, acts = lstm_forward(*lstm_inputs(np.random.default_rng(int(r.integers(2**31))), n, d))
    return np.concatenate([acts, cs, ys], axis=2)


CONV = {"kernel": 3, "pad_t": 1, "pad_l": 0, "pad_b": 2, "pad_r": 1, "stride_h": 2, "dilation_w": 2}

# (op type, inputs(rng, n, d), number of outputs, args); n, d >= 1
CASES = {
    # shape
    "Reshape": (lambda r, n, d: [f32(r, n, d, 2)], 2, {"shape": [0, -1]}),
    "Reshape-input": (lambda r, n, d: [f32(r, n, d), i64(d, n)], 2, {}),
    "Flatten": (lambda r, n, d: [f32(r, n, 2, d)], 1, {"axis": 2}),
    "ResizeLike": (lambda r, n, d: [f32(r, n * d), f32(r, n, d)], 1, {}),
    "Transpose": (lambda r, n, d: [f32(r, n, d, 3)], 1, {"axes": [1, 2, 0]}),
    "Transpose-default": (lambda r, n, d: [f32(r, n, d)], 1, {}),
    "Concat": (lambda r, n, d: [f32(r, n, d), f32(r, n, 2)], 2, {"axis": 1}),
    "Concat-add_axis": (lambda r, n, d: [f32(r, n, d), f32(r, n, d), f32(r, n, d)], 2, {"axis": 0, "add_axis": 1}),
    "Split": (lambda r, n, d: [f32(r, n, 5)], 2, {"axis": 1, "split": [3, 2]}),
    "Split-input": (lambda r, n, d: [f32(r, n + 1, d), np.array([1, n], np.int32)], 2, {"axis": 0}),
    "SplitGradient": (lambda r, n, d: [f32(r, n, 5), f32(r, n, 2)], 1, {"axis": 1, "split": [3, 2], "present": [0, 1]}),
    "Slice": (lambda r, n, d: [f32(r, n + 1, d + 1)], 1, {"starts": [1, 0], "ends": [-1, -2]}),
    "SliceGradient": (lambda r, n, d: [f32(r, n + 1, d + 1), f32(r, n, d)], 1, {"starts": [1, 0], "ends": [-1, -2]}),
    "ExpandDims": (lambda r, n, d: [f32(r, n, d)], 1, {"dims": [0, 3]}),
    "Squeeze": (lambda r, n, d: [f32(r, 1, n, 1, d)], 1, {"dims": [0, 2]}),
    # sparse
    "Gather": (lambda r, n, d: [f32(r, n, 3), idx(r, n, d).reshape(1, d)], 1, {}),
    "Gather-int32": (lambda r, n, d: [f32(r, n, 3), idx(r, n, d, dtype=np.int32)], 1, {}),
    "GatherGradient": (lambda r, n, d: [f32(r, 2, d, 3), idx(r, n, 2 * d).reshape(2, d)], 2, {}),
    "SparseLengthsSum": (lambda r, n, d: [f32(r, n, 3), idx(r, n, d), lengths(r, 3, d)], 1, {}),
    "SparseLengthsSumGradient": (lambda r, n, d: [f32(r, 3, 2), lengths(r, 3, d)], 1, {}),
    "SparseLengthsWeightedSum": (lambda r, n, d: [f32(r, n, 3), f32(r, d), idx(r, n, d), lengths(r, 3, d)], 1, {}),
    "SparseLengthsWeightedSumGradient": (
        lambda r, n, d: [f32(r, 3, 2), f32(r, d), lengths(r, 3, d), f32(r, n, 2), idx(r, n, d)],
        2,
        {},
    ),
    "SparseToDense": (lambda r, n, d: [idx(r, n, d), f32(r, d, 2), f32(r, n, 1)], 1, {}),
    # norm
    "SpatialBN-test": (
        lambda r, n, d: [f32(r, n, 3, d), pos(r, 3), f32(r, 3), f32(r, 3), pos(r, 3)],
        1,
        {"is_test": 1},
    ),
    "SpatialBNGradient": (
        lambda r, n, d: [f32(r, n, 3, d + 1), pos(r, 3), f32(r, n, 3, d + 1), f32(r, 3), pos(r, 3)],
        3,
        {},
    ),
    "LayerNorm": (lambda r, n, d: [f32(r, n, 2, d)], 3, {"axis": 1}),
    "LayerNorm-affine": (
        lambda r, n, d: [f32(r, n, d), pos(r, d), f32(r, d)],
        3,
        {"elementwise_affine": 1, "epsilon": 1e-3},
    ),
    "LayerNormGradient": (lambda r, n, d: [f32(r, n, d), f32(r, n, d), f32(r, n, 1), pos(r, n, 1)], 1, {}),
    "LayerNormGradient-affine": (
        lambda r, n, d: [f32(r, n, d), f32(r, n, d), f32(r, n, 1), pos(r, n, 1), pos(r, d)],
        3,
        {"elementwise_affine": 1},
    ),
    "Dropout": (lambda r, n, d: [f32(r, n, d)], 2, {"ratio": 0.3, "seed": 5}),
    "Dropout-test": (lambda r, n, d: [f32(r, n, d)], 2, {"ratio": 0.3, "is_test": 1}),
    "DropoutGrad": (lambda r, n, d: [f32(r, n, d), f32(r, n, d) > 0], 1, {"ratio": 0.25}),
    # pool
    "MaxPool": (lambda r, n, d: [f32(r, n, 2, d + 2, 5)], 1, {"kernel": 3, "stride": 2, "pad_t": 1, "pad_r": 2}),
    "MaxPool-global": (lambda r, n, d: [f32(r, n, 3, d, 2)], 1, {"global_pooling": 1}),
    "MaxPoolGradient": (pooled, 1, {"kernel": 2, "stride": 2}),
    "AveragePool": (lambda r, n, d: [f32(r, n, 2, d + 2, 5)], 1, {"kernel": 3, "stride": 2, "pad": 1}),
    "AveragePool-include_pad": (
        lambda r, n, d: [f32(r, n, 2, d + 2, 5)],
        1,
        {"kernel": 2, "pad_b": 1, "count_include_pad": 1},
    ),
    "AveragePoolGradient": (
        lambda r, n, d: [f32(r, n, 2, d + 2, 5), f32(r, n, 2, d + 2, 3)],
        1,
        {"kernel": 3, "pad": 1, "stride_w": 2},
    ),
    # conv (the torch side runs F.conv2d and torch.autograd)
    "Conv": (lambda r, n, d: [f32(r, n, 4, d + 4, 6), f32(r, 6, 2, 3, 3), f32(r, 6)], 1, {**CONV, "group": 2}),
    "Conv-nobias": (lambda r, n, d: [f32(r, n, 3, d + 2, 4), f32(r, 2, 3, 2, 2)], 1, {"pad": 1}),
    "ConvGradient": (
        lambda r, n, d: [f32(r, n, 4, d + 4, 6), f32(r, 6, 2, 3, 3), f32(r, n, 6, (d + 4) // 2 + 1, 3)],
        3,
        {**CONV, "group": 2},
    ),
    "ConvGradient-nobias": (
        lambda r, n, d: [f32(r, n, 3, d + 2, 4), f32(r, 2, 3, 2, 2), f32(r, n, 2, d + 3, 5)],
        2,
        {"pad": 1, "no_bias": 1},
    ),
    # recurrent: X [T, N, I], h0, c0 [N, H], W_ih [4H, I], W_hh [4H, H], b_ih, b_hh [4H]; H = d, I = 3, T = 4
    "LSTM": (lambda r, n, d: lstm_inputs(r, n, d), 4, {}),
    "LSTMGradient": (lambda r, n, d: [*lstm_inputs(r, n, d), f32(r, 4, n, d), f32(r, n, d)], 7, {"grads": [1, 1, 0]}),
    "LSTMGradient-cached": (
        lambda r, n, d: [*lstm_inputs(r, n, d), lstm_cache(r, n, d), f32(r, n, d)],
        4,
        {"grads": [0, 0, 1], "cached": 1},
    ),
    # loss
    "SigmoidCrossEntropyWithLogits": (lambda r, n, d: [f32(r, n, d) * 20, r.random((n, d)).astype(np.float32)], 1, {}),
    "SigmoidCrossEntropyWithLogits-logD": (
        lambda r, n, d: [f32(r, n, d) * 5, r.random((n, d)).astype(np.float32)],
        1,
        {"log_D_trick": 1},
    ),
    "SigmoidCrossEntropyWithLogits-unjoined": (
        lambda r, n, d: [f32(r, 2, n, d), r.random((2, n, d)).astype(np.float32)],
        1,
        {"unjoined_lr_loss": 1},
    ),
    "SigmoidCrossEntropyWithLogitsGradient": (
        lambda r, n, d: [f32(r, n), f32(r, n, d) * 5, r.random((n, d)).astype(np.float32)],
        1,
        {},
    ),
    "SigmoidCrossEntropyWithLogitsGradient-logD": (
        lambda r, n, d: [f32(r, n), f32(r, n, d) * 5, r.random((n, d)).astype(np.float32)],
        1,
        {"log_D_trick": 1},
    ),
}

# updates run in place: inputs -> outputs as written (blob names), and the updated inputs
INPLACE = {
    "ScatterWeightedSum": (
        lambda r, n, d: [f32(r, n, 2), one(1.0), idx(r, n, d), f32(r, d, 2), one(-0.1)],
        ["in0"],
        {},
    ),
    "ScatterWeightedSum-decay": (
        lambda r, n, d: [f32(r, n, 2), one(0.9), idx(r, n, d), f32(r, d, 2), one(-0.1), f32(r, d, 2), one(0.5)],
        ["in0"],
        {},
    ),
    "SparseAdagrad": (
        lambda r, n, d: [f32(r, n, 2), pos(r, n, 2), idx(r, n, d), f32(r, d, 2), one(-0.1)],
        ["in0", "in1"],
        {"weight_decay": 0.01},
    ),
    "SparseAdagrad-torch": (
        lambda r, n, d: [f32(r, n, 2), pos(r, n, 2), idx(r, n, d, dtype=np.int32), f32(r, d, 2), one(0.1)],
        ["in0", "in1"],
        {"formula": "torch"},
    ),
    "Adagrad": (
        lambda r, n, d: [f32(r, n, d), pos(r, n, d), f32(r, n, d), one(-0.1)],
        ["in0", "in1"],
        {"decay": 0.9, "weight_decay": 0.01},
    ),
    "Adagrad-torch": (
        lambda r, n, d: [f32(r, n, d), pos(r, n, d), f32(r, n, d), one(0.1)],
        ["in0", "in1"],
        {"formula": "torch"},
    ),
    "SpatialBN": (
        lambda r, n, d: [f32(r, n + 1, 3, d), pos(r, 3), f32(r, 3), f32(r, 3), pos(r, 3)],
        ["y", "in3", "in4", "saved_mean", "saved_inv_var"],
        {"momentum": 0.8},
    ),
}


@settings(max_examples=500, deadline=None)
@given(case=st.sampled_from(sorted(CASES)), n=st.integers(1, 5), d=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_same_values_on_numpy_and_torch(case, n, d, seed):
    check_same_values(CASES, case, n, d, seed)


@settings(max_examples=120, deadline=None)
@given(case=st.sampled_from(sorted(INPLACE)), n=st.integers(1, 5), d=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_updates_stay_in_place_on_torch(case, n, d, seed):
    check_in_place(INPLACE, case, n, d, seed)


def test_in_place_reshape_is_a_view_of_the_torch_tensor():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (t,), (y, old) = run("Reshape", [x], ["in0", "old"], {"shape": [3, 2]}, as_torch=True)
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == (3, 2) and y.data_ptr() == t.data_ptr()
    assert old.dtype == torch.int64 and old.tolist() == [2, 3]


def test_out_of_place_shape_results_are_copies_on_torch():
    """As in Caffe2 (and on numpy): a later in-place update of the input never shows through."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for op, args in (("Reshape", {"shape": [3, 2]}), ("Flatten", {}), ("ExpandDims", {"dims": [0]}), ("Slice", {})):
        (t,), (y, *_) = run(op, [x], ["y", "old"][: 2 if op == "Reshape" else 1], args, as_torch=True)
        t.add_(1)
        assert y.reshape(-1).tolist() == list(range(6)), op


def test_sparse_indices_out_of_range_are_refused_on_torch():
    import asyncnet as an

    ws = an.Workspace()
    ws.feed("t", torch.zeros(3, 2))
    ws.feed("i", torch.tensor([0, 3]))
    net = an.Net("n")
    net.Gather(["t", "i"], "y")
    with pytest.raises(an.OperatorError, match=r"indices in \[0, 3\).*\[0, 3\]"):
        ws.run_net_once(net)


def test_dropout_masks_equal_numpy_for_one_seed_run_after_run():
    import asyncnet as an

    masks = {}
    for as_torch in (False, True):
        ws = an.Workspace()
        x = np.ones((4, 5), np.float32)
        ws.feed("x", torch.from_numpy(x) if as_torch else x)
        net = an.Net("n")
        net.Dropout("x", ["y", "mask"], ratio=0.5, seed=11)
        ws.create_net(net)
        masks[as_torch] = []
        for _ in range(3):
            ws.run_net(net.name)
            m = ws.fetch("mask")
            masks[as_torch].append(m.numpy().copy() if as_torch else m.copy())
    for a, b in zip(masks[False], masks[True]):
        np.testing.assert_array_equal(a, b)
    assert not all((m == masks[False][0]).all() for m in masks[False][1:]), "expected a new mask every run"


@pytest.mark.parametrize("lookup", ["SparseLengthsSum", "Gather"])
def test_sparse_training_step_on_torch_matches_numpy(lookup):
    """autodiff's GradientSlice into SparseAdagrad: the same step on either library, in place on torch."""
    import asyncnet as an
    from asyncnet.autodiff import add_gradient_ops

    rng = np.random.default_rng(7)
    table, moment = f32(rng, 10, 3), pos(rng, 10, 3)
    results = {}
    for as_torch in (False, True):
        ws = an.Workspace()
        lib = torch.from_numpy if as_torch else np.asarray
        feeds = {
            "t": table.copy(),
            "m": moment.copy(),
            "i": np.array([1, 7, 1, 3], np.int64),
            "l": np.array([3, 1], np.int32),
            "lr": one(-0.1),
        }
        fed = {k: lib(v) for k, v in feeds.items()}
        for k, v in fed.items():
            ws.feed(k, v)
        net = an.Net("train")
        if lookup == "Gather":
            net.Gather(["t", "i"], "y")
        else:
            net.SparseLengthsSum(["t", "i", "l"], "y")
        net.Tanh("y", "z")
        net.AveragedLoss("z", "loss")
        g = add_gradient_ops(net, "loss", wrt=["t"])["t"]
        net.SparseAdagrad(["t", "m", g.indices, g.values, "lr"], ["t", "m"])
        ws.run_net_once(net)
        assert ws.fetch("t") is fed["t"] and ws.fetch("m") is fed["m"]
        results[as_torch] = (ws.fetch("t"), ws.fetch("m"))
    for a, b, name in zip(results[False], results[True], "tm"):
        assert_same(a, b, name)
    assert not np.allclose(results[False][0], table), "the step changed nothing"
