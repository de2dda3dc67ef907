"""``asyncnet clean``: removes the segments and runner folders of processes that are gone, and
nothing of a living process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from asyncnet._shm import open_segment, unlink_segment
from asyncnet.cleanup import find_stale
from asyncnet.cli.main import main


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_clean_removes_what_dead_processes_left(dead_pid, capsys):
    names = [
        f"asyncnet_sync_{dead_pid}_0123456789_ctl",
        f"asyncnet_hw_{dead_pid}_0123456789abcdef",
        f"asyncnet_atomic_{dead_pid}_0123456789abcdef",
    ]
    alive = f"asyncnet_sync_{os.getpid()}_0123456789_ctl"  # ours: we live
    for name in names + [alive]:
        open_segment(name, create=True, size=4096).close()
    folder = tempfile.mkdtemp(prefix=f"asyncnet_fn_{dead_pid}_")
    mine = tempfile.mkdtemp(prefix=f"asyncnet_fn_{os.getpid()}_")
    try:
        stale = {item.path for item in find_stale()}
        assert {f"/dev/shm/{n}" for n in names} | {folder} <= stale
        assert f"/dev/shm/{alive}" not in stale and mine not in stale

        assert main(["clean", "--dry-run"]) == 0
        assert all(os.path.exists(f"/dev/shm/{n}") for n in names)
        assert "would remove" in capsys.readouterr().out

        assert main(["clean"]) == 0
        out = capsys.readouterr().out
        assert not any(os.path.exists(f"/dev/shm/{n}") for n in names) and not os.path.exists(folder)
        assert os.path.exists(f"/dev/shm/{alive}") and os.path.exists(mine)
        assert f"its process {dead_pid} is gone" in out and "removed" in out.splitlines()[-1]
    finally:
        for name in names + [alive]:
            unlink_segment(name)
        for d in (folder, mine):
            if os.path.isdir(d):
                os.rmdir(d)
