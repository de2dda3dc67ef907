"""Caffe2's protobuf messages (``caffe2/proto/caffe2.proto``), built at import time.

The schema is written here as Python data: a ``FileDescriptorProto`` made with
``google.protobuf.descriptor_pb2`` and added to a private descriptor pool, so nothing is
compiled at install and no generated code is committed. Message names, field names, field
numbers, labels, defaults and packing are Caffe2's, taken from the last ``caffe2.proto`` that
PyTorch shipped, so files Caffe2 wrote parse here and files written here parse in Caffe2::

    >>> from caffe2.proto import caffe2_pb2
    >>> net = caffe2_pb2.NetDef(name="n")
    >>> op = net.op.add(type="Relu", input=["x"], output=["y"])
    >>> caffe2_pb2.NetDef.FromString(net.SerializeToString()) == net
    True
    >>> caffe2_pb2.TensorProto.DOUBLE, caffe2_pb2.CPU, caffe2_pb2.CUDA
    (13, 0, 1)
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FDP = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "double": _FDP.TYPE_DOUBLE,
    "float": _FDP.TYPE_FLOAT,
    "int64": _FDP.TYPE_INT64,
    "uint64": _FDP.TYPE_UINT64,
    "int32": _FDP.TYPE_INT32,
    "bool": _FDP.TYPE_BOOL,
    "string": _FDP.TYPE_STRING,
    "bytes": _FDP.TYPE_BYTES,
    "uint32": _FDP.TYPE_UINT32,
}
_LABELS = {"optional": _FDP.LABEL_OPTIONAL, "repeated": _FDP.LABEL_REPEATED, "required": _FDP.LABEL_REQUIRED}

# (label, type, name, number, options): a scalar type is a key of _TYPES; ".caffe2.X" names a message
# or an enum (listed in _ENUM_TYPES); options: default=..., packed=True, deprecated=True.
_ENUM_TYPES = {
    ".caffe2.TensorProto.DataType",
    ".caffe2.TensorProto.StorageType",
    ".caffe2.ExternalDataProto.SourceType",
    ".caffe2.TensorBoundShape.DimType",
}

_ENUMS: dict[str, list[tuple[str, int]]] = {
    "ExternalDataProto.SourceType": [("INLINE_CONTAINER", 0), ("SIMPLE_FILE", 1)],
    "TensorProto.DataType": [
        ("UNDEFINED", 0),
        ("FLOAT", 1),
        ("INT32", 2),
        ("BYTE", 3),
        ("STRING", 4),
        ("BOOL", 5),
        ("UINT8", 6),
        ("INT8", 7),
        ("UINT16", 8),
        ("INT16", 9),
        ("INT64", 10),
        ("FLOAT16", 12),
        ("DOUBLE", 13),
        ("ZERO_COLLISION_HASH", 14),
        ("REBATCHING_BUFFER", 15),
    ],
    "TensorProto.SerializationFormat": [("FMT_PROTOBUF", 0), ("FMT_BFLOAT16", 1)],
    "TensorProto.StorageType": [("TYPED", 1), ("RAW", 2), ("EXTERNAL", 3), ("NO_CONTENT", 4)],
    "TensorBoundShape.DimType": [
        ("UNKNOWN", 0),
        ("CONSTANT", 1),
        ("BATCH", 2),
        ("BATCH_OF_FEATURE_MAX", 3),
        ("BATCH_OF_FEATURE_MAX_DEFAULT", 4),
        ("FEATURE_MAX", 5),
        ("FEATURE_MAX_DEFAULT", 6),
    ],
    "DeviceTypeProto": [
        ("PROTO_CPU", 0),
        ("PROTO_CUDA", 1),
        ("PROTO_MKLDNN", 2),
        ("PROTO_OPENGL", 3),
        ("PROTO_OPENCL", 4),
        ("PROTO_IDEEP", 5),
        ("PROTO_HIP", 6),
        ("PROTO_FPGA", 7),
        ("PROTO_MSNPU", 8),
        ("PROTO_XLA", 9),
        ("PROTO_HABANA", 10),
        ("PROTO_COMPILE_TIME_MAX_DEVICE_TYPES", 11),
        ("PROTO_ONLY_FOR_TEST", 20901),
    ],
}

_MESSAGES: list[tuple[str, list[tuple[Any, ...]]]] = [
    (
        "ExternalDataProto",
        [
            ("optional", ".caffe2.ExternalDataProto.SourceType", "source_type", 1, {"default": "INLINE_CONTAINER"}),
            ("optional", "string", "record_id", 2, {}),
            ("optional", "uint64", "record_size", 5, {}),
            ("optional", "int64", "offset", 3, {"default": "0"}),
            ("repeated", "int64", "strides", 4, {}),
        ],
    ),
    (
        "TensorProto",
        [
            ("repeated", "int64", "dims", 1, {}),
            ("optional", ".caffe2.TensorProto.DataType", "data_type", 2, {"default": "FLOAT"}),
            ("optional", "uint32", "data_format", 15, {"default": "0"}),
            ("optional", ".caffe2.TensorProto.StorageType", "storage_type", 12, {"default": "TYPED"}),
            ("repeated", "float", "float_data", 3, {"packed": True}),
            ("repeated", "int32", "int32_data", 4, {"packed": True}),
            ("optional", "bytes", "byte_data", 5, {}),
            ("repeated", "bytes", "string_data", 6, {}),
            ("repeated", "double", "double_data", 9, {"packed": True}),
            ("repeated", "int64", "int64_data", 10, {"packed": True}),
            ("optional", "bytes", "raw_data", 13, {}),
            ("optional", ".caffe2.ExternalDataProto", "external_data", 14, {}),
            ("optional", "string", "name", 7, {}),
            ("optional", ".caffe2.DeviceOption", "device_detail", 8, {}),
            ("optional", ".caffe2.TensorProto.Segment", "segment", 11, {}),
        ],
    ),
    ("TensorProto.Segment", [("required", "int64", "begin", 1, {}), ("required", "int64", "end", 2, {})]),
    (
        "QTensorProto",
        [
            ("repeated", "int64", "dims", 1, {}),
            ("required", "int32", "precision", 2, {}),
            ("required", "double", "scale", 3, {}),
            ("required", "double", "bias", 4, {}),
            ("required", "bool", "is_signed", 5, {}),
            ("repeated", "int32", "data", 6, {"packed": True}),
            ("optional", "string", "name", 7, {}),
            ("optional", ".caffe2.TensorProto.DataType", "data_type", 8, {"default": "INT32"}),
            ("repeated", "double", "scales", 9, {}),
            ("repeated", "double", "biases", 10, {}),
            ("optional", "int32", "axis", 11, {}),
            ("optional", "bool", "is_multiparam", 12, {"default": "false"}),
        ],
    ),
    ("TensorProtos", [("repeated", ".caffe2.TensorProto", "protos", 1, {})]),
    (
        "TensorShape",
        [
            ("repeated", "int64", "dims", 1, {}),
            ("optional", ".caffe2.TensorProto.DataType", "data_type", 2, {"default": "FLOAT"}),
            ("repeated", "int32", "unknown_dims", 3, {}),
            ("optional", "bool", "unknown_shape", 4, {"default": "false"}),
            ("optional", "string", "name", 5, {}),
        ],
    ),
    ("TensorShapes", [("repeated", ".caffe2.TensorShape", "shapes", 1, {})]),
    (
        "TensorBoundShape",
        [
            ("optional", ".caffe2.TensorShape", "shape", 1, {}),
            ("repeated", ".caffe2.TensorBoundShape.DimType", "dim_type", 2, {}),
            ("optional", "string", "name", 3, {}),
        ],
    ),
    (
        "TensorBoundShapes",
        [
            ("repeated", ".caffe2.TensorBoundShape", "shapes", 1, {}),
            ("optional", "int64", "max_batch_size", 2, {}),
            ("optional", "int64", "max_feature_len", 3, {}),
        ],
    ),
    (
        "Argument",
        [
            ("optional", "string", "name", 1, {}),
            ("optional", "float", "f", 2, {}),
            ("optional", "int64", "i", 3, {}),
            ("optional", "bytes", "s", 4, {}),
            ("optional", ".caffe2.TensorProto", "t", 10, {}),
            ("optional", ".caffe2.NetDef", "n", 8, {}),
            ("repeated", "float", "floats", 5, {}),
            ("repeated", "int64", "ints", 6, {}),
            ("repeated", "bytes", "strings", 7, {}),
            ("repeated", ".caffe2.TensorProto", "tensors", 11, {}),
            ("repeated", ".caffe2.NetDef", "nets", 9, {}),
            ("repeated", ".caffe2.QTensorProto", "qtensors", 12, {}),
        ],
    ),
    (
        "DeviceOption",
        [
            ("optional", "int32", "device_type", 1, {"default": "0"}),
            ("optional", "int32", "device_id", 2, {}),
            ("optional", "uint32", "random_seed", 3, {}),
            ("optional", "string", "node_name", 4, {}),
            ("optional", "int32", "numa_node_id", 5, {}),
            ("repeated", "string", "extra_info", 6, {}),
            # Caffe2 2018 named field 2 cuda_gpu_id; kept as a field of its own that the converter
            # reads when device_id is unset (caffe2.convert.device_id_of).
            ("optional", "int32", "cuda_gpu_id", 1002, {"deprecated": True}),
        ],
    ),
    (
        "OperatorDef",
        [
            ("repeated", "string", "input", 1, {}),
            ("repeated", "string", "output", 2, {}),
            ("optional", "string", "name", 3, {}),
            ("optional", "string", "type", 4, {}),
            ("repeated", ".caffe2.Argument", "arg", 5, {}),
            ("optional", ".caffe2.DeviceOption", "device_option", 6, {}),
            ("optional", "string", "engine", 7, {}),
            ("repeated", "string", "control_input", 8, {}),
            ("optional", "bool", "is_gradient_op", 9, {"default": "false"}),
            ("optional", "string", "debug_info", 10, {}),
            ("optional", "string", "domain", 11, {}),
            ("optional", "int64", "op_version", 12, {}),
        ],
    ),
    ("MapFieldEntry", [("required", "string", "key", 1, {}), ("required", "string", "val", 2, {})]),
    (
        "BackendOptions",
        [("required", "string", "backend_name", 1, {}), ("repeated", ".caffe2.MapFieldEntry", "option", 2, {})],
    ),
    (
        "PartitionInfo",
        [
            ("required", "string", "name", 1, {}),
            ("repeated", "int32", "device_id", 2, {}),
            ("optional", "string", "extra_info", 3, {}),
            ("repeated", ".caffe2.BackendOptions", "backend_options", 4, {}),
        ],
    ),
    (
        "NetDef",
        [
            ("optional", "string", "name", 1, {}),
            ("repeated", ".caffe2.OperatorDef", "op", 2, {}),
            ("optional", "string", "type", 3, {}),
            ("optional", "int32", "num_workers", 4, {}),
            ("optional", ".caffe2.DeviceOption", "device_option", 5, {}),
            ("repeated", ".caffe2.Argument", "arg", 6, {}),
            ("repeated", "string", "external_input", 7, {}),
            ("repeated", "string", "external_output", 8, {}),
            ("repeated", ".caffe2.PartitionInfo", "partition_info", 9, {}),
        ],
    ),
    (
        "ExecutionStep",
        [
            ("optional", "string", "name", 1, {}),
            ("repeated", ".caffe2.ExecutionStep", "substep", 2, {}),
            ("repeated", "string", "network", 3, {}),
            ("optional", "int64", "num_iter", 4, {}),
            ("optional", "string", "criteria_network", 5, {"deprecated": True}),
            ("optional", "string", "report_net", 7, {}),
            ("optional", "int32", "report_interval", 8, {}),
            ("optional", "int64", "run_every_ms", 11, {}),
            ("optional", "bool", "concurrent_substeps", 6, {}),
            ("optional", "string", "should_stop_blob", 9, {}),
            ("optional", "bool", "only_once", 10, {}),
            ("optional", "bool", "create_workspace", 12, {}),
            ("optional", "int32", "num_concurrent_instances", 13, {}),
        ],
    ),
    (
        "PlanDef",
        [
            ("optional", "string", "name", 1, {}),
            ("repeated", ".caffe2.NetDef", "network", 2, {}),
            ("repeated", ".caffe2.ExecutionStep", "execution_step", 3, {}),
        ],
    ),
    (
        "BlobProto",
        [
            ("optional", "string", "name", 1, {}),
            ("optional", "string", "type", 2, {}),
            ("optional", ".caffe2.TensorProto", "tensor", 3, {}),
            ("optional", "bytes", "content", 4, {}),
            ("optional", ".caffe2.QTensorProto", "qtensor", 5, {}),
            ("optional", "int32", "content_num_chunks", 6, {}),
            ("optional", "int32", "content_chunk_id", 7, {}),
        ],
    ),
    (
        "DBReaderProto",
        [
            ("optional", "string", "name", 1, {}),
            ("optional", "string", "source", 2, {}),
            ("optional", "string", "db_type", 3, {}),
            ("optional", "string", "key", 4, {}),
        ],
    ),
]


def _field(msg: descriptor_pb2.DescriptorProto, spec: tuple[Any, ...]) -> None:
    label, typ, name, number, opts = spec
    f = msg.field.add(name=name, number=number, label=_LABELS[label])
    if typ in _TYPES:
        f.type = _TYPES[typ]
    else:
        f.type = _FDP.TYPE_ENUM if typ in _ENUM_TYPES else _FDP.TYPE_MESSAGE
        f.type_name = typ
    if "default" in opts:
        f.default_value = opts["default"]
    if opts.get("packed"):
        f.options.packed = True
    if opts.get("deprecated"):
        f.options.deprecated = True


def _file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="caffe2/proto/caffe2.proto", package="caffe2", syntax="proto2")
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full, fields in _MESSAGES:
        outer, _, inner = full.partition(".")
        msg = messages[outer].nested_type.add(name=inner) if inner else fdp.message_type.add(name=outer)
        messages[full] = msg
        for spec in fields:
            _field(msg, spec)
    for full, values in _ENUMS.items():
        outer, _, inner = full.partition(".")
        enum = messages[outer].enum_type.add(name=inner) if inner else fdp.enum_type.add(name=outer)
        for vname, number in values:
            enum.value.add(name=vname, number=number)
    return fdp


_POOL = descriptor_pool.DescriptorPool()
DESCRIPTOR = _POOL.Add(_file())


def add_proto_file(
    path: str, messages: list[tuple[str, list[tuple[Any, ...]]]], dependency: tuple[str, ...] = ()
) -> tuple[Any, dict[str, Any]]:
    """Add another ``.proto`` of package ``caffe2`` (top-level messages only, fields as in
    :data:`_MESSAGES`) to this pool: (its file descriptor, {message name: class})."""
    fdp = descriptor_pb2.FileDescriptorProto(name=path, package="caffe2", syntax="proto2", dependency=list(dependency))
    for name, fields in messages:
        msg = fdp.message_type.add(name=name)
        for spec in fields:
            _field(msg, spec)
    descriptor = _POOL.Add(fdp)
    classes = {
        name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName("caffe2." + name)) for name, _ in messages
    }
    return descriptor, classes


ExternalDataProto: Any
TensorProto: Any
QTensorProto: Any
TensorProtos: Any
TensorShape: Any
TensorShapes: Any
TensorBoundShape: Any
TensorBoundShapes: Any
Argument: Any
DeviceOption: Any
OperatorDef: Any
MapFieldEntry: Any
BackendOptions: Any
PartitionInfo: Any
NetDef: Any
ExecutionStep: Any
PlanDef: Any
BlobProto: Any
DBReaderProto: Any

for _full, _ in _MESSAGES:
    if "." not in _full:
        globals()[_full] = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("caffe2." + _full))

for _vname, _number in _ENUMS["DeviceTypeProto"]:
    globals()[_vname] = _number
# Caffe2's Python package named the device types without the PROTO_ prefix (caffe2/python/__init__.py).
CPU, CUDA, MKLDNN, OPENGL, OPENCL, IDEEP, HIP = 0, 1, 2, 3, 4, 5, 6
COMPILE_TIME_MAX_DEVICE_TYPES = 11
DeviceTypeProto = _POOL.FindEnumTypeByName("caffe2.DeviceTypeProto")

__all__ = (
    [name for name, _ in _MESSAGES if "." not in name]
    + [name for name, _ in _ENUMS["DeviceTypeProto"]]
    + ["CPU", "CUDA", "MKLDNN", "OPENGL", "OPENCL", "IDEEP", "HIP", "COMPILE_TIME_MAX_DEVICE_TYPES", "DESCRIPTOR"]
)
