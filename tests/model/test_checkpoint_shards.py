"""Sharded checkpoints: the main file names its shard files, and reading it reads them too."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet._atomicio import atomic_write_npz
from asyncnet.errors import CheckpointError
from asyncnet.model import ModelHelper
from asyncnet.model.checkpoint import SHARDS, load, read, save_arrays

pytestmark = pytest.mark.timeout(60)


def _model_and_arrays():
    m = ModelHelper()
    m.fc("x", "fc1", 2, 3)
    m.fc("fc1", "fc2", 3, 1)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    return m, {n: np.asarray(ws.fetch(n)) + 1 for n in m.checkpoint_blobs}


def test_a_sharded_checkpoint_reads_as_one(tmp_path):
    m, arrays = _model_and_arrays()
    atomic_write_npz(tmp_path / "part.npz", {n: arrays[n] for n in ("fc2_w", "fc2_b")})
    save_arrays(m, arrays, tmp_path / "main.npz", shards={"part.npz": ["fc2_w", "fc2_b"]})
    assert {"fc2_w", "fc2_b"}.isdisjoint(np.load(tmp_path / "main.npz").files)
    got, _ = read(m, tmp_path / "main.npz")
    for n in m.checkpoint_blobs:
        np.testing.assert_array_equal(got[n], arrays[n])
    # a shard's arrays are mapped, not read: a rank keeping only its own tables loads no other
    assert isinstance(got["fc2_w"], np.memmap) and not got["fc2_w"].flags.writeable
    assert not isinstance(got["fc1_w"], np.memmap)
    ws = an.Workspace()
    load(m, ws, tmp_path / "main.npz")
    np.testing.assert_array_equal(ws.fetch("fc2_w"), arrays["fc2_w"])


def test_a_shard_of_any_layout_reads_back(tmp_path):
    m, arrays = _model_and_arrays()
    shard = {"fc2_w": np.asfortranarray(arrays["fc2_w"]), "fc2_b": arrays["fc2_b"], "extra": np.zeros((0, 3))}
    atomic_write_npz(tmp_path / "part.npz", shard)
    save_arrays(m, arrays, tmp_path / "main.npz", shards={"part.npz": ["fc2_w", "fc2_b"]})
    got, _ = read(m, tmp_path / "main.npz")
    np.testing.assert_array_equal(got["fc2_w"], arrays["fc2_w"])
    np.testing.assert_array_equal(got["fc2_b"], arrays["fc2_b"])


@pytest.mark.parametrize(
    ("names", "files", "match"),
    [
        (["gone.npz"], {}, "does not exist"),
        (["../part.npz"], {}, "list of file names"),
        ("part.npz", {}, "list of file names"),
        (["part.npz"], {"part.npz": ["fc1_w"]}, "holds \\['fc1_w'\\] again"),
    ],
)
def test_a_bad_shard_list_is_one_clear_error(tmp_path, names, files, match):
    import json

    m, arrays = _model_and_arrays()
    main = {n: a for n, a in arrays.items() if n not in ("fc2_w", "fc2_b")}
    for f, blobs in files.items():
        atomic_write_npz(tmp_path / f, {n: arrays[n] for n in [*blobs, "fc2_w", "fc2_b"]})
    atomic_write_npz(tmp_path / "main.npz", {**main, SHARDS: np.array(json.dumps(names))})
    with pytest.raises(CheckpointError, match=match):
        read(m, tmp_path / "main.npz")
