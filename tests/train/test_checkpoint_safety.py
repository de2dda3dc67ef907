"""Checkpoints: crash-safe writes through asyncnet._atomicio, and any malformed file is a
CheckpointError (never JSONDecodeError, RecursionError, KeyError...), fuzzed like NetDef JSON."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import zipfile

import numpy as np
import pytest

import asyncnet as an
from asyncnet.train import MLP, CheckpointError

pytestmark = pytest.mark.timeout(60)
META = "__asyncnet_checkpoint__"


def _model_and_ws() -> tuple[MLP, an.Workspace]:
    m = MLP(input_dim=4, hidden=(3,), num_classes=2, optimizer="adam")
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    ws.fetch("iter")[0] = 7
    return m, ws


def _arrays(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _mutate_json(obj, rng: random.Random):
    choices = [None, True, 0, -1, 1.5, "", "x", [], {}, [1, [2]], 2**70, "float16", [4, 3, 2, 1]]
    if isinstance(obj, dict) and obj and rng.random() < 0.7:
        obj = dict(obj)
        key = rng.choice(list(obj))
        r = rng.random()
        if r < 0.25:
            del obj[key]
        elif r < 0.4:
            obj[rng.choice(["extra", "dims", "dtype"])] = rng.choice(choices)
        else:
            obj[key] = _mutate_json(obj[key], rng)
        return obj
    if isinstance(obj, list) and obj and rng.random() < 0.6:
        obj = list(obj)
        obj[rng.randrange(len(obj))] = rng.choice(choices)
        return obj
    return rng.choice(choices)


def _damaged(good: dict[str, np.ndarray], raw: bytes, rng: random.Random) -> bytes:
    """One malformed checkpoint: damaged metadata, arrays, or bytes."""
    arrays = dict(good)
    kind = rng.randrange(6)
    if kind == 0:  # metadata JSON mutated, or not JSON, or nested past the recursion limit
        meta = json.loads(str(good[META]))
        text = rng.choice(
            [
                json.dumps(_mutate_json(meta, rng)),
                "{" * rng.randint(1, 5),
                "[" * 100_000,
                '{"a":' * 50_000,
                "",
                "null",
                "\x00",
                json.dumps([meta]),
            ]
        )
        arrays[META] = np.array(text)
    elif kind == 1:  # metadata of the wrong kind
        arrays[META] = rng.choice([np.zeros(3), np.array(b"{}"), np.array(["{}", "{}"]), np.array(1)])
    elif kind == 2:  # an array missing, renamed, reshaped or retyped
        name = rng.choice([n for n in good if n != META])
        r = rng.random()
        if r < 0.3:
            del arrays[name]
        elif r < 0.5:
            arrays[name + "_x"] = arrays.pop(name)
        elif r < 0.75:
            arrays[name] = np.zeros(rng.choice([(), (0,), (2, 2), (9,)]), arrays[name].dtype)
        else:
            arrays[name] = arrays[name].astype(rng.choice([np.float16, np.int32, np.bool_, np.complex64]))
    elif kind == 3:  # a negative or out-of-range step
        arrays["iter"] = np.array([rng.choice([-1, -(2**62), np.iinfo(np.int64).min])], np.int64)
    if kind <= 3:
        return _npz_bytes(arrays)
    data = bytearray(raw)
    if kind == 4:  # truncated
        return bytes(data[: rng.randrange(len(data))])
    for _ in range(rng.randint(1, 20)):  # flipped bytes
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def test_fuzz_malformed_checkpoints_only_raise_checkpoint_error(tmp_path) -> None:
    m, ws = _model_and_ws()
    good_path = tmp_path / "good.npz"
    m.save(ws, good_path)
    good, raw = _arrays(good_path), good_path.read_bytes()
    rng = random.Random(13)
    outcomes = {"ok": 0, "error": 0}
    path = tmp_path / "bad.npz"
    for _ in range(400):
        path.write_bytes(_damaged(good, raw, rng))
        target = an.Workspace()
        target.run_net_once(m.init_net)
        try:
            m.load(target, path)
            outcomes["ok"] += 1  # a flip inside padding, or a harmless extra metadata key: loads
            assert int(target.fetch("iter")[0]) >= 0
        except CheckpointError as e:
            assert "\n" not in str(e) and len(str(e)) < 2000, str(e)[:300]
            outcomes["error"] += 1
        finally:
            target.close()
    assert outcomes["error"] > 300, outcomes


def test_deep_json_metadata_and_negative_iteration_are_refused(tmp_path) -> None:
    m, ws = _model_and_ws()
    m.save(ws, tmp_path / "ok.npz")
    good = _arrays(tmp_path / "ok.npz")
    for meta, words in [("[" * 100_000, "metadata"), ("{" * 3, "not valid JSON"), ("[1]", "JSON object")]:
        (tmp_path / "m.npz").write_bytes(_npz_bytes({**good, META: np.array(meta)}))
        with pytest.raises(CheckpointError, match=words):
            m.load(ws, tmp_path / "m.npz")
    (tmp_path / "neg.npz").write_bytes(_npz_bytes({**good, "iter": np.array([-3], np.int64)}))
    with pytest.raises(CheckpointError, match="'iter' is -3, expected a step count >= 0"):
        m.load(ws, tmp_path / "neg.npz")
    (tmp_path / "one.npy").write_bytes(b"")
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(CheckpointError, match="single .npy"):
        m.load(ws, tmp_path / "one.npy")


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_save_is_atomic_removes_strays_and_never_follows_a_planted_symlink(tmp_path) -> None:
    m, ws = _model_and_ws()
    path = tmp_path / "ckpt.npz"
    stray = tmp_path / f".ckpt.npz.{_dead_pid()}.abc123.tmp"  # what a writer killed mid-save leaves
    stray.write_bytes(b"x" * 1000)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, path)  # another user plants the target name
    for old_name in (f"{path}.tmp{os.getpid()}",):  # the old predictable temp name, also planted
        os.symlink(victim, old_name)
    m.save(ws, path)
    assert victim.read_text() == "precious"
    assert path.is_file() and not path.is_symlink()
    assert not stray.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt.npz", "victim", f"ckpt.npz.tmp{os.getpid()}"])
    target = an.Workspace()
    target.run_net_once(m.init_net)
    m.load(target, path)
    for n in m.checkpoint_blobs:
        np.testing.assert_array_equal(target.fetch(n), ws.fetch(n))
    assert zipfile.is_zipfile(path)


def test_save_into_a_folder_that_cannot_be_written_is_a_checkpoint_error(tmp_path) -> None:
    m, ws = _model_and_ws()
    with pytest.raises(CheckpointError, match="cannot write checkpoint"):
        m.save(ws, tmp_path / "missing" / "ckpt.npz")
