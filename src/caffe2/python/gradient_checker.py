"""Caffe2's ``caffe2.python.gradient_checker``: an op's gradient ops against central finite
differences, on asyncnet's registered gradients.

The loss is ``0.5 * sum(y ** 2)`` over the checked outputs, so each output's gradient is the
output itself::

    >>> import numpy as np
    >>> from caffe2.python import core, gradient_checker
    >>> op = core.CreateOperator("Tanh", ["x"], ["y"])
    >>> x = np.linspace(-1, 1, 6).astype(np.float32)
    >>> ok, grad, est = gradient_checker.GradientChecker(0.01, 0.005).CheckSimple(op, [x], 0, [0])
    >>> bool(ok)
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

__all__ = ["GradientChecker", "NetGradientChecker"]


def _grad_blob(g_input: list[Any], op: Any, index: int) -> Any:
    grad = g_input[index]
    if grad is None:
        raise ValueError(f"input {op.input[index]!r} of {op.type} has no gradient")
    return grad


class GradientChecker:
    """Checks one op's analytic gradient of input ``input_to_check`` against finite differences
    with step ``stepsize``; elements agree when ``np.isclose(atol=threshold, rtol=threshold)``."""

    def __init__(
        self,
        stepsize: float,
        threshold: float,
        device_option: Any = None,
        workspace_name: str = "gradient_check",
        input_device_options: Any = None,
    ):
        self._stepsize = stepsize
        self._threshold = threshold
        self._device_option = device_option or caffe2_pb2.DeviceOption()
        self._workspace_name = workspace_name
        self._input_device_options = input_device_options or {}

    def GetLossAndGrad(self, op: Any, grad_ops: list[Any], *args: Any) -> tuple[float, Any]:
        """Run ``op``; the loss, and the gradient of the checked input through ``grad_ops``.

        Two call forms are accepted, after ``op, grad_ops``:

        - ``inputs, input_names, input_to_check, grad_name, outputs_with_grads``: every input is
          fed, the gradient of ``inputs[input_to_check]`` is returned;
        - ``x, input_name, grad_name, outputs_with_grads``: only ``x`` is fed as ``input_name``
          (the other inputs already live in the workspace).

        The gradient is None when ``grad_name`` is None; with no gradient ops it is the output
        gradient blob itself, passed through. Example::

            loss, grad = checker.GetLossAndGrad(op, grad_ops, x, "x", "x_grad", [0])
        """
        if len(args) == 5:
            inputs, input_names, input_to_check, grad_name, outputs_with_grads = args
            self._feed_named(input_names, inputs)
            x = inputs[input_to_check]
        elif len(args) == 4:
            x, input_name, grad_name, outputs_with_grads = args
            self._feed_named([input_name], [x])
        else:
            raise TypeError(
                "GetLossAndGrad expected (op, grad_ops, inputs, input_names, input_to_check, "
                "grad_name, outputs_with_grads) or (op, grad_ops, x, input_name, grad_name, "
                f"outputs_with_grads), found {2 + len(args)} arguments"
            )
        workspace.RunOperatorOnce(op)
        loss = self._loss_and_output_grads(op, outputs_with_grads)
        if grad_name is None:
            return loss, None
        if grad_ops:
            workspace.RunOperatorsOnce(grad_ops)
        if isinstance(grad_name, core.GradientSlice):
            values = np.asarray(workspace.FetchBlob(str(grad_name.values)))
            indices = np.asarray(workspace.FetchBlob(str(grad_name.indices))).astype(np.int64)
            dense = np.zeros_like(np.asarray(x), dtype=values.dtype)
            np.add.at(dense, indices, values)
            return loss, dense
        return loss, np.asarray(workspace.FetchBlob(str(grad_name)))

    def _feed_named(self, names: list[Any], values: list[Any]) -> None:
        for name, value in zip(names, values):
            workspace.FeedBlob(str(name), value)

    @staticmethod
    def _loss_and_output_grads(op: Any, outputs_with_grads: list[int]) -> float:
        loss = 0.0
        for idx in outputs_with_grads:
            name = op.output[idx]
            arr = np.asarray(workspace.FetchBlob(name))
            loss += float(np.sum(arr.astype(np.float64) ** 2)) / 2.0
            workspace.FeedBlob(name + "_grad", arr)
        return loss

    def _estimate(self, op: Any, inputs: list[Any], input_to_check: int, outputs_with_grads: list[int]) -> np.ndarray:
        x = inputs[input_to_check]
        estimate = np.zeros(x.shape, dtype=np.float64)
        for i in range(x.size):
            old = x.flat[i]
            x.flat[i] = old + self._stepsize
            pos, _ = self.GetLossAndGrad(op, [], inputs, list(op.input), input_to_check, None, outputs_with_grads)
            x.flat[i] = old - self._stepsize
            neg, _ = self.GetLossAndGrad(op, [], inputs, list(op.input), input_to_check, None, outputs_with_grads)
            x.flat[i] = old
            estimate.flat[i] = (pos - neg) / self._stepsize / 2
        return estimate

    def CheckSimple(
        self,
        op: Any,
        inputs: list[Any],
        input_to_check: int,
        outputs_with_grads: list[int],
        grad_ops: list[Any] | None = None,
        input_device_options: Any = None,
        ensure_outputs_are_inferred: bool = False,
    ) -> tuple[bool, np.ndarray, np.ndarray]:
        """``(ok, analytic gradient, estimated gradient)`` of input ``input_to_check``."""
        inputs = [np.array(x, copy=True) if isinstance(x, np.ndarray) else x for x in inputs]
        if grad_ops is None:
            checked = set(outputs_with_grads)
            g_output = [o + "_grad" if i in checked else None for i, o in enumerate(op.output)]
            grad_ops, g_input = core.GradientRegistry.GetGradientForOp(op, g_output)
        else:
            g_input = [core.BlobReference(op.input[i] + "_grad") for i in range(len(op.input))]
        grad_name = _grad_blob(g_input, op, input_to_check)
        with workspace.WorkspaceGuard(self._workspace_name):
            workspace.ResetWorkspace()
            _, grad = self.GetLossAndGrad(
                op, grad_ops, inputs, list(op.input), input_to_check, grad_name, outputs_with_grads
            )
            estimate = self._estimate(op, inputs, input_to_check, outputs_with_grads)
            workspace.ResetWorkspace()
        grad = np.asarray(grad)
        estimate = estimate.reshape(grad.shape) if estimate.size == grad.size else estimate
        ok = grad.shape == estimate.shape and bool(
            np.all(np.isclose(grad, estimate, atol=self._threshold, rtol=self._threshold))
        )
        return ok, grad, estimate.astype(grad.dtype) if grad.dtype.kind == "f" else estimate


def _dense_grad(grad: Any, input_name: str) -> np.ndarray:
    if isinstance(grad, core.GradientSlice):
        values = np.asarray(workspace.FetchBlob(str(grad.values)))
        indices = np.asarray(workspace.FetchBlob(str(grad.indices))).astype(np.int64)
        dense = np.zeros_like(np.asarray(workspace.FetchBlob(input_name)), dtype=values.dtype)
        np.add.at(dense, indices, values)
        return dense
    return np.asarray(workspace.FetchBlob(str(grad)))


def _net_grads(net: Any, outputs: list[Any], losses: list[Any], feeds: Any, wrt: list[Any]) -> dict[str, Any]:
    """Feed ``feeds``, run a copy of ``net`` with the backward ops of ``losses`` appended, and
    return {"outputs": [(blob, value)] for ``outputs``, "grads": {input: dense gradient} for ``wrt``}."""
    copy = net.Clone(f"{net.Name()}_copy")
    grads = copy.AddGradientOperators(losses)
    missing = [str(name) for name in wrt if name not in grads]
    if missing:
        raise AssertionError(f"CompareNets: no gradient reaches {missing} in net {net.Name()}")
    for name, value in dict(feeds or {}).items():
        workspace.FeedBlob(str(name), value)
    workspace.RunNetOnce(copy)
    return {
        "outputs": [(blob, np.asarray(workspace.FetchBlob(str(blob)))) for blob in outputs],
        "grads": {name: _dense_grad(grads[name], str(name)) for name in wrt},
    }


def _assert_same(expected: Any, found: Any, threshold: float, what: str) -> None:
    np.testing.assert_allclose(expected, found, atol=threshold, rtol=threshold, err_msg=what)


class NetGradientChecker:
    """Gradients of whole nets: ``Check`` compares a net's analytic gradients with finite differences."""

    @staticmethod
    def CompareNets(
        nets: list[Any],
        outputs: list[list[Any]],
        outputs_with_grad_ids: list[int],
        inputs_with_grads: list[Any],
        input_values: dict[str, Any] | None = None,
        threshold: float = 0.0000001,
        print_net_images: bool = False,
    ) -> None:
        """Raise AssertionError unless the nets give the same forward outputs (``outputs[i]`` of
        ``nets[i]``) and the same gradients of ``inputs_with_grads`` from the outputs picked by
        ``outputs_with_grad_ids``, within ``threshold`` (absolute and relative). ``print_net_images``
        is accepted and ignored (no graph drawing here)."""
        runs = []
        for net, net_outputs in zip(nets, outputs):
            losses = [net_outputs[k] for k in outputs_with_grad_ids]
            runs.append(_net_grads(net, list(net_outputs), losses, input_values, list(inputs_with_grads)))
        reference = runs[0]
        for k, run in enumerate(runs[1:], start=1):
            if len(run["outputs"]) != len(reference["outputs"]):
                raise AssertionError(
                    f"net {k} has {len(run['outputs'])} outputs, net 0 has {len(reference['outputs'])}"
                )
            for j, ((ref_blob, ref), (blob, got)) in enumerate(zip(reference["outputs"], run["outputs"])):
                _assert_same(ref, got, threshold, f"output {j} differs: {ref_blob} (net 0) vs {blob} (net {k})")
            for name, ref in reference["grads"].items():
                _assert_same(ref, run["grads"][name], threshold, f"gradient of {name} differs: net 0 vs net {k}")

    @staticmethod
    def Check(
        net: Any,
        outputs_with_grad: list[Any],
        input_values: dict[str, Any],
        input_to_check: str,
        step_size: float = 0.0001,
        threshold: float = 0.05,
        print_net: bool = True,
    ) -> None:
        """Raise AssertionError unless d(sum of ``outputs_with_grad``)/d``input_to_check``
        matches central finite differences within ``threshold``."""
        losses = [str(o) for o in outputs_with_grad]
        grad_net = net.Clone(net.Name() + "_copy")
        grad_map = grad_net.AddGradientOperators(losses)
        grad_name = str(grad_map[input_to_check])

        def loss_and_grad(values: dict[str, Any]) -> tuple[float, np.ndarray]:
            for name, value in values.items():
                workspace.FeedBlob(name, value)
            workspace.RunNetOnce(grad_net)
            total = sum(float(np.sum(workspace.FetchBlob(o))) for o in losses)
            return total, np.asarray(workspace.FetchBlob(grad_name))

        values = {k: np.array(v, copy=True) for k, v in input_values.items()}
        _, grad = loss_and_grad(values)
        x = values[input_to_check]
        estimate = np.zeros(x.shape, dtype=np.float64)
        for i in range(x.size):
            old = x.flat[i]
            x.flat[i] = old + step_size
            pos, _ = loss_and_grad(values)
            x.flat[i] = old - step_size
            neg, _ = loss_and_grad(values)
            x.flat[i] = old
            estimate.flat[i] = (pos - neg) / (2 * step_size)
        np.testing.assert_allclose(grad, estimate, atol=threshold, rtol=threshold)
