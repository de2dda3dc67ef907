"""The Python blocks of docs/interop.md's "TensorFlow interop" section run as written. tests/test_readme.py
skips them (marked not-tested: they need the tensorflow extra); here they run where it is installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _tfcheck import tensorflow_or_skip

tensorflow_or_skip()

PAGE = Path(__file__).resolve().parents[3] / "docs" / "interop.md"


def _section_blocks() -> list[str]:
    text = PAGE.read_text()
    start = text.index("## TensorFlow interop")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start : end if end != -1 else len(text)], re.S)


def test_the_section_has_its_examples() -> None:
    assert len(_section_blocks()) == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("index", range(2))
def test_docs_tensorflow_block_runs(index: int, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(_section_blocks()[index], str(PAGE), "exec"), {"__name__": "__docs__"})
