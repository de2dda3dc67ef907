"""The TFFunction operator: a registered TensorFlow function inside a net, its gradient by
tf.GradientTape against torch autograd and finite differences, and how it serialises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _tfcheck import tensorflow_or_skip

tf = tensorflow_or_skip()
torch = pytest.importorskip("torch")

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.tensorflow import register_function, registered_functions, unregister_function

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "autodiff"))
from _gradcheck_helpers import check_all, weighted_mean_head

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True, scope="module")
def functions():
    register_function("t_affine2", tf.function(lambda x, w: (tf.tanh(tf.matmul(x, w)), tf.reduce_sum(x, axis=1))))
    register_function("t_gather", tf.function(lambda table, idx: tf.gather(table, idx) * 2.0), grad_inputs=[0])
    register_function("t_sq", tf.function(lambda x: x * x))
    register_function("t_round", tf.function(lambda x: tf.round(x)), differentiable=False)
    yield
    for name in ("t_affine2", "t_gather", "t_sq", "t_round"):
        unregister_function(name)


def _feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((4, 3)), "w": rng.standard_normal((3, 5)), "r": rng.standard_normal((4, 5))}


def test_gradient_of_a_two_output_function_matches_torch_and_finite_differences() -> None:
    """Output 1 (a row sum) does not reach the loss: its gradient is None and is not sent."""

    def build(net: an.Net) -> str:
        net.TFFunction(["x", "w"], ["y", "s"], function="t_affine2")
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, w, r: (torch.tanh(x @ w) * r).mean(), _feeds(np.random.default_rng(0)), ["x", "w"])


def test_gradient_skips_an_integer_input() -> None:
    rng = np.random.default_rng(1)
    feeds = {"table": rng.standard_normal((6, 5)), "idx": np.array([0, 2, 2, 5]), "r": rng.standard_normal((4, 5))}

    def build(net: an.Net) -> str:
        net.TFFunction(["table", "idx"], ["y"], function="t_gather")
        return weighted_mean_head(net, "y")

    check_all(build, lambda table, idx, r: (table[idx] * 2.0 * r).mean(), feeds, ["table"])


def test_tf_functions_run_in_an_async_scheduling_dag_beside_native_ops() -> None:
    """Two TFFunction branches and a native branch, run concurrently 20 times; the same values as numpy."""
    rng = np.random.default_rng(2)
    f = {k: v.astype(np.float32) for k, v in _feeds(rng).items()}
    net = an.Net("dag", type="async_scheduling", num_workers=2)
    net.TFFunction(["x", "w"], ["y", "s"], function="t_affine2")
    net.TFFunction(["r"], ["r2"], function="t_sq")
    net.Relu("x", "xr")
    net.TFFunction(["y"], ["y2"], function="t_sq")
    net.Add(["y2", "r2"], "out")
    ws = an.Workspace()
    for k, v in f.items():
        ws.feed(k, v)
    ws.create_net(net)
    y = np.tanh(f["x"] @ f["w"])
    for _ in range(20):
        ws.run_net("dag")
        np.testing.assert_allclose(ws.fetch("out"), y * y + f["r"] ** 2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ws.fetch("s"), f["x"].sum(axis=1), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(ws.fetch("xr"), np.maximum(f["x"], 0))
    assert isinstance(ws.fetch("out"), np.ndarray) and ws.fetch("out").dtype == np.float32


def test_outputs_are_writable_numpy_arrays_of_the_functions_dtype() -> None:
    ws = an.Workspace()
    ws.feed("x", np.array([1.5, -2.0]))
    net = an.Net("n")
    net.TFFunction(["x"], ["y"], function="t_sq")
    ws.run_net_once(net)
    y = ws.fetch("y")
    assert y.dtype == np.float64 and y.flags.writeable and y.tolist() == [2.25, 4.0]


def test_an_unregistered_function_fails_at_net_creation_in_one_line() -> None:
    with pytest.raises(an.NetDefinitionError) as err:
        an.Net("n").TFFunction(["x"], ["y"], function="t_nowhere")
    msg = str(err.value)
    assert "'t_nowhere' is not registered in this process" in msg and "register_function" in msg and "\n" not in msg
    assert "t_sq" in registered_functions()


def test_a_saved_net_names_the_function_and_loads_only_where_it_is_registered(tmp_path: Path) -> None:
    net = an.Net("saved")
    net.TFFunction(["x"], ["y"], function="t_sq")
    text = net.to_json()
    assert '"function": "t_sq"' in text
    path = tmp_path / "net.json"
    path.write_text(text)
    np.save(tmp_path / "x.npy", np.ones(2))
    # a fresh process that never imported asyncnet.tensorflow: the command line prints one line
    proc = subprocess.run(
        [sys.executable, "-m", "asyncnet", "run", str(path), "--feed", f"x={tmp_path / 'x.npy'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "TFFunction" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
        proc.stderr
    )
    ws = an.Workspace()  # here, where t_sq is registered, the same text runs
    ws.feed("x", np.full(2, 3.0))
    ws.run_net_once(an.NetDef.from_json(text))
    assert ws.fetch("y").tolist() == [9.0, 9.0]
    with pytest.raises(an.NetDefinitionError, match="'t_gone' is not registered in this process"):
        ws.create_net(an.NetDef.from_json(text.replace("t_sq", "t_gone")))


def test_a_non_differentiable_function_refuses_a_gradient() -> None:
    net = an.Net("n")
    net.TFFunction(["x"], ["y"], function="t_round")
    net.AveragedLoss("y", "loss")
    with pytest.raises(an.NetDefinitionError, match="'t_round' was registered with differentiable=False"):
        add_gradient_ops(net, "loss", wrt=["x"])


def test_a_wrong_output_count_is_an_operator_error() -> None:
    ws = an.Workspace()
    ws.feed("x", np.ones(2))
    net = an.Net("n")
    net.TFFunction(["x"], ["a", "b"], function="t_sq")
    with pytest.raises(an.OperatorError, match="function 't_sq' returned 1 output"):
        ws.run_net_once(net)


def test_registration_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="already registered as 't_sq'"):
        register_function("t_sq", tf.function(lambda x: x))
    with pytest.raises(TypeError, match="fn must be callable"):
        register_function("t_bad", 3)
    with pytest.raises(ValueError, match="distinct input indices"):
        register_function("t_bad", tf.function(lambda x: x), grad_inputs=[0, 0])


def test_docstring_examples_of_the_module() -> None:
    import doctest

    import asyncnet.tensorflow as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


def test_importing_asyncnet_and_its_tensorflow_module_does_not_import_tensorflow() -> None:
    code = "import sys, asyncnet, asyncnet.tensorflow; print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]
