"""Fixtures for the atomic tests: nothing may leak (shared-memory segments, threads)."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from atomic_workers import shm_entries


@pytest.fixture
def no_shm_leak(monkeypatch):
    """Fail the test if a segment it created is still in /dev/shm afterwards.

    Only segments created by this test are checked (recorded by wrapping ``Segment.create``),
    so a benchmark or another test run on the same machine cannot make it fail.
    """
    from asyncnet.atomic.shared import AtomicSegment as Segment

    created: list[str] = []
    original = Segment.create.__func__

    def recording_create(cls, *args, **kwargs):
        seg, mm = original(cls, *args, **kwargs)
        created.append(seg.name)
        return seg, mm

    monkeypatch.setattr(Segment, "create", classmethod(recording_create))
    yield created
    leaked = shm_entries() & set(created)
    assert not leaked, f"shared-memory segments leaked: {sorted(leaked)}"


@pytest.fixture
def no_thread_leak():
    """Fail the test if it leaves threads running."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra:
            return
        time.sleep(0.01)
    pytest.fail(f"threads leaked: {extra}")


@pytest.fixture
def fast_switching():
    """Make the interpreter switch threads very often, so races show up in few rounds."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)
