"""The checkpoint carries the trainers' random generators (uint64 [workers, ops, words]) beside
the blobs, reads them back exactly, and refuses a malformed entry in one line."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import CheckpointError
from asyncnet.model import ModelHelper
from asyncnet.model.checkpoint import RANDOM, load, read, save_arrays

pytestmark = pytest.mark.timeout(60)


def _model() -> tuple[ModelHelper, dict]:
    m = ModelHelper("m", seed=0)
    m.softmax_with_loss(m.dropout(m.fc("x", "fc", 3, 2), "d", ratio=0.5), "y")
    m.train_net()
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    return m, {n: ws.fetch(n) for n in m.checkpoint_blobs}


def test_random_states_round_trip_exactly_and_load_leaves_them_out_of_the_workspace(tmp_path):
    m, arrays = _model()
    states = np.array([[[2**64 - 1, 0, 1, 2**63, 0, 7]], [[5, 6, 7, 8, 1, 2**32 - 1]]], np.uint64)
    save_arrays(m, {**arrays, RANDOM: states}, tmp_path / "c.npz")
    got, _ = read(m, tmp_path / "c.npz")
    np.testing.assert_array_equal(got[RANDOM], states)
    assert got[RANDOM].dtype == np.uint64
    ws = an.Workspace()
    load(m, ws, tmp_path / "c.npz")
    assert not ws.has(RANDOM)


def test_without_random_states_nothing_is_written(tmp_path):
    m, arrays = _model()
    save_arrays(m, arrays, tmp_path / "c.npz")
    assert RANDOM not in read(m, tmp_path / "c.npz")[0]


@pytest.mark.parametrize("bad", [np.zeros((2, 6), np.uint64), np.zeros((1, 1, 6), np.float64)])
def test_a_malformed_entry_is_refused_in_one_line(tmp_path, bad):
    m, arrays = _model()
    save_arrays(m, arrays, tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as f:
        data = {k: f[k] for k in f.files}
    np.savez(tmp_path / "bad.npz", **data, **{RANDOM: bad})
    with pytest.raises(CheckpointError) as info:
        read(m, tmp_path / "bad.npz")
    assert RANDOM in str(info.value) and "\n" not in str(info.value)
