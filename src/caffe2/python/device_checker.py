"""Caffe2's ``caffe2.python.device_checker``: an op gives the same outputs on every device.

>>> import numpy as np
>>> from caffe2.python import core, device_checker
>>> from caffe2.proto import caffe2_pb2
>>> op = core.CreateOperator("Relu", ["x"], ["y"])
>>> dc = device_checker.DeviceChecker(0.01, [caffe2_pb2.DeviceOption()])
>>> dc.CheckSimple(op, [np.array([-1.0, 2.0], np.float32)], [0])
True
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from caffe2.python import workspace

__all__ = ["DeviceChecker"]


class DeviceChecker:
    """Runs an op on each of ``device_options`` and compares the outputs with the first device's."""

    def __init__(self, threshold: float, device_options: list[Any]):
        self._threshold = threshold
        self._device_options = list(device_options)

    def _run(self, op: Any, device_option: Any, inputs: list[Any], outputs_to_check: list[int]) -> list[Any]:
        op = copy.deepcopy(op)
        op.device_option.CopyFrom(device_option)
        with workspace.WorkspaceGuard("_device_check_"):
            workspace.ResetWorkspace()
            for name, value in zip(op.input, inputs):
                workspace.FeedBlob(name, np.array(value), device_option)  # Caffe2's checker copies
            workspace.RunOperatorOnce(op)
            outs = [workspace.FetchBlob(op.output[i]) for i in outputs_to_check]
            workspace.ResetWorkspace()
        return outs

    def CheckSimple(
        self, op: Any, inputs: list[Any], outputs_to_check: list[int], input_device_options: Any = None
    ) -> bool:
        """True when every device gives the first device's outputs within the threshold."""
        results = [self._run(op, d, inputs, outputs_to_check) for d in self._device_options]
        for other in results[1:]:
            for a, b in zip(results[0], other):
                a, b = np.asarray(a), np.asarray(b)
                if a.dtype.kind in "fc":
                    if not np.allclose(a, b, atol=self._threshold, rtol=self._threshold):
                        return False
                elif not np.array_equal(a, b):
                    return False
        return True
