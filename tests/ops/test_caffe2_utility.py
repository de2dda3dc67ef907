"""Alias, Range and LengthsGather against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def _run(op: str, inputs: list[np.ndarray]) -> np.ndarray:
    ws = an.Workspace()
    names = [f"in{i}" for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        ws.feed(name, value)
    ws.run_operator_once(an.OperatorDef(op, names, ["out"]))
    return ws.fetch("out")


@pytest.mark.parametrize(
    "bounds", [(10,), (np.float32(10.0),), (0,), (0, 0), (10.0, 5.0, -1.0), (2, 7), (2, 100, 30), (2, 100, -1)]
)
def test_range_is_arange(bounds):
    inputs = [np.array(b) for b in bounds]
    got = _run("Range", inputs)
    assert got.dtype == inputs[0].dtype  # Caffe2's Range is typed by its inputs
    np.testing.assert_array_equal(got, np.arange(*inputs))


def test_range_refuses_a_zero_step_and_mixed_dtypes():
    with pytest.raises(an.OperatorError, match="Step size cannot be 0"):
        _run("Range", [np.array(0), np.array(5), np.array(0)])
    with pytest.raises(an.OperatorError, match="one dtype"):
        _run("Range", [np.array(0), np.array(5.0)])


def test_alias_is_the_same_array():
    ws = an.Workspace()
    x = np.arange(5, dtype=np.float32)
    ws.feed("x", x)
    ws.run_operator_once(an.OperatorDef("Alias", ["x"], ["y"]))
    assert ws.fetch("y") is ws.fetch("x")


def test_lengths_gather_picks_segments():
    rng = np.random.default_rng(0)
    lengths = np.array([2, 0, 3, 1], np.int32)
    items = rng.standard_normal((6, 2)).astype(np.float32)
    indices = np.array([2, 1, 0, 2], np.int64)
    ends = np.cumsum(lengths)
    expected = np.concatenate([items[ends[i] - lengths[i] : ends[i]] for i in indices])
    np.testing.assert_array_equal(_run("LengthsGather", [items, lengths, indices]), expected)
    assert _run("LengthsGather", [items, lengths, np.zeros(0, np.int64)]).shape == (0, 2)
    with pytest.raises(an.OperatorError, match="out of range"):
        _run("LengthsGather", [items, lengths, np.array([4])])
    with pytest.raises(an.OperatorError, match="do not cut"):
        _run("LengthsGather", [items, np.array([1, 1], np.int32), np.array([0])])


@pytest.mark.parametrize("in_place", [False, True])
def test_unsafe_coalesce_packs_aligned_bytes_and_outputs_share_them(in_place):
    xs = [np.arange(5, dtype=np.float32), np.array(7.5), np.arange(40, dtype=np.uint8).reshape(4, 10)]
    ws = an.Workspace()
    for i, x in enumerate(xs):
        ws.feed(f"x{i}", x.copy())
    outs = [f"x{i}" if in_place else f"y{i}" for i in range(3)] + ["buf"]
    ws.run_operator_once(an.OperatorDef("UnsafeCoalesce", ["x0", "x1", "x2"], outs))
    buf = ws.fetch("buf")
    assert buf.dtype == np.uint8 and buf.size == 32 + 32 + 64  # 20, 8 and 40 bytes, each up to 32
    want = b"".join(x.tobytes() + bytes(-x.nbytes % 32) for x in xs)
    assert buf.tobytes() == want
    for name, x in zip(outs, xs):
        got = ws.fetch(name)
        assert got.dtype == x.dtype and got.shape == x.shape and np.array_equal(got, x)
    ws.fetch(outs[0])[1] = 100.0  # an output is a view of the buffer
    assert np.frombuffer(buf[:20].tobytes(), np.float32)[1] == 100.0
    with pytest.raises(an.NetDefinitionError, match="expected 3 outputs"):
        an.Net("n").UnsafeCoalesce(["a", "b"], ["a", "b"])
