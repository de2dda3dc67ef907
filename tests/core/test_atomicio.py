"""Crash-safe writes: nothing half-written, strays of dead writers removed, symlinks not followed."""

import os
import subprocess
import sys

import numpy as np
import pytest

from asyncnet._atomicio import atomic_write, atomic_write_npz, atomic_write_text, remove_strays

pytestmark = pytest.mark.timeout(60)


def test_writes_and_replaces(tmp_path):
    p = tmp_path / "a.npz"
    atomic_write_npz(p, {"w": np.arange(3)})
    atomic_write_npz(p, {"w": np.arange(4)})
    assert np.load(p)["w"].tolist() == [0, 1, 2, 3]
    assert os.listdir(tmp_path) == ["a.npz"]


def test_failure_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "old")

    def boom(f):
        f.write(b"partial")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        atomic_write(p, boom)
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_stray_of_a_killed_writer_is_removed(tmp_path):
    p = tmp_path / "ckpt.npz"
    code = (
        "import os, sys, signal\nfrom asyncnet._atomicio import atomic_write\n"
        "def w(f):\n    f.write(b'x' * 1000); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        f"atomic_write({str(p)!r}, w)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == -9
    strays = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(strays) == 1 and not p.exists()
    assert remove_strays(p) == strays
    atomic_write_text(p, "new")
    assert os.listdir(tmp_path) == ["ckpt.npz"]


def test_live_writers_temp_is_kept(tmp_path):
    p = tmp_path / "x"
    live = tmp_path / f".x.{os.getppid()}.abc.tmp"  # our parent is alive
    live.write_bytes(b"")
    atomic_write_text(p, "y")
    assert live.exists()


def test_planted_symlink_is_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    p = tmp_path / "out.txt"
    # an attacker cannot predict mkstemp's name; a symlink at the final path is replaced, not written through
    os.symlink(target, p)
    atomic_write_text(p, "new")
    assert target.read_text() == "keep" and not os.path.islink(p) and p.read_text() == "new"


def test_concurrent_write_in_another_thread_is_not_a_stray(tmp_path):
    """Found by the fault campaign: a write removed the temp file of a write to the same path in
    progress in another thread of the same process (same pid), which then failed with
    FileNotFoundError. A stray of this pid that nobody is writing is still removed."""
    import threading

    p = tmp_path / "ckpt.npz"
    stray = tmp_path / f".ckpt.npz.{os.getpid()}.left.tmp"  # an earlier process with our pid
    stray.write_bytes(b"x")
    inside, release, errors = threading.Event(), threading.Event(), []

    def slow(f):
        f.write(b"first")
        inside.set()
        assert release.wait(30)

    def first():
        try:
            atomic_write(p, slow)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(30)
    atomic_write_text(p, "second")  # meanwhile, from this thread
    release.set()
    t.join(30)
    assert errors == []
    assert p.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["ckpt.npz"]
