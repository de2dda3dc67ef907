"""Caffe2's protobuf messages: :mod:`caffe2.proto.caffe2_pb2`."""
