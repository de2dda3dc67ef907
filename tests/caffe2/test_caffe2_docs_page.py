"""The Python examples of docs/caffe2.md run as written."""

import pathlib
import re

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "caffe2.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)

pytestmark = pytest.mark.timeout(120)


def test_the_page_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index):
    exec(compile(BLOCKS[index], f"{PAGE.name}[{index}]", "exec"), {"__name__": "__docs__"})
