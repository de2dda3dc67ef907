"""Leak checks that only see what the test itself created.

Comparing /dev/shm before and after a test fails whenever another test run on the same machine
creates or removes a segment meanwhile. The fixture records the names the code under test
creates (Hogwild parameters, atomic mutex/flag, gradient-sync groups) and checks only those.
"""

from __future__ import annotations

import os

import pytest


class CreatedSegments:
    def __init__(self) -> None:
        self.names: list[str] = []  # exact segment names
        self.prefixes: list[str] = []  # gradient-sync groups: every segment starts with the prefix

    def leaked(self) -> list[str]:
        present = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        return sorted(
            {n for n in self.names if n in present}
            | {n for n in present if any(n.startswith(p + "_") for p in self.prefixes)}
        )


@pytest.fixture
def created_segments(monkeypatch) -> CreatedSegments:
    from asyncnet._shm import SharedArrays
    from asyncnet.atomic.shared import AtomicSegment as Segment
    from asyncnet.sync.process import ProcessGradientSync

    rec = CreatedSegments()

    def wrap(cls, attr, record):
        original = getattr(cls, attr).__func__

        def wrapper(klass, *args, **kwargs):
            out = original(klass, *args, **kwargs)
            record(out)
            return out

        monkeypatch.setattr(cls, attr, classmethod(wrapper))

    wrap(SharedArrays, "create", lambda sa: rec.names.append(sa.spec[0]))
    wrap(Segment, "create", lambda out: rec.names.append(out[0].name))
    wrap(ProcessGradientSync, "new_workers", lambda syncs: rec.prefixes.append(syncs[0]._prefix))
    return rec
