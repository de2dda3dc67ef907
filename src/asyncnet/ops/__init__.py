"""Operators, one module per family. Importing this package registers all of them."""

from asyncnet.ops import fill, math, nn, grad, logic, atomic, barrier, collective, loss, optim, device  # noqa: F401
from asyncnet.ops import shape, conv, pool, norm, sparse, recurrent  # noqa: F401
from asyncnet.ops import onnx_ref, onnx_nn, onnx_rnn, onnx_control  # noqa: F401
from asyncnet.ops import dbio, caffe2_misc, caffe2_rnn, caffe2_stats  # noqa: F401

__all__ = ["fill", "math", "nn", "grad", "logic", "atomic", "barrier", "collective", "loss", "optim", "device",
           "shape", "conv", "pool", "norm", "sparse", "recurrent",
           "onnx_ref", "onnx_nn", "onnx_rnn", "onnx_control", "dbio", "caffe2_misc", "caffe2_rnn", "caffe2_stats"]
