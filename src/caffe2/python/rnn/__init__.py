"""Caffe2's ``caffe2.python.rnn`` package: the helpers its recurrent-network tests import."""
