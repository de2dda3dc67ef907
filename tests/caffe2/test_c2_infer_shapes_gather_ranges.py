"""workspace.InferShapesAndTypes on ops whose output sizes depend on their input values."""

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(120)


def test_gather_ranges_infers_the_upper_bound_not_the_zero_run() -> None:
    net = core.Net("infer_gather_ranges")
    net.ConstantFill([], "ranges", shape=[4, 3, 2], dtype=core.DataType.INT64)
    net.ConstantFill([], "values", shape=[10], dtype=core.DataType.FLOAT)
    net.GatherRanges(["values", "ranges"], ["out", "lengths"])
    shapes, types = workspace.InferShapesAndTypes([net], {})
    assert shapes["out"] == [10] and types["out"] == caffe2_pb2.TensorProto.FLOAT
    assert shapes["lengths"] == [4] and types["lengths"] == caffe2_pb2.TensorProto.INT32


def test_inferred_shapes_bound_what_the_op_really_makes() -> None:
    workspace.FeedBlob("values", np.arange(10, dtype=np.int64))
    workspace.FeedBlob("ranges", np.array([[[0, 2], [5, 5]], [[2, 1], [9, 1]]], dtype=np.int32))
    net = core.Net("run_gather_ranges")
    net.GatherRanges(["values", "ranges"], ["out", "lengths"])
    workspace.RunNetOnce(net)
    out, lengths = workspace.FetchBlob("out"), workspace.FetchBlob("lengths")
    shapes, types = workspace.InferShapesAndTypes(
        [net],
        {"values": [10], "ranges": [2, 2, 2]},
        blob_types={"values": caffe2_pb2.TensorProto.INT64, "ranges": caffe2_pb2.TensorProto.INT32},
    )
    assert out.size <= shapes["out"][0] and list(lengths.shape) == shapes["lengths"]
    assert types["out"] == caffe2_pb2.TensorProto.INT64 and lengths.dtype == np.int32


def test_ops_without_a_shape_function_still_run_on_zeros() -> None:
    net = core.Net("infer_fc")
    net.FC(["x", "w", "b"], "y")
    shapes, _ = workspace.InferShapesAndTypes([net], {"x": [2, 3], "w": [5, 3], "b": [5]})
    assert shapes["y"] == [2, 5]
