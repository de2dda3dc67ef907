"""Placing an array keeps its shape: a 0-d numpy array (or numpy scalar) becomes a 0-d torch
tensor, as torch.from_numpy and torch.tensor make it, not a 1-element vector."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.tensor.place import place

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("value", [np.array(3.5, np.float32), np.float64(-2.0), np.array(7, np.int64)])
def test_feeding_a_0d_array_as_torch_keeps_it_0d(value):
    with an.Workspace() as ws:
        ws.feed("x", value, library="torch")
        got = ws.fetch("x")
        assert torch.is_tensor(got)
        assert tuple(got.shape) == () == torch.tensor(np.asarray(value)).shape
        assert got.item() == np.asarray(value).item()
        assert ws.fetch("x", host=True).shape == ()


def test_place_keeps_every_shape_and_makes_strided_input_contiguous():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for value in (np.array(1.0), base[0], base, base[:, ::2], base.T, np.zeros((0, 3), np.float32)):
        t = place(value, "cpu", "torch")
        assert tuple(t.shape) == value.shape
        assert t.is_contiguous()
        np.testing.assert_array_equal(t.numpy(), value)


def test_a_contiguous_array_shares_its_memory_with_the_tensor():
    a = np.zeros((2, 3), np.float32)
    place(a, "cpu", "torch")[0, 0] = 5.0
    assert a[0, 0] == 5.0
    s = np.array(0.0)
    place(s, "cpu", "torch").fill_(2.0)
    assert s == 2.0
