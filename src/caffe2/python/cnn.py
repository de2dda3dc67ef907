"""Caffe2's ``caffe2.python.cnn``: ``CNNModelHelper``, the deprecated model class whose layer
methods (``model.FC``, ``model.Conv``...) call the ``brew`` helpers with the model's order and
cuDNN settings::

    >>> from caffe2.python import cnn
    >>> model = cnn.CNNModelHelper(order="NHWC", name="cnn_doc")
    >>> model.arg_scope["order"]
    'NHWC'
    >>> str(model.FC("data", "fc", dim_in=3, dim_out=2))
    'fc'
"""

from __future__ import annotations

from typing import Any

from caffe2.python import brew
from caffe2.python.model_helper import ModelHelper

__all__ = ["CNNModelHelper"]

# CNNModelHelper method -> brew helper
_LAYERS = {
    "FC": "fc",
    "Conv": "conv",
    "ConvNd": "conv_nd",
    "ConvTranspose": "conv_transpose",
    "MaxPool": "max_pool",
    "AveragePool": "average_pool",
    "Relu": "relu",
    "PRelu": "prelu",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Softmax": "softmax",
    "Dropout": "dropout",
    "SpatialBN": "spatial_bn",
    "LRN": "lrn",
    "Sum": "sum",
    "Transpose": "transpose",
    "Concat": "concat",
    "DepthConcat": "depth_concat",
    "Accuracy": "accuracy",
    "Iter": "iter",
}


class CNNModelHelper(ModelHelper):
    """A ModelHelper with Caffe2's CNN layer methods and ``order``/cuDNN settings in its arg scope."""

    def __init__(
        self,
        order: str = "NCHW",
        name: str | None = None,
        use_cudnn: bool = True,
        cudnn_exhaustive_search: bool = False,
        ws_nbytes_limit: int | None = None,
        init_params: bool = True,
        skip_sparse_optim: bool = False,
        param_model: ModelHelper | None = None,
    ):
        if order not in ("NCHW", "NHWC"):
            raise ValueError(f"Cannot understand the CNN storage order {order}.")
        scope = {"order": order, "use_cudnn": use_cudnn, "cudnn_exhaustive_search": cudnn_exhaustive_search}
        if ws_nbytes_limit:
            scope["ws_nbytes_limit"] = ws_nbytes_limit
        super().__init__(
            name="CNN" if name is None else name,
            init_params=init_params,
            skip_sparse_optim=skip_sparse_optim,
            param_model=param_model,
            arg_scope=scope,
        )
        self.order = order
        self.use_cudnn = use_cudnn
        self.cudnn_exhaustive_search = cudnn_exhaustive_search
        self.ws_nbytes_limit = ws_nbytes_limit

    def AddWeightDecay(self, weight_decay: float) -> Any:
        """``brew.add_weight_decay(self, weight_decay)``."""
        return brew.add_weight_decay(self, weight_decay)


def _layer(helper: str) -> Any:
    def method(self: CNNModelHelper, *args: Any, **kwargs: Any) -> Any:
        return getattr(brew, helper)(self, *args, **kwargs)

    method.__name__ = helper
    method.__doc__ = f"``brew.{helper}(self, ...)``."
    return method


for _name, _helper in _LAYERS.items():
    setattr(CNNModelHelper, _name, _layer(_helper))
