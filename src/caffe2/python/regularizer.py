"""Caffe2's ``caffe2.python.regularizer``: penalties on a parameter, added to a net.

A regularizer is called as ``reg(net, param_init_net, param, grad=None)`` with ``param`` a
``core.BlobReference``. Two kinds:

* **Loss terms** (:class:`L1Norm`, :class:`L2Norm`): ops computing ``reg_lambda * ||param||``
  (the sum of absolute values for L1, the sum of squares for L2, Caffe2's ``LpNorm`` with p = 1
  or 2) into a new scoped blob, which the call returns; the caller adds it to the loss, so the
  gradient pass differentiates it with the rest.
* **Projections after the update** (:class:`MaxNorm`, :class:`ConstantNorm`,
  ``apply_after_optimizer`` true): rows of a sparse parameter touched by ``grad`` (a
  ``core.GradientSlice``) are rescaled in place by ``SparseNormalize``; dense parameters are
  refused.

    >>> import numpy as np
    >>> from caffe2.python import core, workspace
    >>> from caffe2.python.regularizer import L1Norm
    >>> workspace.FeedBlob("w", np.array([1.0, -2.0, 3.0], np.float32))
    True
    >>> net = core.Net("reg")
    >>> term = L1Norm(0.5)(net, core.Net("init"), core.BlobReference("w"))
    >>> workspace.RunNetOnce(net)
    True
    >>> float(workspace.FetchBlob(term)[0])
    3.0
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core

__all__ = ["ConstantNorm", "L1Norm", "L2Norm", "MaxNorm", "Regularizer"]


class Regularizer:
    """The base: subclasses implement ``_run``; ``apply_after_optimizer`` says when it runs."""

    def __init__(self) -> None:
        self.apply_after_optimizer = False

    def __call__(self, net: Any, param_init_net: Any, param: Any, grad: Any = None) -> Any:
        if not isinstance(param, core.BlobReference):
            raise TypeError(f"expected the parameter as a core.BlobReference, got {type(param).__name__}")
        return self._run(net, param_init_net, param, grad)

    def _run(self, net: Any, param_init_net: Any, param: Any, grad: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement _run")


class _LpPenalty(Regularizer):
    p = 1
    suffix = ""

    def __init__(self, reg_lambda: float):
        super().__init__()
        if reg_lambda < 0:
            raise ValueError(f"expected a regularization factor of 0 or more, got {reg_lambda}")
        self.reg_lambda = reg_lambda

    def _run(self, net: Any, param_init_net: Any, param: Any, grad: Any = None) -> Any:
        term = net.NextScopedBlob(str(param) + self.suffix)
        net.LpNorm([param], [term], p=self.p)
        net.Scale([term], [term], scale=self.reg_lambda)
        return term


class L1Norm(_LpPenalty):
    """``reg_lambda * sum(|param|)`` as a loss term."""

    p = 1
    suffix = "_l1_regularization"


class L2Norm(_LpPenalty):
    """``reg_lambda * sum(param ** 2)`` as a loss term."""

    p = 2
    suffix = "_l2_regularization"


class _SparseProjection(Regularizer):
    use_max_norm = True

    def __init__(self, norm: float = 1.0):
        super().__init__()
        self.norm = norm
        self.apply_after_optimizer = True

    def _run(self, net: Any, param_init_net: Any, param: Any, grad: Any) -> Any:
        if self.norm <= 0:
            raise ValueError(f"expected a norm above 0, got {self.norm}")
        if not isinstance(grad, core.GradientSlice):
            raise NotImplementedError(f"{type(self).__name__} applies to sparse parameters (a GradientSlice) only")
        net.SparseNormalize([param, grad.indices, grad.values], [param], use_max_norm=self.use_max_norm, norm=self.norm)
        return None


class MaxNorm(_SparseProjection):
    """After the update, each touched row whose L2 norm exceeds ``norm`` is scaled down to it."""

    use_max_norm = True


class ConstantNorm(_SparseProjection):
    """After the update, each touched row is scaled to L2 norm ``norm``."""

    use_max_norm = False
