"""Caffe2's ``caffe2.python.mkl_test_util``: device strategies for tests of the MKL engine.

asyncnet has no MKL device, so the "MKL" devices are the CPU only::

    >>> from caffe2.python import mkl_test_util as mu
    >>> [d.device_type for d in mu.device_options]
    [0]
"""

from __future__ import annotations

import hypothesis.strategies as st

from caffe2.python import hypothesis_test_util as hu

__all__ = ["device_options", "gcs", "gcs_cpu_mkl", "gcs_mkl_only"]

device_options = [hu.cpu_do]
gcs = dict(gc=st.sampled_from(device_options), dc=st.just(device_options))
gcs_cpu_mkl = gcs
gcs_mkl_only = gcs
