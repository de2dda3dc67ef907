"""Every Python example in README.md and in the documentation pages (docs/*.md) runs as written,
each block in a fresh namespace, in a scratch directory.

A block preceded by the line ``<!-- not-tested: reason -->`` is skipped: it needs torchrun, a GPU,
the tensorflow extra (tests/interop/tensorflow/test_tf_docs_section.py runs those), an importable worker
for spawned processes, or minutes of training. Keep such blocks rare.
"""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "reference").glob("*.md"))]
BLOCK = re.compile(r"(<!-- not-tested:[^>]*-->\s*\n)?```python\n(.*?)```", re.S)
README_LIMIT = 15_000


def blocks():
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start(2))
            skip = [pytest.mark.skip(f"not-tested in {page.name}")] if m.group(1) else []
            found.append(pytest.param(page, m.group(2), id=f"{page.relative_to(ROOT)}:line{line}", marks=skip))
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("page", "code"), blocks())
def test_example_runs(page, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(page), "exec"), {"__name__": "__readme__"})


def test_the_pages_have_examples():
    assert len([p for p in blocks() if not p.marks]) >= 20


def test_not_tested_blocks_stay_rare():
    skipped = [p for p in blocks() if p.marks]
    assert len(skipped) <= 6, [p.id for p in skipped]


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["make train", "make test"]
    assert os.path.exists(README.parent / ".ci" / "run")


def test_readme_is_a_front_door():
    text = README.read_text()
    assert len(text) <= README_LIMIT, (
        f"README.md has {len(text):,} characters; the limit is {README_LIMIT:,}: move detail to docs/"
    )
    assert "`make bench` runs every benchmark; `python -m benchmarks NAME` runs one" in text


def test_readme_links_resolve():
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
