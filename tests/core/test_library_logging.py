"""Library messages go through Python logging (loggers under "asyncnet."), never print()."""

import ast
import logging
import threading
import warnings
from pathlib import Path

import pytest

import asyncnet
from asyncnet.exec import pools

pytestmark = pytest.mark.timeout(60)

SRC = Path(asyncnet.__file__).parent
OUTPUT_OWNERS = {"cli", "bench", "train"}  # the command's own output; train/ logs on its own terms
COMMANDS = {"interop/onnx/coverage.py"}  # run as `python -m ...`: the printed table is the command's output


def test_no_print_or_stderr_writes_in_the_library():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] in OUTPUT_OWNERS or rel.name == "__main__.py" or rel.as_posix() in COMMANDS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id == "print":
                    offenders.append(f"{rel}:{node.lineno} print()")
                if isinstance(f, ast.Attribute) and f.attr == "write" and "stderr" in ast.unparse(f.value):
                    offenders.append(f"{rel}:{node.lineno} {ast.unparse(f)}")
    assert offenders == []


def test_stuck_thread_report_is_logged_when_warnings_are_errors(caplog):
    t = threading.Thread(name="stuck-worker")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="asyncnet"):
            pools._warn([t], "joined at interpreter exit; left behind", 2)
    rec = [r for r in caplog.records if r.name == "asyncnet.exec.pools"]
    assert len(rec) == 1 and "thread 'stuck-worker'" in rec[0].getMessage()
    assert rec[0].getMessage().startswith("RuntimeWarning: asyncnet:")


def test_stuck_thread_report_is_a_runtime_warning_otherwise():
    t = threading.Thread(name="stuck-worker")
    with pytest.warns(RuntimeWarning, match="thread 'stuck-worker'"):
        pools._warn([t], "joined at interpreter exit; left behind", 2)
