"""Every Python example in README.md runs as written (in a scratch directory).

A block preceded by the line ``<!-- not-tested: reason -->`` is skipped (for examples that need
torchrun or a GPU).
"""

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- not-tested:[^>]*-->\s*\n)?```python\n(.*?)```", re.S)


def blocks():
    text = README.read_text()
    found = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start(2))
        found.append(pytest.param(m.group(2), id=f"line{line}", marks=[pytest.mark.skip("not-tested in README")] if m.group(1) else []))
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("code", blocks())
def test_readme_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["make train", "make test"]
    assert os.path.exists(README.parent / ".ci" / "run")
