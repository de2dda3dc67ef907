"""Caffe2's ONNX frontend (Caffe2 nets to ONNX models): importable, as scripts expect, but the
conversion is not done here: it raises with a pointer to asyncnet's own ONNX interop, which
exports asyncnet nets (convert a Caffe2 NetDef with :func:`caffe2.convert.to_asyncnet` first).

    >>> from caffe2.python.onnx.frontend import Caffe2Frontend
    >>> Caffe2Frontend().caffe2_net_to_onnx_model(None, None)
    Traceback (most recent call last):
    NotImplementedError: Caffe2's ONNX frontend is not provided: convert the net with caffe2.convert.to_asyncnet and export it with asyncnet's ONNX interop (asyncnet.interop.onnx)
"""

from __future__ import annotations

from typing import Any

__all__ = ["Caffe2Frontend", "caffe2_net_to_onnx_graph", "caffe2_net_to_onnx_model"]

_MESSAGE = (
    "Caffe2's ONNX frontend is not provided: convert the net with caffe2.convert.to_asyncnet and export it "
    "with asyncnet's ONNX interop (asyncnet.interop.onnx)"
)


class Caffe2Frontend:
    """Caffe2's frontend class; its conversions raise NotImplementedError (see the module doc)."""

    @classmethod
    def caffe2_net_to_onnx_model(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(_MESSAGE)

    @classmethod
    def caffe2_net_to_onnx_graph(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(_MESSAGE)


caffe2_net_to_onnx_model = Caffe2Frontend.caffe2_net_to_onnx_model
caffe2_net_to_onnx_graph = Caffe2Frontend.caffe2_net_to_onnx_graph
