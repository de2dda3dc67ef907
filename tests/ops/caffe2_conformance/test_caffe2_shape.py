"""Concat, Split, Reshape, Transpose, ExpandDims, Squeeze and Flatten against Caffe2's tests.

Sources: caffe2/python/operator_test/concat_split_op_test.py (its _tensor_splits strategy: any
axis, negative too, and split points that may repeat, so pieces may be empty; add_axis),
reshape_ops_test.py (every case of _test_reshape_output_and_gradient: 0 copies the input's dim
unless the tensor is empty, -1 is inferred, 0 when the tensor is empty; the shape as an
argument or as an int32/int64 input; in place; old_shape output), caffe2/operators/
expand_squeeze_dims_op.h (dims sorted, a repeated dim taken once with a logged warning),
transpose_op.h (axes default: reversed), flatten_op.h.
"""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=15, deadline=None)


def run(op: str, inputs: dict[str, np.ndarray], outs, **args) -> list[np.ndarray]:
    return run_op(op, inputs, outs, **args)


@st.composite
def tensor_splits(draw, add_axis=False):  # concat_split_op_test.py's _tensor_splits
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=4, max_side=6))
    tensor = np.random.default_rng(draw(st.integers(0, 2**16))).random(shape).astype(np.float32)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    if add_axis:
        return axis, np.ones(shape[axis], np.int32), [np.array(tensor.take(i, axis=axis)) for i in range(shape[axis])]
    splits = sorted(draw(st.lists(st.integers(0, shape[axis]), max_size=4)) + [0, shape[axis]])
    return (
        axis,
        np.diff(splits).astype(np.int32),
        [tensor.take(range(splits[i], splits[i + 1]), axis=axis) for i in range(len(splits) - 1)],
    )


@FEW
@given(ts=tensor_splits())
def test_concat(ts):
    axis, _, pieces = ts
    y, info = run("Concat", {f"x{i}": p for i, p in enumerate(pieces)}, ["y", "info"], axis=axis)
    np.testing.assert_array_equal(y, np.concatenate(pieces, axis=axis))
    assert info.dtype == np.int32 and info.tolist() == [p.shape[axis] for p in pieces]


@FEW
@given(ts=tensor_splits(add_axis=True))
def test_concat_add_axis(ts):
    axis, _, pieces = ts
    y, info = run("Concat", {f"x{i}": p for i, p in enumerate(pieces)}, ["y", "info"], axis=axis, add_axis=1)
    np.testing.assert_array_equal(y, np.concatenate([np.expand_dims(p, axis) for p in pieces], axis=axis))
    assert info.tolist() == [1] * len(pieces)


@FEW
@given(ts=tensor_splits(), as_input=st.booleans())
def test_split(ts, as_input):
    axis, split, pieces = ts
    x = np.concatenate(pieces, axis=axis)
    outs = [f"y{i}" for i in range(len(split))]
    if as_input:
        got = run("Split", {"x": x, "split": split}, outs, axis=axis)
    else:
        got = run("Split", {"x": x}, outs, axis=axis, split=split.tolist())
    for g, p in zip(got, pieces):
        np.testing.assert_array_equal(g, p)


def test_concat_and_split_gradients_are_each_others():
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 3)), rng.random((2, 1))
    net = an.Net("g")
    net.Concat(["a", "b"], ["y", "info"], axis=1)
    net.Split("y", ["p", "q"], axis=1, split=[1, 3])
    net.Mul(["q", "r"], "qr")
    net.AveragedLoss("qr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["a", "b"], dtype="float64")
    ws = an.Workspace()
    r = rng.random((2, 3))
    for k, v in {"a": a, "b": b, "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    full = np.concatenate([np.zeros((2, 1)), r / 6], axis=1)  # d loss / d y: only q's columns
    np.testing.assert_allclose(ws.fetch(names["a"]), full[:, :3])
    np.testing.assert_allclose(ws.fetch(names["b"]), full[:, 3:])


# reshape_ops_test.py: (old shape, new shape, expected shape)
RESHAPES = [
    ((4, 2, 1), (2, 4), (2, 4)),
    ((4, 2, 1), (-1, 8), (1, 8)),
    ((4, 2, 1), (0, 0, 0), (4, 2, 1)),
    ((4, 2, 1), (0, 2, 1), (4, 2, 1)),
    ((4, 2, 1), (0, -1, 0), (4, 2, 1)),
    ((4, 3, 2), (-1, 0), (8, 3)),
    ((4, 2), (1, 2, -1), (1, 2, 4)),
    ((1,), (1, -1), (1, 1)),
]
# for an empty tensor Caffe2 keeps a 0 as a literal 0 (it copies dims only when the tensor has elements)
# and sets the -1 to 0
EMPTY_RESHAPES = [
    ((0, 0), (0, 0, 0), (0, 0, 0)),
    ((2, 0), (-1, 0), (0, 0)),
    ((4, 0), (1, -1), (1, 0)),
    ((0,), (1, -1), (1, 0)),
    ((0,), (0, -1), (0, 0)),
]


def _check_reshape(old, new, want, how, in_place):
    x = np.random.default_rng(0).random(old).astype(np.float32)
    out = "x" if in_place else "y"
    if how == "arg":
        y, old_shape = run("Reshape", {"x": x.copy()}, [out, "old"], shape=list(new))
    else:
        y, old_shape = run(
            "Reshape", {"x": x.copy(), "s": np.array(new, np.int64 if how == "int64" else np.int32)}, [out, "old"]
        )
    assert y.shape == want
    np.testing.assert_array_equal(y.ravel(), x.ravel())
    assert old_shape.dtype == np.int64 and old_shape.tolist() == list(old)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("how", ["arg", "int32", "int64"])
@pytest.mark.parametrize("old,new,want", RESHAPES)
def test_reshape(old, new, want, how, in_place):
    _check_reshape(old, new, want, how, in_place)


@pytest.mark.parametrize("old,new,want", EMPTY_RESHAPES)
def test_reshape_empty_tensor(old, new, want):
    _check_reshape(old, new, want, "int64", False)


def test_reshape_gradient_and_errors():
    rng = np.random.default_rng(1)
    x, w = rng.random((4, 2, 1)), rng.random((1, 8))
    net = an.Net("g")
    net.Reshape("x", ["xr", "old"], shape=[1, 8])
    net.Mul(["xr", "w"], "p")
    net.AveragedLoss("p", "loss")
    names = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
    ws = an.Workspace()
    ws.feed("x", x)
    ws.feed("w", w)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(names["x"]), (w / 8).reshape(x.shape))
    for new in ([3, -1], [-1, -1], [4, 0, 0, 0]):  # wrong size, two unknowns, a non-zero tensor to zero size
        with pytest.raises(an.AsyncNetError):
            run("Reshape", {"x": x}, ["y", "old"], shape=new)


def test_transpose_flatten_squeeze_expand():
    x = np.random.default_rng(2).random((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run("Transpose", {"x": x}, ["y"])[0], x.transpose())  # axes default: reversed
    np.testing.assert_array_equal(run("Transpose", {"x": x}, ["y"], axes=[1, 0, 2])[0], x.transpose(1, 0, 2))
    for axis, want in ((0, (1, 24)), (1, (2, 12)), (2, (6, 4)), (3, (24, 1))):
        assert run("Flatten", {"x": x}, ["y"], axis=axis)[0].shape == want
    assert run("ExpandDims", {"x": x}, ["y"], dims=[3, 0])[0].shape == (1, 2, 3, 1, 4)  # dims sorted, inserted in turn
    assert run("Squeeze", {"x": x.reshape(1, 2, 1, 3, 4)}, ["y"], dims=[2, 0])[0].shape == (2, 3, 4)
    with pytest.raises(an.AsyncNetError, match="size 1"):
        run("Squeeze", {"x": x}, ["y"], dims=[0])


@pytest.mark.parametrize("op,shape,want", [("ExpandDims", (2, 3), (1, 2, 3)), ("Squeeze", (1, 2, 3), (2, 3))])
def test_expand_squeeze_take_a_repeated_dim_once(op, shape, want):
    # expand_squeeze_dims_op.h sorts and de-duplicates `dims` (with a logged warning), so [0, 0] is [0]
    (y,) = run(op, {"x": np.ones(shape, np.float32)}, ["y"], dims=[0, 0])
    assert y.shape == want
