"""Caffe2's ONNX frontend (``caffe2.python.onnx.frontend``): a Caffe2 init/predict NetDef pair
to an ONNX model, on asyncnet's ONNX export.

``value_info`` maps each graph input the init net does not fill to ``(onnx element type,
shape)``, as in Caffe2; the init net is run once and the parameters the predict net reads become
initializers; the outputs are the predict net's ``external_output``::

    >>> import numpy as np, onnx
    >>> from caffe2.python import core
    >>> from caffe2.proto import caffe2_pb2
    >>> init = caffe2_pb2.NetDef(name="init")
    >>> _ = init.op.append(core.CreateOperator("GivenTensorFill", [], ["b"], shape=[2], values=[1.0, -5.0]))
    >>> pred = caffe2_pb2.NetDef(name="pred", external_input=["x", "b"], external_output=["y"])
    >>> pred.op.extend([core.CreateOperator("Add", ["x", "b"], ["s"]), core.CreateOperator("Relu", ["s"], ["y"])])
    >>> m = caffe2_net_to_onnx_model(pred, init, {"x": (onnx.TensorProto.FLOAT, [2])})
    >>> [n.op_type for n in m.graph.node], [i.name for i in m.graph.initializer]
    (['Add', 'Relu'], ['b'])

The ops it converts are those asyncnet's exporter knows (:data:`asyncnet.interop.onnx._export.EXPORTERS`),
plus the ops of a net the backend made from an ONNX model (:mod:`._reexport`), so a model goes
to Caffe2 and back; any other op is an :class:`~asyncnet.interop.onnx.OnnxExportError` naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe2.convert import lenient, to_asyncnet
from caffe2.proto import caffe2_pb2

__all__ = ["Caffe2Frontend", "caffe2_net_to_onnx_graph", "caffe2_net_to_onnx_model"]


def _as_proto(net: Any) -> Any:
    """A ``caffe2_pb2.NetDef`` from a proto or a ``core.Net``."""
    if net is None or isinstance(net, caffe2_pb2.NetDef):
        return net
    if hasattr(net, "Proto"):
        return net.Proto()
    raise TypeError(f"expected a caffe2_pb2.NetDef or a core.Net, got {type(net).__name__}")


class Caffe2Frontend:
    """Caffe2's frontend class: :meth:`caffe2_net_to_onnx_model` and :meth:`caffe2_net_to_onnx_graph`."""

    target_opset_version = 17

    @classmethod
    def caffe2_net_to_onnx_model(cls, predict_net: Any, init_net: Any = None, value_info: Any = None) -> Any:
        """The checked ``onnx.ModelProto`` of the pair (see the module doc)."""
        from asyncnet.core.defs import NetDef
        from asyncnet.interop.onnx._export import export
        from caffe2.python.onnx import _reexport  # noqa: F401 - the exporters of imported ONNX ops

        if value_info is None:
            value_info = {}
        if not isinstance(value_info, dict):
            raise ValueError("Please pass value_info as a name -> (type, shape) dictionary")
        pred_pb, init_pb = _as_proto(predict_net), _as_proto(init_net)
        pred = lenient(to_asyncnet(pred_pb, "predict_net"))
        init = lenient(to_asyncnet(init_pb, "init_net")) if init_pb is not None else NetDef("init")
        filled = {o for op in init.ops for o in op.outputs}
        missing = [n for n in pred.external_inputs if n not in filled and n not in value_info]
        if missing:
            raise RuntimeError(f"Could not find value info of inputs: {', '.join(missing)}")
        feeds = {n: _example(*value_info[n]) for n in pred.external_inputs if n not in filled}
        model = export((init, pred), None, feeds, list(pred.external_outputs) or None, dynamic_batch=False)
        model.producer_name = "onnx-caffe2"
        return model

    @classmethod
    def caffe2_net_to_onnx_graph(cls, predict_net: Any, init_net: Any = None, value_info: Any = None) -> Any:
        """The ``onnx.GraphProto`` of :meth:`caffe2_net_to_onnx_model`."""
        return cls.caffe2_net_to_onnx_model(predict_net, init_net, value_info).graph


def _example(elem_type: int, shape: Any) -> np.ndarray:
    """Zeros of an ONNX element type and shape (the input's signature, for the export's trace)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    return np.zeros([int(d) for d in shape], dtype=tensor_dtype_to_np_dtype(elem_type))


caffe2_net_to_onnx_model = Caffe2Frontend.caffe2_net_to_onnx_model
caffe2_net_to_onnx_graph = Caffe2Frontend.caffe2_net_to_onnx_graph
