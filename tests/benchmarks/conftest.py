"""Leak checks for the benchmark smoke runs: only what the test itself created is checked."""

from __future__ import annotations

import os
import threading
import time

import pytest


@pytest.fixture
def no_shm_leak(monkeypatch):
    """Fail the test if a shared atomic's segment it created is still in /dev/shm afterwards."""
    from asyncnet.atomic.shared import AtomicSegment

    created: list[str] = []
    original = AtomicSegment.create.__func__

    def recording_create(cls, *args, **kwargs):
        seg, mm = original(cls, *args, **kwargs)
        created.append(seg.name)
        return seg, mm

    monkeypatch.setattr(AtomicSegment, "create", classmethod(recording_create))
    yield created
    left = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    leaked = left & set(created)
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
