"""Caffe2's Python package, on asyncnet: ``from caffe2.python import core, workspace`` and
``from caffe2.proto import caffe2_pb2`` work as they did in Caffe2.

It is a thin layer: it converts Caffe2's protobuf nets to asyncnet's :class:`~asyncnet.NetDef`
at its boundary (:mod:`caffe2.convert`) and delegates to asyncnet's workspace, executors, ops
and autodiff; it has no runtime of its own.
"""
