"""caffe2_pb2 against Caffe2's wire format, the NetDef conversion both ways, and .pb/.pbtxt files
read by ``asyncnet run`` / ``asyncnet graph``, bad files included.

Field numbers are checked against bytes written out by hand from caffe2.proto (a key byte is
``field_number << 3 | wire_type``), not against the descriptor this package builds.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("google.protobuf")

import asyncnet as an
from asyncnet.cli.main import main
from caffe2.convert import (
    from_asyncnet,
    load_net_file,
    read_netdef,
    to_asyncnet,
    write_netdef,
)
from caffe2.proto import caffe2_pb2

pytestmark = pytest.mark.timeout(60)

# (message, field, number) for every field the conversion reads or writes, from caffe2.proto.
CAFFE2_FIELDS = [
    ("NetDef", "name", 1),
    ("NetDef", "op", 2),
    ("NetDef", "type", 3),
    ("NetDef", "num_workers", 4),
    ("NetDef", "device_option", 5),
    ("NetDef", "arg", 6),
    ("NetDef", "external_input", 7),
    ("NetDef", "external_output", 8),
    ("NetDef", "partition_info", 9),
    ("OperatorDef", "input", 1),
    ("OperatorDef", "output", 2),
    ("OperatorDef", "name", 3),
    ("OperatorDef", "type", 4),
    ("OperatorDef", "arg", 5),
    ("OperatorDef", "device_option", 6),
    ("OperatorDef", "engine", 7),
    ("OperatorDef", "control_input", 8),
    ("OperatorDef", "is_gradient_op", 9),
    ("OperatorDef", "debug_info", 10),
    ("OperatorDef", "domain", 11),
    ("OperatorDef", "op_version", 12),
    ("Argument", "name", 1),
    ("Argument", "f", 2),
    ("Argument", "i", 3),
    ("Argument", "s", 4),
    ("Argument", "floats", 5),
    ("Argument", "ints", 6),
    ("Argument", "strings", 7),
    ("Argument", "n", 8),
    ("Argument", "nets", 9),
    ("Argument", "t", 10),
    ("Argument", "tensors", 11),
    ("Argument", "qtensors", 12),
    ("DeviceOption", "device_type", 1),
    ("DeviceOption", "device_id", 2),
    ("DeviceOption", "random_seed", 3),
    ("DeviceOption", "node_name", 4),
    ("DeviceOption", "numa_node_id", 5),
    ("DeviceOption", "extra_info", 6),
    ("TensorProto", "dims", 1),
    ("TensorProto", "data_type", 2),
    ("TensorProto", "float_data", 3),
    ("TensorProto", "int32_data", 4),
    ("TensorProto", "byte_data", 5),
    ("TensorProto", "string_data", 6),
    ("TensorProto", "name", 7),
    ("TensorProto", "device_detail", 8),
    ("TensorProto", "double_data", 9),
    ("TensorProto", "int64_data", 10),
    ("TensorProto", "segment", 11),
    ("TensorProto", "storage_type", 12),
    ("TensorProto", "raw_data", 13),
    ("TensorProto", "external_data", 14),
    ("TensorProto", "data_format", 15),
    ("TensorProtos", "protos", 1),
    ("ExecutionStep", "name", 1),
    ("ExecutionStep", "substep", 2),
    ("ExecutionStep", "network", 3),
    ("ExecutionStep", "num_iter", 4),
    ("ExecutionStep", "concurrent_substeps", 6),
    ("ExecutionStep", "should_stop_blob", 9),
    ("ExecutionStep", "only_once", 10),
    ("ExecutionStep", "run_every_ms", 11),
    ("PlanDef", "name", 1),
    ("PlanDef", "network", 2),
    ("PlanDef", "execution_step", 3),
    ("BlobProto", "name", 1),
    ("BlobProto", "type", 2),
    ("BlobProto", "tensor", 3),
    ("BlobProto", "content", 4),
    ("DBReaderProto", "name", 1),
    ("DBReaderProto", "source", 2),
    ("DBReaderProto", "db_type", 3),
    ("DBReaderProto", "key", 4),
]


@pytest.mark.parametrize("message,field,number", CAFFE2_FIELDS)
def test_field_numbers_are_caffe2s(message, field, number):
    assert getattr(caffe2_pb2, message).DESCRIPTOR.fields_by_name[field].number == number


def test_data_type_enum_is_caffe2s():
    assert dict(caffe2_pb2.TensorProto.DataType.items()) == {
        "UNDEFINED": 0,
        "FLOAT": 1,
        "INT32": 2,
        "BYTE": 3,
        "STRING": 4,
        "BOOL": 5,
        "UINT8": 6,
        "INT8": 7,
        "UINT16": 8,
        "INT16": 9,
        "INT64": 10,
        "FLOAT16": 12,
        "DOUBLE": 13,
        "ZERO_COLLISION_HASH": 14,
        "REBATCHING_BUFFER": 15,
    }
    assert caffe2_pb2.TensorProto().data_type == caffe2_pb2.TensorProto.FLOAT  # Caffe2's default


def test_wire_bytes_written_by_hand():
    net = caffe2_pb2.NetDef(name="n", external_input=["x"])
    op = net.op.add(input=["x"], output=["y"], type="Scale")
    op.arg.add(name="scale", f=1.5)
    op.arg.add(name="k", i=300)
    arg = b"\x0a\x05scale" + b"\x15" + struct.pack("<f", 1.5)
    arg2 = b"\x0a\x01k" + b"\x18\xac\x02"  # 300 as a varint
    body = (
        b"\x0a\x01x"
        + b"\x12\x01y"
        + b"\x22\x05Scale"
        + b"\x2a"
        + bytes([len(arg)])
        + arg
        + b"\x2a"
        + bytes([len(arg2)])
        + arg2
    )
    expected = b"\x0a\x01n" + b"\x12" + bytes([len(body)]) + body + b"\x3a\x01x"
    assert net.SerializeToString() == expected
    t = caffe2_pb2.TensorProto(dims=[2], data_type=caffe2_pb2.TensorProto.INT32, int32_data=[1, 2])
    assert t.SerializeToString() == b"\x08\x02" + b"\x10\x02" + b"\x22\x02\x01\x02"  # int32_data packed


def _caffe2_style_net():
    """A net as Caffe2's core.Net/CreateOperator writes it: device options with type and id set."""
    net = caffe2_pb2.NetDef(
        name="train",
        type="async_scheduling",
        num_workers=2,
        external_input=["data", "w", "b"],
        external_output=["loss"],
    )
    net.device_option.CopyFrom(caffe2_pb2.DeviceOption(device_type=0, device_id=0))
    fc = net.op.add(input=["data", "w", "b"], output=["fc"], name="fc1", type="FC")
    fc.arg.add(name="axis", i=1)
    fc.engine = "CUDNN"
    relu = net.op.add(input=["fc"], output=["fc"], type="Relu")
    relu.device_option.CopyFrom(caffe2_pb2.DeviceOption(device_type=0, device_id=0, random_seed=7))
    relu.control_input.append("w")
    fill = net.op.add(output=["z"], type="ConstantFill")
    fill.arg.add(name="shape", ints=[2, 3])
    fill.arg.add(name="value", f=0.25)
    t = net.op.add(input=["fc"], output=["t"], type="Transpose")
    t.arg.add(name="axes", ints=[1, 0])
    r = net.op.add(input=["t"], output=["s"], type="ReduceSum")
    r.arg.add(name="axes", ints=[])
    r.arg.add(name="keepdims", i=0)
    return net


def test_round_trip_gives_the_same_bytes():
    pb = _caffe2_style_net()
    nd = to_asyncnet(pb)
    assert nd.type == "async_scheduling" and nd.num_workers == 2
    assert nd.ops[0].args == {"axis": 1, "engine": "CUDNN"}
    assert nd.ops[1].device_option == an.DeviceOption("cpu", 0, random_seed=7)
    assert nd.ops[1].control_inputs == ["w"]
    assert nd.ops[2].args == {"shape": [2, 3], "value": 0.25}
    assert nd.ops[4].args["axes"] == []
    assert from_asyncnet(nd).SerializeToString() == pb.SerializeToString()


def test_asyncnet_net_survives_the_proto():
    net = an.Net("mlp", type="dag", num_workers=3, device_option=an.DeviceOption("cpu"))
    h = net.FC(["x", "w", "b"], "h", axis=1)
    net.Relu(h, "y")
    net.Cast("y", "yi", to=2)
    net.add_external_inputs("x", "w", "b")
    net.add_external_outputs("y")
    nd = net.to_def()
    back = to_asyncnet(caffe2_pb2.NetDef.FromString(from_asyncnet(nd).SerializeToString()))
    assert back.to_dict() == nd.to_dict()


def _mlp_pb(tmp_path):
    net = caffe2_pb2.NetDef(name="mlp", external_input=["x", "w"], external_output=["y"])
    op = net.op.add(input=["x", "w"], output=["h"], type="MatMul")
    op.arg.add(name="trans_b", i=1)
    net.op.add(input=["h"], output=["y"], type="Relu")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    return net, np.maximum(x @ w.T, 0)


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt"])
def test_cli_runs_caffe2_files(tmp_path, capsys, suffix):
    pb, expected = _mlp_pb(tmp_path)
    path = tmp_path / f"mlp{suffix}"
    write_netdef(pb, path)
    out = tmp_path / "out.npz"
    assert (
        main(
            [
                "run",
                str(path),
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--feed",
                f"w={tmp_path / 'w.npy'}",
                "--fetch",
                "y",
                "--save",
                str(out),
            ]
        )
        == 0
    )
    np.testing.assert_allclose(np.load(out)["y"], expected, rtol=1e-12)
    assert read_netdef(path) == pb


def test_cli_graph_reads_pb(tmp_path, capsys):
    pb, _ = _mlp_pb(tmp_path)
    write_netdef(pb, tmp_path / "mlp.pb")
    assert main(["graph", str(tmp_path / "mlp.pb"), "-o", str(tmp_path / "g.dot")]) == 0
    assert "2 ops" in capsys.readouterr().out


def _one_line_error(capsys, argv):
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_truncated_pb_is_one_error_naming_the_file(tmp_path, capsys):
    pb, _ = _mlp_pb(tmp_path)
    data = pb.SerializeToString()
    path = tmp_path / "cut.pb"
    path.write_bytes(data[: len(data) // 2])
    err = _one_line_error(capsys, ["run", str(path)])
    assert str(path) in err and "truncated" in err


def test_unknown_op_type_names_file_and_op(tmp_path, capsys):
    pb = caffe2_pb2.NetDef(name="n")
    pb.op.add(input=["x"], output=["y"], type="Relu")
    pb.op.add(input=["y"], output=["z"], type="NoSuchOpAnywhere")
    path = tmp_path / "bad.pb"
    write_netdef(pb, path)
    err = _one_line_error(capsys, ["run", str(path)])
    assert str(path) in err and "ops[1].type" in err and "NoSuchOpAnywhere" in err


def test_net_valued_argument_names_op_and_field(tmp_path, capsys):
    pb = caffe2_pb2.NetDef(name="n")
    op = pb.op.add(input=["c"], output=["y"], type="If", name="branch")
    op.arg.add(name="body_net").n.CopyFrom(caffe2_pb2.NetDef(name="inner"))
    path = tmp_path / "ctl.pbtxt"
    write_netdef(pb, path)
    err = _one_line_error(capsys, ["run", str(path)])
    assert str(path) in err and "ops[0] (If 'branch').arg[0] 'body_net'" in err and "'n'" in err


def test_unsupported_device_and_unknown_field(tmp_path):
    pb = caffe2_pb2.NetDef(name="n")
    pb.op.add(input=["x"], output=["y"], type="Relu").device_option.device_type = caffe2_pb2.PROTO_IDEEP
    with pytest.raises(an.NetDefinitionError, match=r"ops\[0\] \(Relu\)\.device_option\.device_type.*PROTO_IDEEP"):
        to_asyncnet(pb)
    path = tmp_path / "extra.pb"
    path.write_bytes(caffe2_pb2.NetDef(name="n").SerializeToString() + b"\xa0\x06\x01")  # field 100, varint
    with pytest.raises(an.NetDefinitionError, match=r"extra\.pb.*unknown protobuf field.*net#100"):
        read_netdef(path)


def test_bad_pbtxt_and_a_load_that_creates_nothing(tmp_path):
    path = tmp_path / "bad.pbtxt"
    path.write_text('name: "n"\nop { type: "Relu" input: "x" output: "y" bogus: 3 }\n')
    with pytest.raises(an.NetDefinitionError, match=r"bad\.pbtxt.*bogus"):
        load_net_file(path)
    pb = caffe2_pb2.NetDef(name="half")
    pb.op.add(input=["x"], output=["y"], type="Relu")
    pb.op.add(input=["y"], output=["z"], type="Cast").arg.add(name="to", s=b"not-a-type")
    write_netdef(pb, tmp_path / "half.pb")
    with pytest.raises(an.NetDefinitionError, match=r"half\.pb.*ops\[1\].*to"):
        load_net_file(tmp_path / "half.pb")


def test_unknown_arguments_are_dropped_with_a_warning(tmp_path, caplog):
    pb = caffe2_pb2.NetDef(name="lenient")
    op = pb.op.add(input=["x"], output=["y"], type="Relu")
    op.arg.add(name="use_cudnn", i=1)
    op.arg.add(name="cudnn_exhaustive_search", i=0)
    write_netdef(pb, tmp_path / "l.pb")
    with caplog.at_level("WARNING", logger="caffe2"):
        nd = load_net_file(tmp_path / "l.pb")
    assert nd.ops[0].args == {}
    assert "use_cudnn" in caplog.text
    with pytest.raises(an.NetDefinitionError, match="unknown argument 'use_cudnn'"):
        an.Workspace().run_net_once(to_asyncnet(pb))  # asyncnet's own API keeps refusing it
