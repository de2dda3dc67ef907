"""CreateDB, TensorProtosDBInput, Save and Load against Caffe2's formats, with fixtures written
through protobuf (caffe2_pb2) and the lmdb package, as Caffe2's own tools wrote them."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import asyncnet as an
from asyncnet.ops import _tensorproto as tp
from caffe2.proto import caffe2_pb2
from caffe2.python import brew, core, model_helper, utils, workspace

pytestmark = pytest.mark.timeout(60)


def _minidb(path, records):
    with open(path, "wb") as f:
        f.writelines(struct.pack("<ii", len(k), len(v)) + k + v for k, v in records)


def _records(path):
    out, data, pos = [], open(path, "rb").read(), 0
    while pos < len(data):
        kl, vl = struct.unpack_from("<ii", data, pos)
        pos += 8
        out.append((data[pos : pos + kl], data[pos + kl : pos + kl + vl]))
        pos += kl + vl
    return out


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([1, -2], np.int64),
        np.array([[True, False]]),
        np.arange(4, dtype=np.uint8),
        np.float64(2.5) * np.ones(3),
        np.array([b"ab", b"c"], dtype=object),
        np.zeros((0, 2), np.float32),
    ],
)
def test_codec_matches_protobuf(array):
    ref = utils.NumpyArrayToCaffe2Tensor(array)
    assert tp.encode_tensor(array) == ref.SerializeToString()
    back = tp.decode_tensor(ref.SerializeToString())
    assert back.dtype == array.dtype and back.shape == array.shape and (back == array).all()


def test_codec_reads_unpacked_numbers():
    t = caffe2_pb2.TensorProto(dims=[3], data_type=caffe2_pb2.TensorProto.INT32)
    t.int32_data.extend([1, -2, 3])
    raw = bytearray(b"\x08\x03\x10\x02")  # dims, data_type
    for v in (1, -2, 3):  # field 4 unpacked (wire type 0)
        raw += b"\x20" + bytes(_varint(v & (2**64 - 1)))
    np.testing.assert_array_equal(tp.decode_tensor(bytes(raw)), [1, -2, 3])
    with pytest.raises(tp.TensorProtoError, match="truncated|past the end"):
        tp.decode_tensor(t.SerializeToString()[:-1])


def _varint(v):
    out = []
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return out


def test_save_writes_caffe2_minidb(tmp_path):
    path = str(tmp_path / "m.minidb")
    w = np.arange(5, dtype=np.float32)
    workspace.FeedBlob("w", w)
    workspace.FeedBlob("meta", "some text")
    workspace.RunOperatorOnce(
        core.CreateOperator("Save", ["w", "meta"], [], db=path, db_type="minidb", absolute_path=1, chunk_size=2)
    )
    recs = _records(path)
    assert [k for k, _ in recs] == [b"w#%0", b"w#%1", b"w#%2", b"meta"]
    chunks = [caffe2_pb2.BlobProto.FromString(v) for _, v in recs[:3]]
    assert all(c.type == "Tensor" and c.name == "w" and list(c.tensor.dims) == [5] for c in chunks)
    assert [(c.tensor.segment.begin, c.tensor.segment.end) for c in chunks] == [(0, 2), (2, 4), (4, 5)]
    assert list(chunks[1].tensor.float_data) == [2.0, 3.0]
    meta = caffe2_pb2.BlobProto.FromString(recs[3][1])
    assert meta.type == "std::string" and meta.content == b"some text"
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(
        core.CreateOperator("Load", [], ["w", "meta"], db=path, db_type="minidb", absolute_path=1)
    )
    np.testing.assert_array_equal(workspace.FetchBlob("w"), w)
    assert workspace.FetchBlob("meta") == b"some text"


def test_load_reads_what_caffe2_wrote(tmp_path):
    path = str(tmp_path / "c2.minidb")
    whole = caffe2_pb2.BlobProto(name="b", type="Tensor")
    whole.tensor.CopyFrom(utils.NumpyArrayToCaffe2Tensor(np.array([[1, 2], [3, 4]], np.int32)))
    whole.tensor.device_detail.device_type = 0
    _minidb(path, [(b"b", whole.SerializeToString())])
    workspace.RunOperatorOnce(
        core.CreateOperator("Load", [], ["renamed"], db=path, db_type="minidb", source_blob_names=["b"])
    )
    np.testing.assert_array_equal(workspace.FetchBlob("renamed"), [[1, 2], [3, 4]])
    with pytest.raises(an.AsyncNetError, match=r"\['nope'\] not found"):
        workspace.RunOperatorOnce(core.CreateOperator("Load", [], ["nope"], db=path, db_type="minidb"))
    workspace.RunOperatorOnce(core.CreateOperator("Load", [], ["nope"], db=path, db_type="minidb", allow_incomplete=1))


def test_truncated_minidb_is_a_clear_error(tmp_path):
    path = str(tmp_path / "t.minidb")
    workspace.FeedBlob("w", np.ones(10, np.float32))
    workspace.RunOperatorOnce(core.CreateOperator("Save", ["w"], [], db=path, db_type="minidb"))
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-7])
    with pytest.raises(an.AsyncNetError, match="truncated"):
        workspace.RunOperatorOnce(core.CreateOperator("Load", [], ["w"], db=path, db_type="minidb"))


def _mnist_like_lmdb(path, n=10):
    lmdb = pytest.importorskip("lmdb")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.int32)
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(n):
            protos = caffe2_pb2.TensorProtos()
            img = protos.protos.add(dims=[1, 4, 4], data_type=caffe2_pb2.TensorProto.BYTE)
            img.byte_data = images[i].tobytes()
            lab = protos.protos.add(data_type=caffe2_pb2.TensorProto.INT32)
            lab.int32_data.append(int(labels[i]))
            txn.put(f"{i:08d}".encode(), protos.SerializeToString())
    env.close()
    return images, labels


def test_db_input_reads_batches_and_wraps(tmp_path):
    images, labels = _mnist_like_lmdb(tmp_path / "db", n=10)
    m = model_helper.ModelHelper(name="dbin")
    data, label = brew.db_input(
        m, blobs_out=["data_uint8", "label"], batch_size=4, db=str(tmp_path / "db"), db_type="lmdb"
    )
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    got = []
    for _ in range(3):
        workspace.RunNet(m.net)
        d, lab = workspace.FetchBlob("data_uint8"), workspace.FetchBlob("label")
        assert d.shape == (4, 1, 4, 4) and d.dtype == np.uint8 and lab.shape == (4,) and lab.dtype == np.int32
        got.append(lab)
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate([labels, labels[:2]]))
    np.testing.assert_array_equal(workspace.FetchBlob("data_uint8")[-1], images[1])


def test_create_db_errors(tmp_path):
    with pytest.raises(an.AsyncNetError, match="no LMDB folder"):
        workspace.RunOperatorOnce(core.CreateOperator("CreateDB", [], ["r"], db=str(tmp_path / "none"), db_type="lmdb"))
    net = core.Net("bad_db_type")
    net.CreateDB([], ["r"], db="x", db_type="leveldb")
    with pytest.raises(an.NetDefinitionError, match="leveldb"):
        workspace.CreateNet(net)
