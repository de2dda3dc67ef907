"""Shadow.write_back_changed: after a run cut short whose ops did not run in op order (a parallel
run), only the blobs whose arrays the ops that ran replaced are stored, each in the library the
routed op gives it; in-place updates and unwritten blobs stay as they were."""

import numpy as np
import pytest

from asyncnet.tensor import route
from asyncnet.tensor.shadow import Shadow

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(60)


class _Op:
    def __init__(self, t, i, o):
        self.type, self.inputs, self.outputs = t, i, o


def _shadow() -> Shadow:
    route.route_operators([])  # torch is imported: routing is on
    ops = [
        _Op("Relu", ("x",), ("y",)),  # did not run
        _Op("Relu", ("z",), ("z2",)),  # ran: a new array
        _Op("Iter", ("it",), ("it",)),  # ran: in place, numpy
        _Op("Flatten", ("w",), ("h",)),  # ran: returned its input's array
        _Op("Relu", ("y",), ("x",)),  # did not run (it would replace an external input)
        _Op("Relu", ("it",), ("n",)),  # ran: numpy inputs give numpy
    ]
    return Shadow(ops, ["x", "z", "it", "w"])


def test_only_the_blobs_the_ops_that_ran_replaced_are_stored():
    s = _shadow()
    blobs = {"x": torch.ones(2), "z": torch.full((2,), -1.0), "it": np.zeros(1, np.int64), "w": torch.ones(2, 1)}
    fed = dict(blobs)
    arrays, kinds, back = s.views(blobs)
    before = dict(arrays)
    arrays["z2"] = np.maximum(arrays["z"], 0)
    arrays["it"] += 1
    arrays["h"] = arrays["w"]
    arrays["n"] = arrays["it"] * 2
    s.write_back_changed(blobs, arrays, kinds, back, before)
    assert sorted(blobs) == ["h", "it", "n", "w", "x", "z", "z2"]
    assert blobs["x"] is fed["x"] and blobs["z"] is fed["z"] and blobs["w"] is fed["w"]
    assert blobs["it"] is fed["it"] and blobs["it"].tolist() == [1]
    assert blobs["h"] is fed["w"]  # the input's own tensor, as the routed op gives it
    assert type(blobs["z2"]) is torch.Tensor and blobs["z2"].tolist() == [0.0, 0.0]
    assert np.shares_memory(blobs["z2"].numpy(), arrays["z2"])
    assert type(blobs["n"]) is np.ndarray and blobs["n"].tolist() == [2]


def test_a_read_only_or_reversed_result_becomes_a_tensor_over_a_copy():
    s = _shadow()
    blobs = {"x": torch.ones(2), "z": torch.ones(3), "it": np.zeros(1, np.int64), "w": torch.ones(2, 1)}
    arrays, kinds, back = s.views(blobs)
    before = dict(arrays)
    ro = np.arange(3.0, dtype=np.float32)
    ro.flags.writeable = False
    arrays["z2"] = ro
    arrays["h"] = np.arange(4.0, dtype=np.float32)[::-2]
    s.write_back_changed(blobs, arrays, kinds, back, before)
    assert blobs["z2"].tolist() == [0.0, 1.0, 2.0] and not np.shares_memory(blobs["z2"].numpy(), ro)
    assert blobs["h"].tolist() == [3.0, 1.0]
