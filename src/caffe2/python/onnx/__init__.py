"""Caffe2's ONNX bridge (``caffe2.python.onnx``): :mod:`~caffe2.python.onnx.backend` (ONNX models
to Caffe2 init/predict nets, run or saved as ``.pb`` files) and :mod:`~caffe2.python.onnx.frontend`
(Caffe2 nets to ONNX models)."""
