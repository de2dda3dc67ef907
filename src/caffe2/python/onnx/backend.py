"""Caffe2's ONNX backend (``caffe2.python.onnx.backend``) on asyncnet's ONNX importer.

An ONNX model becomes a pair of ``caffe2_pb2.NetDef`` protos: an init net that fills every
initializer (Caffe2's ``GivenTensorFill`` family, as Caffe2's backend wrote them) and a predict
net of the ops :func:`asyncnet.interop.onnx.load` translates the graph into. The pair can be
saved as ``init_net.pb`` / ``predict_net.pb`` and run by ``workspace.RunNetOnce`` /
``workspace.CreateNet`` or by ``asyncnet run --init``. :func:`prepare` gives a
:class:`~caffe2.python.onnx.backend_rep.Caffe2Rep` that runs the model in its own workspace::

    >>> import numpy as np, onnx, onnx.helper as oh
    >>> from caffe2.python.onnx import backend
    >>> g = oh.make_graph([oh.make_node("Add", ["x", "b"], ["y"])], "g",
    ...     [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
    ...     [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    ...     initializer=[onnx.numpy_helper.from_array(np.array([1, 2], np.float32), "b")])
    >>> model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    >>> backend.run_model(model, [np.zeros(2, np.float32)]).y
    array([1., 2.], dtype=float32)
    >>> init, pred = backend.Caffe2Backend.onnx_graph_to_caffe2_net(model)
    >>> [op.type for op in init.op], pred.name, list(pred.external_output)
    (['GivenTensorFill'], 'g_predict', ['y'])

What differs from Caffe2: the ops of the predict net are asyncnet's (its ONNX translators, and
``ONNXReference`` for nodes without a native kernel), so the ``.pb`` pair runs on asyncnet, not
on a Caffe2 build; ``opset_version`` is accepted for its signature, the model's own opset is used.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper
from onnx.backend.base import Backend, Device, DeviceType, namedtupledict

from asyncnet.core.defs import NetDef, OperatorDef
from caffe2.convert import extend_floats, from_asyncnet, op_to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python import core
from caffe2.python.onnx.backend_rep import Caffe2Rep
from caffe2.python.onnx.workspace import Workspace

__all__ = [
    "Caffe2Backend",
    "get_device_option",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]

_FILL_TYPES = {  # ONNX element type -> (Caffe2 fill op, Argument field), as Caffe2's backend maps them
    TensorProto.FLOAT: ("GivenTensorFill", "floats"),
    TensorProto.DOUBLE: ("GivenTensorDoubleFill", "floats"),
    TensorProto.INT64: ("GivenTensorInt64Fill", "ints"),
    TensorProto.UINT32: ("GivenTensorInt64Fill", "ints"),
    TensorProto.UINT8: ("GivenTensorIntFill", "ints"),
    TensorProto.INT8: ("GivenTensorIntFill", "ints"),
    TensorProto.UINT16: ("GivenTensorIntFill", "ints"),
    TensorProto.INT16: ("GivenTensorIntFill", "ints"),
    TensorProto.INT32: ("GivenTensorIntFill", "ints"),
    TensorProto.BOOL: ("GivenTensorBoolFill", "ints"),
    TensorProto.STRING: ("GivenTensorStringFill", "strings"),
}


def get_device_option(device: Any) -> Any:
    """The ``caffe2_pb2.DeviceOption`` of an ONNX backend ``Device`` ("CPU", "CUDA:1")."""
    codes = {DeviceType.CPU: caffe2_pb2.CPU, DeviceType.CUDA: caffe2_pb2.CUDA}
    return core.DeviceOption(codes[device.type], device.device_id)


def _fill_op(name: str, array: np.ndarray) -> Any:
    """The Caffe2 fill op making blob ``name`` hold ``array`` (GivenTensorFill and its typed kin)."""
    from onnx.helper import np_dtype_to_tensor_dtype

    a = np.asarray(array)
    elem = TensorProto.STRING if a.dtype.kind in "OUS" else np_dtype_to_tensor_dtype(a.dtype)
    if elem not in _FILL_TYPES:
        raise ValueError(f"tensor {name!r}: expected a dtype Caffe2 can fill {sorted(_FILL_TYPES)}, got {a.dtype}")
    op_type, field = _FILL_TYPES[elem]
    op = caffe2_pb2.OperatorDef(type=op_type, output=[name])
    values = op.arg.add(name="values")
    if field == "strings":
        values.strings.extend(v if isinstance(v, bytes) else str(v).encode("utf-8") for v in a.ravel().tolist())
    elif field == "floats":
        extend_floats(values, a.ravel())
    else:
        values.ints.extend(a.ravel().astype(np.int64).tolist())
    op.arg.add(name="shape").ints.extend(a.shape)
    return op


def _fill_value(op: OperatorDef) -> np.ndarray | None:
    """The array an importer's ``ONNXTensorFill`` op makes (None for any other op)."""
    if op.type != "ONNXTensorFill":
        return None
    raw = base64.b64decode(op.args.get("raw", ""))
    dtype = np.dtype(op.args.get("dtype", "float32")).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(op.args.get("shape", []))


class Caffe2Backend(Backend):
    """Caffe2's ``onnx.backend`` implementation, its class methods as Caffe2 named them."""

    _known_opset_version = 9

    @classmethod
    def _create_tensor_filling_op(cls, onnx_tensor: Any, name: str | None = None) -> Any:
        """The Caffe2 fill op of an ONNX ``TensorProto`` (``GivenTensorFill`` for float, ...)."""
        return _fill_op(name or onnx_tensor.name, numpy_helper.to_array(onnx_tensor))

    @classmethod
    def _import(cls, model: Any, device: str, check: bool = True) -> tuple[Any, Any]:
        """(init, predict) ``caffe2_pb2.NetDef`` of ``model``: the importer's nets, device set."""
        from asyncnet.interop.onnx import load

        graph_name = model.graph.name
        imported = load(model, name=f"{graph_name}_predict", check=check)
        init = from_asyncnet(NetDef(f"{graph_name}_init", ops=list(imported.init_net.ops)))
        pred = from_asyncnet(imported.predict_net)
        dev = get_device_option(Device(device))
        for net in (init, pred):
            net.device_option.CopyFrom(dev)
        init.external_output.extend(imported.init_net.external_outputs)
        return init, pred

    @classmethod
    def onnx_graph_to_caffe2_net(cls, model: Any, device: str = "CPU", opset_version: int | None = None) -> Any:
        """``(init_net, predict_net)``: ``caffe2_pb2.NetDef`` protos for ``model``; the init net fills
        every initializer and constant with Caffe2's ``GivenTensor*Fill`` ops.

            >>> import onnx, onnx.helper as oh
            >>> g = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "relu",
            ...     [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
            ...     [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
            >>> init, pred = Caffe2Backend.onnx_graph_to_caffe2_net(oh.make_model(g))
            >>> init.name, [op.type for op in pred.op]
            ('relu_init', ['Relu'])
        """
        init, pred = cls._import(model, device)
        fills = []
        for op in init.op:
            value = _fill_value(op_to_asyncnet(op))
            fill = op if value is None else _fill_op(op.output[0], value)
            fills.append(fill)
        del init.op[:]
        init.op.extend(fills)
        return init, pred

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", raw_values_dict: Any = None, **kwargs: Any) -> Caffe2Rep:
        """A :class:`Caffe2Rep` running ``model`` (an ``onnx.ModelProto``) in a workspace of its own."""
        if raw_values_dict:
            raise NotImplementedError("prepare: raw_values_dict (external raw data) is not supported")
        check = not kwargs.pop("no_check_UNSAFE", False)
        if check:
            super().prepare(model, device, **kwargs)
        init, pred = cls._import(model, device, check=check)
        initialized = {t.name for t in model.graph.initializer}
        uninitialized = [v.name for v in model.graph.input if v.name not in initialized]
        return Caffe2Rep(init, pred, Workspace(), uninitialized)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        opset_version: int | None = None,
        outputs_info: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run one ONNX node on ``inputs`` (a list in the node's input order, or a dict)."""
        import onnx.helper as oh

        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(node.input, inputs))
        if not isinstance(inputs, dict) and len(inputs) != len(node.input):
            raise ValueError(f"{node.op_type}: expected {len(node.input)} inputs, got {len(inputs)}")
        g_inputs = [
            oh.make_tensor_value_info(k, oh.np_dtype_to_tensor_dtype(np.asarray(v).dtype), list(np.shape(v)))
            for k, v in feeds.items()
        ]
        graph = oh.make_graph([node], "run_node", g_inputs, [oh.make_empty_tensor_value_info(o) for o in node.output])
        opsets = [oh.make_opsetid("", opset_version)] if opset_version else None
        model = oh.make_model(graph, opset_imports=opsets) if opsets else oh.make_model(graph)
        rep = cls.prepare(model, device, no_check_UNSAFE=True)
        out = rep.run(feeds)
        return namedtupledict("Outputs", list(node.output))(*out)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA when torch sees a GPU."""
        dev = Device(device)
        if dev.type == DeviceType.CPU:
            return True
        from caffe2.python import workspace

        return bool(workspace.has_gpu_support) and workspace.NumGpuDevices() > 0


prepare = Caffe2Backend.prepare
run_node = Caffe2Backend.run_node
run_model = Caffe2Backend.run_model
supports_device = Caffe2Backend.supports_device
