import threading
import time

import exec_test_ops as _ops  # registers the test operators
import pytest


def _non_main_threads():
    return {t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()}


@pytest.fixture
def no_leaked_threads():
    """Every thread a test starts must be gone when it ends (after ws.close())."""
    before = _non_main_threads()
    _ops.RELEASE.clear()
    _ops.STARTED.clear()
    _ops.LOG.clear()
    yield
    _ops.RELEASE.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _non_main_threads() - before:
        time.sleep(0.01)
    leaked = _non_main_threads() - before
    assert not leaked, f"leaked threads: {leaked}"
