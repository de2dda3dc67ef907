"""Tests derived from Caffe2's own test cases (caffe2/python/operator_test, plan and control tests).

The gradient helpers of tests/autodiff are shared: that folder is put on the import path here.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "autodiff"))
