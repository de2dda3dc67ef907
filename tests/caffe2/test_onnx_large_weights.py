"""Weights through .pb pairs in bulk: the fast paths (packed floats, one type pass) give the same
messages and the same refusals as value-by-value conversion."""

import numpy as np
import pytest

import asyncnet as an
from caffe2.convert import extend_floats, to_asyncnet, value_to_arg
from caffe2.proto import caffe2_pb2
from caffe2.python.onnx.backend import Caffe2Backend

onnx = pytest.importorskip("onnx")

pytestmark = pytest.mark.timeout(120)


def test_packed_floats_serialize_like_value_by_value():
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    fast, slow = caffe2_pb2.Argument(name="values"), caffe2_pb2.Argument(name="values")
    extend_floats(fast, values)
    slow.floats.extend(values.tolist())
    assert fast.SerializeToString() == slow.SerializeToString()
    assert value_to_arg("values", values.tolist()).SerializeToString() == slow.SerializeToString()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.bool_])
def test_fill_ops_of_onnx_tensors_rebuild_the_tensor(dtype):
    a = (np.random.default_rng(1).standard_normal((30, 7)) * 50).astype(dtype)
    op = Caffe2Backend._create_tensor_filling_op(onnx.numpy_helper.from_array(a, "w"))
    ws = an.Workspace()
    ws.run_net_once(to_asyncnet(caffe2_pb2.NetDef(name="init", op=[op])))
    want = a.astype(np.float32) if dtype == np.float64 else a  # Caffe2's Argument.floats are float32
    np.testing.assert_array_equal(ws.fetch("w"), want)


def _given(op_type, values, shape):
    return an.core.defs.OperatorDef(op_type, [], ["y"], {"values": values, "shape": shape})


@pytest.mark.parametrize(
    "op_type,values,message",
    [
        ("GivenTensorFill", [1.0, True], "got True"),
        ("GivenTensorFill", [1.0, "a"], "got 'a'"),
        ("GivenTensorIntFill", [1, 2**40], "do not fit int32"),
        ("GivenTensorInt16Fill", [-(2**15) - 1, 0], "do not fit int16"),
        ("GivenTensorBoolFill", [0, 2], "bool values"),
    ],
)
def test_bad_values_are_still_refused_with_the_culprit(op_type, values, message):
    net = an.core.defs.NetDef("bad", ops=[_given(op_type, values, [2])])
    with pytest.raises(an.errors.NetDefinitionError, match=message):
        an.Workspace().create_net(net)


def test_numpy_scalars_in_values_are_accepted():
    net = an.core.defs.NetDef("np_scalars", ops=[_given("GivenTensorFill", [np.float64(0.5), 1.0, 2], [3])])
    ws = an.Workspace()
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("y"), np.array([0.5, 1.0, 2.0], np.float32))


def _varints_one_by_one(values):
    out = bytearray()
    for v in values:
        v = int(v) & (1 << 64) - 1
        while True:
            out.append((v & 0x7F) | (0x80 if v >> 7 else 0))
            v >>= 7
            if not v:
                break
    return bytes(out)


def test_packed_varints_in_bulk_match_the_wire_format():
    from asyncnet.ops._tensorproto import _packed_varints

    rng = np.random.default_rng(8)
    edges = [0, 1, 127, 128, 16383, 16384, 2**31 - 1, -(2**31), -1, 2**63 - 1, -(2**63)]
    values = np.concatenate(
        [np.array(edges, np.int64), rng.integers(-(2**40), 2**40, 500), rng.integers(0, 70000, 500)]
    )
    assert _packed_varints(values) == _varints_one_by_one(values.tolist())
    assert _packed_varints(np.array([], np.int64)) == b""


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64, np.uint8, np.bool_, np.int16])
def test_tensor_protos_of_int_field_types_round_trip(dtype):
    from asyncnet.ops import _tensorproto as tp

    rng = np.random.default_rng(9)
    a = (rng.standard_normal((7, 9)) * 1000).astype(dtype)
    if dtype == np.float16:
        a.ravel()[:4] = [np.inf, -0.0, 6e-8, -65504]
    back = tp.decode_tensor_protos(tp.encode_tensor_protos([a]))[0]
    assert back.dtype == a.dtype and back.shape == a.shape
    np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))
