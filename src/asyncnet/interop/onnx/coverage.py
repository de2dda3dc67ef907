"""ONNX conformance and op coverage: runs ONNX's own node tests (``onnx.backend.test``) on a
backend and prints the pass count and, per ONNX op, how asyncnet runs it (native asyncnet op or
onnx's reference evaluator) and how many of its node tests pass.

    python -m asyncnet.interop.onnx.coverage                 # asyncnet's backend (numpy, simple)
    python -m asyncnet.interop.onnx.coverage --backend onnxruntime
    python -m asyncnet.interop.onnx.coverage --markdown      # the table as Markdown (docs/onnx.md)
"""

from __future__ import annotations

import argparse
import re
import unittest
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

EXCLUDED_FILE = Path(__file__).with_name("excluded_node_tests.txt")


def excluded() -> dict[str, str]:
    """The node tests asyncnet's backend does not pass, each with its reason (test name -> reason)."""
    out: dict[str, str] = {}
    for line in EXCLUDED_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def node_suite(backend: Any, pattern: str | None = None) -> unittest.TestSuite:
    """The CPU node tests of ``onnx.backend.test.BackendTest`` for ``backend`` (a regex filters names)."""
    import onnx.backend.test

    with warnings.catch_warnings():  # the test data's generators divide by zero on purpose
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(backend, "asyncnet_onnx_coverage")
    cases = bt.test_cases["OnnxBackendNodeModelTest"]
    tests = unittest.TestLoader().loadTestsFromTestCase(cases)
    rx = re.compile(pattern) if pattern else None
    return unittest.TestSuite(
        [t for t in tests if t._testMethodName.endswith("_cpu") and (rx is None or rx.search(t._testMethodName))]
    )


def run(backend: Any, pattern: str | None = None) -> tuple[int, int, dict[str, str]]:
    """(passed, total, failed test -> last line of its error) of the CPU node tests."""
    suite = node_suite(backend, pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = unittest.TextTestRunner(verbosity=0, stream=_Null()).run(suite)
    failed = {
        t._testMethodName[: -len("_cpu")]: (tb.strip().splitlines() or [""])[-1][:200]
        for t, tb in result.failures + result.errors
    }
    return result.testsRun - len(failed) - len(result.skipped), result.testsRun, failed


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


def op_of_tests() -> dict[str, str]:
    """Each node test's op: the longest ONNX op name that starts the test's name (underscores and
    case ignored: ``test_layer_normalization_2d_expanded`` -> LayerNormalization)."""
    import onnx.defs
    from onnx.backend.test.loader import load_model_tests

    ops = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()}, key=len, reverse=True)
    keys = [(op.lower(), op) for op in ops]
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    for case in cases:
        name = case.name[len("test_") :].replace("_", "").lower()
        nodes = case.model.graph.node
        out[case.name] = next((op for key, op in keys if name.startswith(key)), nodes[-1].op_type if nodes else "?")
    return out


def how_imported() -> dict[str, str]:
    """ONNX op -> the asyncnet op(s) it becomes natively (the reference evaluator otherwise)."""
    from asyncnet.interop.onnx._translate import NATIVE

    targets = {
        "Add": "ONNXBinary / Add (integers)",
        "Sub": "ONNXBinary / Sub (integers)",
        "Mul": "ONNXBinary / Mul (integers)",
        "Div": "ONNXBinary",
        "Relu": "Relu",
        "Sigmoid": "Sigmoid",
        "Tanh": "Tanh",
        "MatMul": "ONNXMatMul",
        "Gemm": "FC / ONNXGemm",
        "Conv": "ONNXConv",
        "MaxPool": "ONNXMaxPool",
        "AveragePool": "AveragePool",
        "GlobalAveragePool": "ONNXGlobalPool",
        "GlobalMaxPool": "ONNXGlobalPool",
        "BatchNormalization": "ONNXBatchNorm",
        "Flatten": "ONNXFlatten",
        "Reshape": "ONNXReshape",
        "Transpose": "ONNXTranspose",
        "Concat": "ONNXConcat",
        "Identity": "ONNXIdentity",
        "Dropout": "ONNXIdentity",
        "Softmax": "ONNXSoftmax",
        "LogSoftmax": "ONNXSoftmax",
        "Gather": "ONNXGather",
        "ConstantOfShape": "ONNXConstantOfShape",
        "Expand": "ONNXExpand",
        "Where": "ONNXWhere",
        "Erf": "ONNXErf",
        "Gelu": "ONNXGelu",
        "Clip": "ONNXClip",
        "LayerNormalization": "ONNXLayerNorm",
        "LSTM": "ONNXLSTM",
        "GRU": "ONNXGRU",
        "If": "ONNXIf",
        "Shape": "ONNXShape",
        "Unsqueeze": "ONNXUnsqueeze",
        "Squeeze": "ONNXSqueeze",
        "Slice": "ONNXSlice",
        "Sqrt": "ONNXUnary",
        "Exp": "ONNXUnary",
        "Log": "ONNXUnary",
        "Neg": "ONNXUnary",
        "Abs": "ONNXUnary",
        "Reciprocal": "ONNXUnary",
        "Cast": "ONNXCast",
        "ReduceMean": "ONNXReduce",
        "ReduceSum": "ONNXReduce",
        "ReduceMax": "ONNXReduce",
        "ReduceMin": "ONNXReduce",
        "Pow": "ONNXPow",
        "Equal": "ONNXCompare",
        "Less": "ONNXCompare",
        "Greater": "ONNXCompare",
        "LessOrEqual": "ONNXCompare",
        "GreaterOrEqual": "ONNXCompare",
        "Optional": "ONNXIdentity / ONNXEmptyOptional",
        "Loop": "ONNXLoop",
        "Scan": "ONNXScan",
    }
    return {op: targets.get(op, "native") for op in NATIVE}


def table(failed: dict[str, str], markdown: bool = False) -> list[str]:
    """Per op: how it runs, node tests passed / total."""
    ops = op_of_tests()
    native = how_imported()
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for test, op in ops.items():
        per[op][1] += 1
        if test not in failed:
            per[op][0] += 1
    lines = []
    if markdown:
        lines += ["| ONNX op | runs as | node tests passed |", "| --- | --- | --- |"]
    for op in sorted(per):
        how = native.get(op, "ONNXReference")
        how = f"{how} (reference for other dtypes/attributes)" if op in native else how
        p, t = per[op]
        lines.append(f"| {op} | {how} | {p}/{t} |" if markdown else f"{op:32s} {how:60s} {p:3d}/{t}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncnet", "onnxruntime"), default="asyncnet")
    parser.add_argument("--net-type", default="simple")
    parser.add_argument("--tensors", choices=("numpy", "torch"), default="numpy")
    parser.add_argument("--filter", default=None, help="a regex on test names")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--failures", action="store_true", help="list each failed test and its error")
    ns = parser.parse_args(argv)
    if ns.backend == "onnxruntime":
        import onnxruntime.backend as backend
    else:
        backend = _configured(ns.net_type, ns.tensors)
    passed, total, failed = run(backend, ns.filter)
    print(f"{ns.backend}: {passed} of {total} CPU node tests pass ({100 * passed / max(total, 1):.1f}%)")
    if ns.failures:
        for name, why in sorted(failed.items()):
            print(f"  {name}: {why}")
    if ns.backend == "asyncnet" and not ns.filter:
        for line in table(failed, ns.markdown):
            print(line)
    return 0


def _configured(net_type: str, tensors: str) -> Any:
    from asyncnet.interop.onnx.backend import AsyncnetBackend

    class Configured(AsyncnetBackend):
        @classmethod
        def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> Any:
            kwargs.setdefault("net_type", net_type)
            kwargs.setdefault("tensors", tensors)
            return super().prepare(model, device, **kwargs)

    return Configured


if __name__ == "__main__":
    raise SystemExit(main())
