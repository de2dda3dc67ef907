"""Caffe2's ``ParameterInfo`` and ``ParameterTags``: what a model knows about one parameter."""

from __future__ import annotations

from typing import Any

__all__ = ["ParameterInfo", "ParameterTags"]


class ParameterTags:
    """Tags a parameter may carry (a weight, a bias, a computed parameter such as BN's running mean)."""

    BIAS = "BIAS"
    WEIGHT = "WEIGHT"
    COMPUTED_PARAM = "COMPUTED_PARAM"


class ParameterInfo:
    """One parameter: its blob, shape, gradient and optimizer (set by the model as it learns them)."""

    def __init__(
        self,
        param_id: Any,
        param: Any,
        key: Any = None,
        shape: Any = None,
        length: Any = None,
        grad: Any = None,
        blob_copy: Any = None,
    ):
        self.param_id = param_id
        self.name = str(param)
        self.blob = param
        self.key = key
        self.shape = shape
        self.size = None if shape is None else int(__import__("math").prod(shape))
        self.length = max(1, length if length is not None else 1)
        self.grad = grad
        self._cloned_init_net = None
        self.blob_copy = blob_copy
        self.optimizer = None
        self.regularizer = None

    def grad_type(self) -> Any:
        return type(self.grad)

    def __str__(self) -> str:
        return self.name
