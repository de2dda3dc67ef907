"""The gradient of Caffe2's While (NetBuilder's WhileNet): the Do workspace stack, HasScope,
and gradients through loops checked against closed forms and central finite differences."""

import numpy as np
import pytest

from asyncnet.ops.caffe2_control import Scope
from caffe2.python import core, workspace
from caffe2.python.net_builder import NetBuilder, ops

pytestmark = pytest.mark.timeout(120)


def test_scope_is_a_stack_popped_last_in_first_out() -> None:
    s = Scope()
    first, second = s.push(), s.push()
    first.blobs["v"], second.blobs["v"] = 1, 2
    assert s.depth == 2 and s.blobs["v"] == 2
    assert s.pop() is second and s.pop() is first and s.depth == 0
    with pytest.raises(ValueError, match="forward child workspace"):
        s.pop()
    assert s.push() is first and first.blobs == {}  # recycled, emptied


def test_has_scope_follows_forward_and_backward_do() -> None:
    body = core.Net("body")
    body.Scale("a", "b", scale=2.0)
    fwd = core.Net("fwd")
    fwd.Do(["x", "ws"], ["y", "ws"], net=body.Proto(), inner_blobs=["a", "b"], outer_blobs_idx=[0, 1])
    fwd.HasScope(["ws"], ["has"])
    back = core.Net("back")
    back.Do(["x", "ws"], ["z", "ws"], net=body.Proto(), inner_blobs=["a", "b"], outer_blobs_idx=[0, 1], backward=1)
    back.HasScope(["ws"], ["has"])
    workspace.RunOperatorOnce(core.CreateOperator("CreateScope", [], ["ws"]))
    workspace.FeedBlob("x", np.array([1.5], np.float32))
    workspace.RunNetOnce(fwd)
    assert bool(workspace.FetchBlob("has"))
    workspace.FeedBlob("x", np.array([100.0], np.float32))
    workspace.RunNetOnce(back)  # runs in the popped child: 'a' keeps its forward value
    np.testing.assert_allclose(workspace.FetchBlob("z"), [3.0])
    np.testing.assert_allclose(workspace.FetchBlob("x"), [100.0])  # inputs are not written back
    assert not bool(workspace.FetchBlob("has"))
    with pytest.raises(Exception, match="forward child workspace"):
        workspace.RunNetOnce(back)


def _power_loop(x: float, y: float, z: float, n: int, grads: bool = True):
    """x -> x^2 every iteration; y -> y^2 on the first, z -> z^3 on the others (n iterations)."""
    with NetBuilder(_use_control_ops=True) as nb:
        ops.Copy(ops.Const(0), "i")
        ops.Copy(ops.Const(1), "one")
        ops.Copy(ops.Const(n), "n")
        ops.Copy(ops.Const(2), "two")
        for name, v in (("x", x), ("y", y), ("z", z)):
            ops.Copy(ops.Const(v), name)
        with ops.WhileNet():
            with ops.Condition():
                ops.Add(["i", "one"], "i")
                ops.LE(["i", "n"])
            ops.Pow("x", "x", exponent=2.0)
            with ops.IfNet(ops.LT(["i", "two"])):
                ops.Pow("y", "y", exponent=2.0)
            with ops.Else():
                ops.Pow("z", "z", exponent=3.0)
        ops.Add(["x", "y"], "x_plus_y")
        ops.Add(["x_plus_y", "z"], "s")
    net = nb.get()[0]
    if grads:
        net.AddGradientOperators(["s"])
    workspace.RunNetOnce(net)
    scope = next(op.output[0] for op in net.Proto().op if op.type == "CreateScope" and "loop_body" in op.output[0])
    return {b: float(workspace.FetchBlob(b)) for b in ("x", "y", "z", "s")} | {"scope": scope}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_while_gradient_matches_the_closed_form(n: int) -> None:
    x0, y0, z0 = 1.25, 1.5, 0.75
    out = _power_loop(x0, y0, z0, n)
    assert out["x"] == pytest.approx(x0 ** (2**n), rel=1e-5)
    grads = {b: float(workspace.FetchBlob(f"{b}_grad")) for b in "xyz"}
    assert grads["x"] == pytest.approx(2**n * x0 ** (2**n - 1), rel=1e-5)
    assert grads["y"] == pytest.approx(2 * y0, rel=1e-5)
    k = n - 1  # iterations that cube z
    assert grads["z"] == pytest.approx(3**k * z0 ** (3**k - 1), rel=1e-5)


def test_while_gradient_matches_finite_differences() -> None:
    point, h = {"x": 1.1, "y": 0.9, "z": 1.2}, 1e-3
    _power_loop(point["x"], point["y"], point["z"], 3)
    analytic = {b: float(workspace.FetchBlob(f"{b}_grad")) for b in "xyz"}
    for b in "xyz":
        up = _power_loop(**{**point, b: point[b] + h}, n=3, grads=False)["s"]
        down = _power_loop(**{**point, b: point[b] - h}, n=3, grads=False)["s"]
        assert analytic[b] == pytest.approx((up - down) / (2 * h), rel=2e-3)


def test_while_gradient_leaves_no_child_workspace_behind() -> None:
    scope = _power_loop(1.1, 0.9, 1.2, 3)["scope"]
    assert workspace.FetchBlob(scope).depth == 0


def test_while_gradient_of_a_blob_the_loop_only_reads_is_summed() -> None:
    with NetBuilder(_use_control_ops=True) as nb:
        ops.Copy(ops.Const(0), "i")
        ops.Copy(ops.Const(1), "one")
        ops.Copy(ops.Const(3), "n")
        ops.Copy(ops.Const(1.5), "acc")
        ops.Copy(ops.Const(0.5), "w")
        with ops.WhileNet():
            with ops.Condition():
                ops.Add(["i", "one"], "i")
                ops.LE(["i", "n"])
            ops.Mul(["w", "w"], "sq")
            ops.Add(["acc", "sq"], "acc")
    net = nb.get()[0]
    grads = net.AddGradientOperators(["acc"])
    workspace.RunNetOnce(net)
    assert float(workspace.FetchBlob("acc")) == pytest.approx(1.5 + 3 * 0.25)
    assert float(workspace.FetchBlob(str(grads["w"]))) == pytest.approx(3 * 2 * 0.5)
    assert float(workspace.FetchBlob(str(grads["acc"]))) == pytest.approx(1.0)


def test_while_gradient_needs_a_do_loop_body() -> None:
    body = core.Net("body")
    body.Scale("x", "x", scale=2.0)
    op = core.CreateOperator("While", ["c", "x"], ["x"], loop_net=body.Proto())
    with pytest.raises(Exception, match="one Do op"):
        core.GradientRegistry.GetGradientForOp(op, ["x_grad"])


@pytest.mark.parametrize("x0, p", [(2.0, 3.0), (-1.5, 3.0), (1.7, 2.0), (0.8, 0.5)])
def test_in_place_pow_gradient_recovers_its_input(x0: float, p: float) -> None:
    net = core.Net("pow_in_place")
    net.Pow("x", "x", exponent=p)
    net.Scale("x", "s", scale=1.0)
    net.AddGradientOperators(["s"])
    workspace.FeedBlob("x", np.array([x0], np.float64))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), [p * x0 ** (p - 1)], rtol=1e-10)


def test_while_gradient_leaves_a_shared_output_gradient_unchanged() -> None:
    with NetBuilder(_use_control_ops=True) as nb:
        ops.Copy(ops.Const(0), "i")
        ops.Copy(ops.Const(1), "one")
        ops.Copy(ops.Const(2), "n")
        ops.Copy(ops.Const(1.5), "a")
        ops.Copy(ops.Const(0.5), "b")
        with ops.WhileNet():
            with ops.Condition():
                ops.Add(["i", "one"], "i")
                ops.LE(["i", "n"])
            ops.Scale("a", "a", scale=3.0)
            ops.Scale("b", "b", scale=5.0)
        ops.Add(["a", "b"], "s")
    net = nb.get()[0]
    grads = net.AddGradientOperators(["s"])
    workspace.RunNetOnce(net)
    assert float(workspace.FetchBlob(str(grads["s"]))) == 1.0  # both outputs' gradient, read again later
    assert float(workspace.FetchBlob(str(grads["a"]))) == pytest.approx(9.0)
    assert float(workspace.FetchBlob(str(grads["b"]))) == pytest.approx(25.0)
