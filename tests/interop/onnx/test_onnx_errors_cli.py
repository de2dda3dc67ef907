"""Bad ONNX input gives one clear error naming the node and field; the CLI prints one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto
from onnx import helper as oh

import asyncnet as an
from asyncnet.cli.main import main
from asyncnet.interop.onnx import OnnxImportError, OnnxInputError, backend, load

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def small_model(op: str = "Relu", opset: int = 17, domain: str = "") -> onnx.ModelProto:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node(op, ["h"], ["y"], name="act", domain=domain),
    ]
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[oh.make_tensor("w", TensorProto.FLOAT, [3, 2], np.arange(6, dtype=np.float32))],
    )
    opsets = [oh.make_opsetid("", opset)] + ([oh.make_opsetid(domain, 1)] if domain else [])
    return oh.make_model(g, opset_imports=opsets)


def test_truncated_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = small_model().SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="malformed or truncated|no graph") as e:
        load(path)
    assert str(path) in str(e.value)


def test_not_onnx_bytes() -> None:
    with pytest.raises(OnnxImportError, match="not a valid ONNX model|no graph"):
        load(b"\x00\x01garbage" * 10)


def test_unknown_op_names_the_node() -> None:
    with pytest.raises(OnnxImportError, match=r"node 1 'act' \(NoSuchOp\)"):
        load(small_model("NoSuchOp"), check=False)


def test_unsupported_domain_names_the_node() -> None:
    with pytest.raises(OnnxImportError, match=r"node 1 'act' \(Fancy\)\.op_type"):
        load(small_model("Fancy", domain="com.example"), check=False)


def test_opset_out_of_range() -> None:
    with pytest.raises(OnnxImportError, match="opset"):
        load(small_model(opset=99), check=False)


def test_checker_errors_name_the_node() -> None:
    m = small_model()
    m.graph.node[0].input[1] = "missing"
    with pytest.raises(OnnxImportError, match="checker"):
        load(m)


@pytest.mark.parametrize(
    "feeds,match",
    [
        ({"z": np.zeros((2, 3), np.float32)}, "not a graph input.*'x'"),
        ({}, "missing graph input x"),
        ({"x": np.zeros((2, 3), np.float64)}, "expected dtype float32, got float64"),
        ({"x": np.zeros((2, 4), np.float32)}, "expected dim 1 = 3"),
        ({"x": np.zeros((3,), np.float32)}, "expected rank 2"),
    ],
)
def test_bad_feeds(feeds: dict, match: str) -> None:
    rep = backend.prepare(small_model())
    with pytest.raises(OnnxInputError, match=match):
        rep.run(feeds)
    np.testing.assert_allclose(rep.run({"x": np.ones((2, 3), np.float32)})[0], np.full((2, 2), [6.0, 9.0]))


def test_cli_runs_an_onnx_model(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    onnx.save(small_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    assert (
        main(["run", str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--save", str(tmp_path / "o.npz")])
        == 0
    )
    assert "y = [[6. 9.]]" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["y"], [[6.0, 9.0]])


def test_cli_graph_of_an_onnx_model(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    onnx.save(small_model(), tmp_path / "m.onnx")
    assert main(["graph", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "g.dot")]) == 0
    assert "2 ops" in capsys.readouterr().out
    assert "ONNXMatMul" in (tmp_path / "g.dot").read_text()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["truncated", "bad_op", "bad_input", "bad_shape"])
def test_cli_bad_input_one_line_exit_2(tmp_path, case: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.onnx"
    data = small_model("NoSuchOp" if case == "bad_op" else "Relu").SerializeToString()
    path.write_bytes(data[:40] if case == "truncated" else data)
    np.save(tmp_path / "x.npy", np.ones((1, 4 if case == "bad_shape" else 3), np.float32))
    name = "q" if case == "bad_input" else "x"
    proc = subprocess.run(
        [sys.executable, "-m", "asyncnet", "run", str(path), "--input", f"{name}={tmp_path / 'x.npy'}"],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    want = {"truncated": "m.onnx", "bad_op": "node 1 'act' (NoSuchOp)", "bad_input": "'q'", "bad_shape": "dim 1 = 3"}[
        case
    ]
    assert want in proc.stderr


def test_importing_asyncnet_does_not_import_onnx() -> None:
    code = "import sys, asyncnet; assert 'onnx' not in sys.modules; import asyncnet.onnx; assert asyncnet.onnx.load"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=100, env={**os.environ, "PYTHONPATH": SRC})
    assert an.onnx.load is load
