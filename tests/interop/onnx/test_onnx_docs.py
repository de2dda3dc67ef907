"""The Python examples of docs/onnx.md run as written; its counts match the exclusion list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

DOC = Path(__file__).resolve().parents[3] / "docs" / "onnx.md"


@pytest.mark.timeout(120)
def test_examples_run_in_order(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "__doc__"}
    for code in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        exec(compile(code, str(DOC), "exec"), scope)
    assert (tmp_path / "mlp.onnx").exists()


def test_stated_counts_match_the_exclusion_list() -> None:
    from asyncnet.interop.onnx import coverage

    text = DOC.read_text()
    total = 1884
    assert f"{total - len(coverage.excluded())} of {total}" in text
