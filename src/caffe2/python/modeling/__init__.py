"""Caffe2's ``caffe2.python.modeling``: parameter initializers and parameter information."""
