"""Caffe2's ONNX bridge (``caffe2.python.onnx``): see :mod:`caffe2.python.onnx.frontend`."""
