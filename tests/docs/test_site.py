"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page
missing from the navigation, or an API directive naming no object fails the build. The pages and
the benchmark results carry no history of how the work went, only what is and how it was measured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"follow-up|\bsession\b|\bissue[- ]?\d|\bthe lead\b|helper-\d|other engineers?\b", re.I)


def _text_files() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
    ]


@pytest.mark.timeout(600)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    cmd = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--clean",
        "-f",
        str(ROOT / "mkdocs.yml"),
        "-d",
        str(site),
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=560)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    assert (site / "index.html").is_file()
    api = (site / "reference" / "sync.html").read_text()
    assert 'id="asyncnet.sync.ThreadedGradientSync"' in api, "the API reference lost its docstrings"
    assert (site / "benchmarks" / "results").is_dir(), "the dated benchmark results are not part of the site"


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [
        p.relative_to(ROOT / "docs").as_posix()
        for p in (ROOT / "docs").rglob("*.md")
        if "benchmarks/results" not in p.as_posix()
    ]
    missing = [p for p in pages if p not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


@pytest.mark.parametrize("path", _text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_history_of_the_work(path: Path) -> None:
    hits = [
        f"line {i}: {line.strip()[:100]}"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not hits, f"{path.relative_to(ROOT)} tells how the work went, not what is:\n" + "\n".join(hits)
