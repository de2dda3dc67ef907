"""Save and Load refuse what Caffe2's refused (a blob saved twice, strip_prefix with overrides,
a record in two databases), Load(load_all=1) loads every blob, and SerializeBlob round-trips."""

from __future__ import annotations

import os

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(60)


def _save(path: str, names: list[str], **kwargs) -> None:
    op = core.CreateOperator("Save", names, [], absolute_path=1, db=path, db_type="minidb", **kwargs)
    workspace.RunOperatorOnce(op)


def _feed_three() -> dict[str, np.ndarray]:
    arrays = {
        "a": np.arange(4, dtype=np.float32),
        "b": np.array([[1, 2], [3, 4]], np.int64),
        "c": np.array([True, False]),
    }
    for name, value in arrays.items():
        workspace.FeedBlob(name, value)
    return arrays


def test_save_refuses_a_blob_twice_and_overrides_with_strip_prefix(tmp_path):
    _feed_three()
    with pytest.raises(RuntimeError, match="saved twice"):
        _save(str(tmp_path / "dup"), ["a", "b", "a"])
    with pytest.raises(RuntimeError, match="mutually exclusive"):
        _save(str(tmp_path / "both"), ["a"], strip_prefix="x", blob_name_overrides=["y"])
    assert not os.path.exists(tmp_path / "dup")


def test_load_refuses_a_record_found_in_two_databases(tmp_path):
    _feed_three()
    path = str(tmp_path / "db")
    _save(path, ["a", "b"])
    load = core.CreateOperator("Load", [], ["a", "b"], absolute_path=1, dbs=[path, path], db_type="minidb")
    with pytest.raises(RuntimeError, match="more than one database"):
        workspace.RunOperatorOnce(load)


def test_load_all_loads_every_blob_of_the_databases(tmp_path):
    arrays = _feed_three()
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    _save(first, ["a", "b"])
    _save(second, ["c"])
    workspace.ResetWorkspace()
    load = core.CreateOperator("Load", [], [], absolute_path=1, dbs=[first, second], db_type="minidb", load_all=1)
    assert workspace.RunOperatorOnce(load)
    assert sorted(workspace.Blobs()) == ["a", "b", "c"]
    for name, value in arrays.items():
        got = workspace.FetchBlob(name)
        assert got.dtype == value.dtype
        np.testing.assert_array_equal(got, value)


def test_load_all_of_a_truncated_file_is_a_runtime_error(tmp_path):
    _feed_three()
    path = str(tmp_path / "db")
    _save(path, ["a", "b", "c"])
    with open(path, "rb+") as f:
        f.seek(-20, os.SEEK_END)
        f.truncate()
    load = core.CreateOperator("Load", [], [], absolute_path=1, db=path, db_type="minidb", load_all=1)
    with pytest.raises(RuntimeError):
        workspace.RunOperatorOnce(load)


def test_serialize_blob_round_trip():
    workspace.FeedBlob("t", np.array([[1.5, -2.0]], np.float32))
    data = workspace.SerializeBlob("t")
    proto = caffe2_pb2.BlobProto()
    proto.ParseFromString(data)
    assert proto.name == "t" and proto.HasField("tensor") and list(proto.tensor.dims) == [1, 2]
    workspace.DeserializeBlob("t_copy", data)
    np.testing.assert_array_equal(workspace.FetchBlob("t_copy"), workspace.FetchBlob("t"))
