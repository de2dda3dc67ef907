"""ONNX's own node tests (onnx.backend.test) on asyncnet's ONNX backend.

The full CPU node suite runs once (numpy tensors, simple executor); every test passes but those
listed with their reasons in asyncnet/interop/onnx/excluded_node_tests.txt. The tests of the ops
asyncnet runs natively also run on torch tensors and the async_scheduling executor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")

from asyncnet.interop.onnx import coverage
from asyncnet.interop.onnx._translate import NATIVE


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_node_test_passes_but_the_listed_ones() -> None:
    passed, total, failed = coverage.run(coverage._configured("simple", "numpy"))
    listed = coverage.excluded()
    assert sorted(failed) == sorted(listed), {
        "failing but not listed": sorted(set(failed) - set(listed)),
        "listed but passing": sorted(set(listed) - set(failed)),
    }
    assert passed == total - len(listed)
    assert passed >= 1588  # onnxruntime 1.32.0's count with the same runner
    doc = (Path(__file__).resolve().parents[3] / "docs" / "onnx.md").read_text()
    table = "\n".join(coverage.table(failed, markdown=True))
    assert table in doc, (
        "docs/onnx.md's coverage table is stale: regenerate it with python -m asyncnet.interop.onnx.coverage --markdown"
    )
    assert f"{passed} of {total}" in doc


def _native_pattern() -> str:
    ops = coverage.op_of_tests()
    names = sorted(t for t, op in ops.items() if op in NATIVE)
    return "^(" + "|".join(names) + ")_cpu$"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("net_type,tensors", [("async_scheduling", "torch"), ("simple", "torch")])
def test_native_ops_pass_on_torch_and_async(net_type: str, tensors: str) -> None:
    pytest.importorskip("torch")
    passed, total, failed = coverage.run(coverage._configured(net_type, tensors), _native_pattern())
    assert total > 150
    assert set(failed) <= set(coverage.excluded()), failed


def test_excluded_file_gives_a_reason_for_each() -> None:
    listed = coverage.excluded()
    assert listed and all(len(why) > 20 for why in listed.values())
