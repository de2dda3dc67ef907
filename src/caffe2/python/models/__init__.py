"""Caffe2's model builders (``caffe2.python.models``): ResNet."""
