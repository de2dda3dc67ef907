"""ONNX models on asyncnet: import (:func:`load`), an ONNX backend (:mod:`.backend`), export (:func:`export`).

>>> import onnx, onnx.helper as oh, numpy as np
>>> from asyncnet.interop.onnx import backend
>>> g = oh.make_graph([oh.make_node("Add", ["a", "b"], ["c"])], "g",
...     [oh.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in "ab"],
...     [oh.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [2])])
>>> rep = backend.prepare(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]))
>>> rep.run([np.ones(2, np.float32), np.ones(2, np.float32)])[0]
array([2., 2.], dtype=float32)
"""

from asyncnet.interop.onnx import _native  # noqa: F401 - registers the native translators in _translate.NATIVE
from asyncnet.interop.onnx._import import OnnxImportError, OnnxInputError, OnnxModel, ValueSpec, load

__all__ = [
    "load",
    "export",
    "export_trained",
    "OnnxModel",
    "ValueSpec",
    "OnnxImportError",
    "OnnxInputError",
    "OnnxExportError",
]


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name in ("export", "export_trained", "OnnxExportError"):
        from asyncnet.interop.onnx import _export

        return getattr(_export, name)
    if name == "backend":
        import importlib

        return importlib.import_module("asyncnet.interop.onnx.backend")
    raise AttributeError(f"module 'asyncnet.interop.onnx' has no attribute {name!r}")
