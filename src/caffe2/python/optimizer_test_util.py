"""Caffe2's ``caffe2.python.optimizer_test_util``: mix-in test cases every optimizer's test class
combines with ``unittest.TestCase``. A subclass defines ``build_optimizer(model, **kwargs)`` (which
calls a ``build_*`` function) and ``check_optimizer(optimizer)`` (which inspects its auxiliary
parameters after training).

* :class:`OptimizerTestBase`: a linear model ``y = x . w + b`` with ``w`` learnt to within 1e-2 of
  ``[2, 6, 5, 0, 1]`` from 20 binary rows in 2000 steps (``testDense``), the same through a sparse
  ``Gather`` of a duplicated weight vector (``testSparse``), and a CUDA build (``testGPUDense``,
  skipped without GPU support).
* :class:`LRModificationTestBase`: ``max_gradient_norm`` clipping checked against a numpy global
  norm, and the ``lr_injection`` multiplier.

    >>> import unittest
    >>> from caffe2.python import optimizer, test_util
    >>> class SgdCase(OptimizerTestBase, test_util.TestCase):
    ...     def build_optimizer(self, model, **kwargs):
    ...         return optimizer.build_sgd(model, base_learning_rate=0.1, **kwargs)
    ...     def check_optimizer(self, opt):
    ...         self.assertTrue(opt.get_auxiliary_parameters().shared)
    >>> result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(SgdCase("testDense"))
    >>> result.wasSuccessful()
    True
"""

from __future__ import annotations

import unittest
from typing import Any

import numpy as np

from caffe2.proto import caffe2_pb2
from caffe2.python import brew, cnn, core, optimizer, workspace
from caffe2.python.model_helper import ModelHelper
from caffe2.python.modeling.initializers import Initializer, PseudoFP16Initializer

__all__ = ["LRModificationTestBase", "OptimizerTestBase"]

_PERFECT = np.array([2, 6, 5, 0, 1], dtype=np.float32)
_ROWS = 20
_STEPS = 2000
_ATOL = 1e-2


def _binary_rows(width: int, dtype: Any) -> np.ndarray:
    """Seeded 0/1 rows (``_ROWS`` x ``width``)."""
    np.random.seed(123)
    return np.random.randint(2, size=(_ROWS, width)).astype(dtype)


class OptimizerTestBase:
    """Training tests for an optimizer; mix into a ``unittest.TestCase`` (not a TestCase itself)."""

    _skip_gpu = False

    def build_optimizer(self, model: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the test class builds its optimizer")

    def check_optimizer(self, optimizer: Any) -> None:
        raise NotImplementedError("the test class checks its optimizer")

    def _createDense(self, dtype: Any = core.DataType.FLOAT) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """(model, perfect weights, data, labels) of a 5 -> 1 fully connected model with a
        squared-L2 loss; fp16 parameters (``PseudoFP16Initializer``) when ``dtype`` is FLOAT16."""
        half = dtype == core.DataType.FLOAT16
        data = _binary_rows(_PERFECT.size, np.float16 if half else np.float32)
        label = np.dot(data, _PERFECT)[:, np.newaxis]
        init = PseudoFP16Initializer if half else Initializer
        model = ModelHelper(name="test", arg_scope={"order": "NCHW"})
        out = brew.fc(
            model,
            "data",
            "fc",
            _PERFECT.size,
            1,
            ("ConstantFill", {}),
            ("ConstantFill", {}),
            axis=0,
            WeightInitializer=init,
            BiasInitializer=init,
        )
        if half:
            out = model.HalfToFloat(out, out + "_fp32")
        loss = model.AveragedLoss(model.SquaredL2Distance([out, "label"]), "avg_loss")
        grad_map = model.AddGradientOperators([loss])
        self.assertIsInstance(grad_map["fc_w"], core.BlobReference)  # type: ignore[attr-defined]
        return model, _PERFECT.copy(), data, label

    def _train(self, model: Any, feeds: Any) -> None:
        """Run the init net, then the net once per ``(name, value)`` feed list of ``feeds``."""
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net, True)
        for step in feeds:
            if step is None:
                continue
            for name, value in step:
                workspace.FeedBlob(name, value)
            workspace.RunNet(model.net.Proto().name)

    def testDense(self) -> None:
        model, perfect, data, label = self._createDense()
        opt = self.build_optimizer(model)
        workspace.FeedBlob("data", data[0])
        workspace.FeedBlob("label", label[0])
        rows = (np.random.randint(data.shape[0]) for _ in range(_STEPS))
        self._train(model, ([("data", data[i]), ("label", label[i])] for i in rows))
        np.testing.assert_allclose(perfect[np.newaxis, :], workspace.FetchBlob("fc_w"), atol=_ATOL)
        self.check_optimizer(opt)

    @unittest.skipIf(not workspace.has_gpu_support, "No gpu support")
    def testGPUDense(self, dtype: Any = core.DataType.FLOAT) -> None:
        with core.DeviceScope(core.DeviceOption(caffe2_pb2.CUDA, 0)):
            model, _, data, label = self._createDense(dtype)
            fc = model.HalfToFloat("fc", "fc_fp32_for_host") if dtype == core.DataType.FLOAT16 else "fc"
            model.CopyGPUToCPU(fc, "fc_cpu")
            workspace.FeedBlob("data", data[0])
            workspace.FeedBlob("label", label[0])
        brew.fc(model, "fc_cpu", "fc2", dim_in=1, dim_out=10, axis=0)
        self.build_optimizer(model)
        if self._skip_gpu:
            return
        self._train(model, [[]])

    def testSparse(self) -> None:
        """Each weight is read through two indices, so a row may count a weight twice."""
        dup = 2
        data = _binary_rows(_PERFECT.size * dup, np.float32)
        label = np.dot(data, np.repeat(_PERFECT, dup))
        model = cnn.CNNModelHelper("NCHW", name="test")
        w = model.param_init_net.ConstantFill([], "w", shape=[_PERFECT.size], value=0.0)
        model.params.append(w)
        out = model.ReduceFrontSum(model.net.Gather([w, "indices"], "gather"), "sum")
        loss = model.AveragedLoss(model.SquaredL2Distance([out, "label"]), "avg_loss")
        grad_map = model.AddGradientOperators([loss])
        self.assertIsInstance(grad_map["w"], core.GradientSlice)  # type: ignore[attr-defined]
        opt = self.build_optimizer(model)
        workspace.CreateBlob("indices")
        workspace.CreateBlob("label")
        slots = np.repeat(np.arange(_PERFECT.size), dup)
        for index_type in (np.int32, np.int64):

            def feeds(index_type: Any = index_type) -> Any:
                for _ in range(_STEPS):
                    row = np.random.randint(data.shape[0])
                    picked = slots[data[row] == 1]
                    yield (
                        [("indices", picked.astype(index_type)), ("label", np.array(label[row], dtype=np.float32))]
                        if picked.size
                        else None
                    )

            self._train(model, feeds())
            np.testing.assert_allclose(_PERFECT, workspace.FetchBlob("w"), atol=_ATOL)
        self.check_optimizer(opt)


class LRModificationTestBase:
    """Learning-rate modifiers of ``build_*``: gradient-norm clipping and ``lr_injection``.
    Mix in after :class:`OptimizerTestBase` (it uses ``_createDense``)."""

    def _gradient_ratio_reference(self, model: Any, params: list[Any], max_gradient_norm: float) -> float:
        """clip / max(clip, global L2 norm of the fetched gradients), in numpy."""
        total = 0.0
        for param in params:
            grad = model.param_to_grad[param]
            grad = grad.values if isinstance(grad, core.GradientSlice) else grad
            total += float(np.sum(np.square(workspace.FetchBlob(grad).astype(np.float64))))
        return max_gradient_norm / max(max_gradient_norm, float(np.sqrt(total)))

    def _start(self, **kwargs: Any) -> tuple[Any, Any, np.ndarray, np.ndarray]:
        model, _, data, label = self._createDense()  # type: ignore[attr-defined]
        opt = self.build_optimizer(model, **kwargs)  # type: ignore[attr-defined]
        workspace.FeedBlob("data", data[0])
        workspace.FeedBlob("label", label[0])
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net, True)
        self.assertIsNotNone(opt._lr_multiplier)  # type: ignore[attr-defined]
        return model, opt, data, label

    def test_global_norm_based_gradient_clipping(self) -> None:
        max_gradient_norm = 1.0
        model, _, data, label = self._start(max_gradient_norm=max_gradient_norm)
        params = [
            p
            for p in model.GetParams(top_scope=True)
            if p in model.param_to_grad and not isinstance(model.param_to_grad[p], core.GradientSlice)
        ]
        row = np.random.randint(data.shape[0])
        workspace.FeedBlob("data", data[row])
        workspace.FeedBlob("label", label[row])
        workspace.RunNet(model.net.Proto().name)
        reference = self._gradient_ratio_reference(model, params, max_gradient_norm)
        np.testing.assert_almost_equal(workspace.FetchBlob("norm_clipped_grad_update/norm_ratio"), reference)
        self.assertTrue(reference < 1.0, "Bad test, gradient not being scaled.")  # type: ignore[attr-defined]

    def test_lr_injection(self) -> None:
        model, _, _, _ = self._start(max_gradient_norm=1, allow_lr_injection=True)
        self.assertEqual(optimizer.get_lr_injection(), 1)  # type: ignore[attr-defined]
        optimizer.set_lr_injection(0)
        self.assertEqual(optimizer.get_lr_injection(), 0)  # type: ignore[attr-defined]
        workspace.RunNet(model.net.Proto().name)
        self.assertEqual(workspace.FetchBlob("lr_multiplier"), 0)  # type: ignore[attr-defined]
