"""Leak checks for the sync tests that only see what the test itself created.

Comparing /dev/shm before and after a test would fail whenever another test run on the same
machine creates a segment meanwhile. Instead, the group prefixes (every segment of a group,
parent's or children's, starts with it) and payload directories the code under test creates are
recorded, and only those must be gone afterwards.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from asyncnet.sync import process as process_module


class Recorder:
    """What a test created: process-group prefixes and payload directories."""

    def __init__(self) -> None:
        self.prefixes: list[str] = []
        self.dirs: list[str] = []

    def leaked(self) -> list[str]:
        names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
        segs = [n for n in names if any(n.startswith(p + "_") for p in self.prefixes)]
        return sorted(segs) + [d for d in self.dirs if os.path.exists(d)]


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    rec = Recorder()
    cls = process_module.ProcessGradientSync
    original = cls.new_workers.__func__

    def recording_new_workers(klass, *args, **kwargs):
        syncs = original(klass, *args, **kwargs)
        rec.prefixes.append(syncs[0]._prefix)
        return syncs

    def recording_mkdtemp(*args, **kwargs):
        path = real_mkdtemp(*args, **kwargs)
        rec.dirs.append(path)
        return path

    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(cls, "new_workers", classmethod(recording_new_workers))
    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    return rec


@pytest.fixture
def no_leaked_segments(recorder: Recorder):
    """Fail the test if a segment (or payload directory) it created is still there."""
    yield recorder
    leaked = recorder.leaked()
    assert not leaked, f"shared-memory segments leaked: {leaked}"
