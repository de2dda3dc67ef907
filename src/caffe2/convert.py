"""Conversion between Caffe2's protobuf ``NetDef`` and asyncnet's :class:`~asyncnet.NetDef`.

asyncnet's core knows nothing of protobuf: the Caffe2 compatibility layer converts here, at its
boundary, and hands asyncnet a plain :class:`~asyncnet.NetDef`. The mapping, field by field:

* ``name``, ``op``, ``external_input``/``external_output``, ``device_option`` map one to one;
  ``type`` "" is asyncnet's "simple"; ``num_workers`` (field 4, or a net ``arg`` of that name)
  is ``num_workers``; other net arguments (executor hints) are ignored with a warning.
* An op's ``engine`` is asyncnet's ``engine`` argument (accepted and ignored by every op);
  ``control_input`` is ``control_inputs``.
* An ``Argument`` holding ``f``/``i``/``s``/``floats``/``ints``/``strings`` is a float, int, str
  or list; one holding only its name is an empty list. RecurrentNetwork's ``step_net`` and
  ``backward_step_net`` (a NetDef in ``n``, or protobuf text in ``s``), If's ``then_net``/
  ``else_net``, While's ``loop_net``/``cond_net`` and Do's ``net`` (a NetDef in ``n``) become asyncnet NetDef
  JSON, written back as ``n``. Other net- and tensor-valued arguments (``n``, ``nets``, ``t``,
  ``tensors``, ``qtensors``) have no asyncnet equivalent and are refused.
* ``is_gradient_op``, ``debug_info`` and ``op_version`` are hints Caffe2 itself ignores at run
  time: asyncnet does not model them (they survive a round trip of an unedited op, see below).
  A ``domain`` other than "" or "caffe2" (an ATen op) is refused.

Converting back gives the proto that was read, byte for byte, for every net and op not edited
since (a converted object remembers its proto; hint fields and fields explicitly set to their
default survive that way). An edited or newly built net comes back in canonical form: a field
is present when it holds something other than its default, and device options carry
``device_type`` and ``device_id`` as Caffe2's ``core.DeviceOption`` writes them::

    >>> from caffe2.proto import caffe2_pb2
    >>> pb = caffe2_pb2.NetDef(name="n", external_input=["x"])
    >>> _ = pb.op.add(type="Scale", input=["x"], output=["y"], arg=[caffe2_pb2.Argument(name="scale", f=2.0)])
    >>> nd = to_asyncnet(pb)
    >>> nd.ops[0].args
    {'scale': 2.0}
    >>> from_asyncnet(nd).SerializeToString() == pb.SerializeToString()
    True
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
from google.protobuf import message as _pb_message
from google.protobuf import text_format

from asyncnet.core.defs import NET_TYPES, DeviceOption, NetDef, OperatorDef
from asyncnet.core.registry import get_schema, validate_op
from asyncnet.errors import NetDefinitionError
from caffe2.proto import caffe2_pb2

__all__ = [
    "arg_to_value",
    "device_from_asyncnet",
    "device_to_asyncnet",
    "drop_unknown_args",
    "from_asyncnet",
    "lenient",
    "load_net_file",
    "op_from_asyncnet",
    "op_to_asyncnet",
    "read_netdef",
    "to_asyncnet",
    "value_to_arg",
    "write_netdef",
]

logger = logging.getLogger("caffe2")
_WARNED: set[tuple[str, str]] = set()
_WARNED_NET_ARGS: set[tuple[str, str]] = set()
_DEVICE_NAMES = {caffe2_pb2.PROTO_CPU: "cpu", caffe2_pb2.PROTO_CUDA: "cuda"}
_DEVICE_CODES = {v: k for k, v in _DEVICE_NAMES.items()}
_HINT_FIELDS = ("is_gradient_op", "debug_info", "op_version")
_UNSUPPORTED_ARG_FIELDS = ("n", "nets", "t", "tensors", "qtensors")
_INT64 = (-(2**63), 2**63 - 1)
# net-valued arguments (RecurrentNetwork's, If's, While's), as NetDef JSON
NET_ARGS = ("step_net", "backward_step_net", "then_net", "else_net", "loop_net", "cond_net", "net", "body")
_TEXT_NET_ARGS = ("step_net", "backward_step_net")  # also read from protobuf text in ``s``


# -- arguments -------------------------------------------------------------------------------


def arg_to_value(arg: Any, where: str) -> Any:
    """The asyncnet value of one ``caffe2_pb2.Argument`` (``where`` names it in errors); a
    net of RecurrentNetwork, If or While (a ``NetDef`` in ``n``, or one in protobuf text in ``s``, as
    older Caffe2 wrote it) becomes asyncnet NetDef JSON."""
    if arg.name in NET_ARGS and (arg.HasField("n") or (arg.name in _TEXT_NET_ARGS and arg.HasField("s"))):
        return _net_arg(arg, where)
    for fname in _UNSUPPORTED_ARG_FIELDS:
        present = arg.HasField(fname) if fname in ("n", "t") else len(getattr(arg, fname)) > 0
        if present:
            raise NetDefinitionError(
                f"argument {arg.name!r} holds a {'net' if fname in ('n', 'nets') else 'tensor'} "
                f"(field {fname!r}); asyncnet arguments are numbers, strings and lists of them",
                where,
            )
    if arg.HasField("f"):
        return arg.f
    if arg.HasField("i"):
        return arg.i
    if arg.HasField("s"):
        return _text(arg.s, f"{where}.s")
    if len(arg.floats):
        return list(arg.floats)
    if len(arg.ints):
        return list(arg.ints)
    if len(arg.strings):
        return [_text(s, f"{where}.strings[{i}]") for i, s in enumerate(arg.strings)]
    return []


def _net_arg(arg: Any, where: str) -> str:
    if arg.HasField("n"):
        pb = arg.n
    else:
        pb = caffe2_pb2.NetDef()
        text = _text(arg.s, f"{where}.s")
        if not text:
            return ""
        try:
            text_format.Parse(text, pb)
        except text_format.ParseError as e:
            raise NetDefinitionError(f"expected a NetDef in protobuf text: {e}", f"{where}.s") from None
    return lenient(to_asyncnet(pb, where)).to_json(indent=None)


def _text(raw: bytes, where: str) -> str:
    """A string argument as text; binary data (a serialized proto) is kept byte for byte, each byte
    that is not UTF-8 as a lone surrogate (``surrogateescape``): ``.encode("utf-8",
    "surrogateescape")`` gives the bytes back, and :func:`value_to_arg` does so."""
    return raw.decode("utf-8", "surrogateescape")


def value_to_arg(name: str, value: Any) -> Any:
    """A ``caffe2_pb2.Argument`` holding ``value`` (bools as ints, as Caffe2's MakeArgument stores them)."""
    arg = caffe2_pb2.Argument(name=name)
    if isinstance(value, bool):
        arg.i = int(value)
    elif isinstance(value, int):
        arg.i = value
    elif isinstance(value, float):
        arg.f = value
    elif isinstance(value, str):
        arg.s = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, bytes):
        arg.s = value
    elif isinstance(value, (list, tuple)):
        _fill_list(arg, name, list(value))
    else:
        raise NetDefinitionError(f"expected a number, string or list of those, got {type(value).__name__}", name)
    return arg


def _fill_list(arg: Any, name: str, items: list[Any]) -> None:
    if not items:
        return
    kinds = set(map(type, items))  # one pass in C: long value lists (GivenTensorFill) stay fast
    if kinds <= {float}:
        extend_floats(arg, np.asarray(items, dtype=np.float32))
    elif kinds <= {int}:
        arg.ints.extend(items)
    elif kinds <= {str, bytes}:
        arg.strings.extend(v.encode("utf-8") if isinstance(v, str) else v for v in items)
    elif all(isinstance(v, (bool, int)) for v in items):
        arg.ints.extend(int(v) for v in items)
    elif all(isinstance(v, (bool, int, float)) for v in items):
        arg.floats.extend(float(v) for v in items)
    else:
        raise NetDefinitionError(f"expected a list of numbers or a list of strings, got {items!r:.60}", name)


def extend_floats(arg: Any, values: np.ndarray) -> None:
    """Append ``values`` to ``arg.floats`` in one step: protobuf parses them as one packed field
    (the same message as extending value by value, without a Python float per value).

        >>> a = caffe2_pb2.Argument(name="values"); extend_floats(a, np.array([0.5, 2.0]))
        >>> list(a.floats)
        [0.5, 2.0]
    """
    data = np.ascontiguousarray(values, dtype="<f4").tobytes()
    arg.MergeFromString(_FLOATS_TAG + _varint(len(data)) + data)


_FLOATS_TAG = bytes([caffe2_pb2.Argument.DESCRIPTOR.fields_by_name["floats"].number << 3 | 2])  # length-delimited


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# -- devices ---------------------------------------------------------------------------------


def device_id_of(dev: Any) -> int:
    """The device index of a ``caffe2_pb2.DeviceOption``: ``device_id``, or Caffe2 2018's
    ``cuda_gpu_id`` when only that one is set.

        >>> device_id_of(caffe2_pb2.DeviceOption(device_type=1, cuda_gpu_id=3))
        3
    """
    if not dev.HasField("device_id") and dev.HasField("cuda_gpu_id"):
        return dev.cuda_gpu_id
    return dev.device_id


def device_to_asyncnet(dev: Any, where: str) -> DeviceOption:
    """asyncnet's DeviceOption for a ``caffe2_pb2.DeviceOption`` (CPU and CUDA only)."""
    kind = _DEVICE_NAMES.get(dev.device_type)
    if kind is None:
        name = caffe2_pb2.DeviceTypeProto.values_by_number.get(dev.device_type)
        shown = name.name if name is not None else str(dev.device_type)
        raise NetDefinitionError(
            f"device type {shown} is not supported; asyncnet runs on CPU (0) and CUDA (1)", f"{where}.device_type"
        )
    seed = dev.random_seed if dev.HasField("random_seed") else None
    return DeviceOption(kind, device_id_of(dev), dev.numa_node_id, seed)


def device_from_asyncnet(dev: DeviceOption) -> Any:
    """The ``caffe2_pb2.DeviceOption`` Caffe2's ``core.DeviceOption`` would write for ``dev``."""
    out = caffe2_pb2.DeviceOption(device_type=_DEVICE_CODES[dev.device_type], device_id=dev.device_id)
    if dev.random_seed is not None:
        out.random_seed = dev.random_seed
    if dev.numa_node_id:
        out.numa_node_id = dev.numa_node_id
    return out


# -- operators and nets ----------------------------------------------------------------------


def op_to_asyncnet(op: Any, where: str = "op") -> OperatorDef:
    """asyncnet's OperatorDef for a ``caffe2_pb2.OperatorDef``; ``where`` prefixes error paths."""
    where = f"{where} ({op.type or '?'}{' ' + repr(op.name) if op.name else ''})"
    if not op.type:
        raise NetDefinitionError("missing the operator type", f"{where}.type")
    if op.domain not in ("", "caffe2"):
        raise NetDefinitionError(
            f"operator domain {op.domain!r} is not supported; expected '' or 'caffe2'", f"{where}.domain"
        )
    args: dict[str, Any] = {}
    for i, arg in enumerate(op.arg):
        if not arg.name:
            raise NetDefinitionError("argument without a name", f"{where}.arg[{i}]")
        if arg.name in args:
            raise NetDefinitionError(f"argument {arg.name!r} given twice", f"{where}.arg[{i}]")
        args[arg.name] = arg_to_value(arg, f"{where}.arg[{i}] {arg.name!r}")
    if op.engine:
        args["engine"] = op.engine
    dev = device_to_asyncnet(op.device_option, f"{where}.device_option") if op.HasField("device_option") else None
    out = OperatorDef(op.type, list(op.input), list(op.output), args, op.name, dev, list(op.control_input))
    out._caffe2_proto = op  # type: ignore[attr-defined]
    return out


def _original(obj: Any, convert: Any) -> Any:
    """The proto ``obj`` was converted from, when converting it again still gives ``obj``
    (nothing was edited since): it carries what asyncnet does not model (hint fields, fields
    set to their default), so writing it back gives the bytes that were read."""
    orig = getattr(obj, "_caffe2_proto", None)
    if orig is None:
        return None
    try:
        same = convert(orig) == obj
    except NetDefinitionError:
        return None
    if not same:
        return None
    copy = type(orig)()
    copy.CopyFrom(orig)
    return copy


def op_from_asyncnet(op: OperatorDef) -> Any:
    """The ``caffe2_pb2.OperatorDef`` of an asyncnet OperatorDef (the proto it was read from, if unchanged)."""
    orig = _original(op, op_to_asyncnet)
    if orig is not None:
        return orig
    out = caffe2_pb2.OperatorDef(input=op.inputs, output=op.outputs, type=op.type)
    if op.name:
        out.name = op.name
    for name, value in op.args.items():
        if name == "engine" and isinstance(value, str):
            continue
        if name in NET_ARGS and isinstance(value, str) and value.startswith("{"):
            out.arg.append(caffe2_pb2.Argument(name=name, n=from_asyncnet(NetDef.from_json(value))))
            continue
        out.arg.append(value_to_arg(name, value))
    if op.device_option is not None:
        out.device_option.CopyFrom(device_from_asyncnet(op.device_option))
    engine = op.args.get("engine")
    if isinstance(engine, str) and engine:
        out.engine = engine
    out.control_input.extend(op.control_inputs)
    return out


def drop_unknown_args(op: OperatorDef, where: str = "op") -> OperatorDef:
    """Caffe2's leniency: the arguments ``op``'s schema does not take are dropped, each logged
    once (per op type and name) as a warning; an unknown op type is still an error. Arguments
    whose meaning asyncnet cannot honour (a ``legacy_pad`` other than NOTSET or VALID on an op whose
    schema has no ``legacy_pad``, such as ConvTranspose) are refused."""
    try:
        schema = get_schema(op.type)
    except NetDefinitionError as e:
        raise NetDefinitionError(str(e), f"{where}.type") from None
    pad = op.args.get("legacy_pad")
    if "legacy_pad" not in schema.args and pad not in (None, 0, 1):
        raise NetDefinitionError(
            f"legacy_pad={pad!r} (Caffe2's SAME or CAFFE_LEGACY_POOLING padding) is not "
            "supported; give explicit pads instead",
            f"{where} ({op.type}).args.legacy_pad",
        )
    unknown = [
        k
        for k in op.args
        if k not in schema.args and k != "engine" and (schema.extra_args is None or schema.extra_args(k) is None)
    ]
    if not unknown:
        return op
    for k in unknown:
        if (op.type, k) not in _WARNED:
            _WARNED.add((op.type, k))
            logger.warning(
                "%s (%s): argument %r is not used by asyncnet's %s; ignored (as Caffe2 ignores "
                "arguments an operator does not read)",
                where,
                op.type,
                k,
                op.type,
            )
    args = {k: v for k, v in op.args.items() if k not in unknown}
    return OperatorDef(op.type, op.inputs, op.outputs, args, op.name, op.device_option, op.control_inputs)


# Arguments that give an asyncnet op Caffe2's behaviour where asyncnet is stricter by default.
_CAFFE2_BEHAVIOUR = {"Iter": {"widen_to_int64": True}}


def _with_caffe2_behaviour(op: OperatorDef) -> OperatorDef:
    extra = _CAFFE2_BEHAVIOUR.get(op.type)
    if not extra:
        return op
    args = {**extra, **op.args}
    return OperatorDef(op.type, op.inputs, op.outputs, args, op.name, op.device_option, op.control_inputs)


def lenient(nd: NetDef) -> NetDef:
    """``nd`` with :func:`drop_unknown_args` applied to every op (a new NetDef; ``nd`` is unchanged),
    and Caffe2's behaviour where asyncnet is stricter (Iter widens an int32 counter to int64)."""
    ops = [_with_caffe2_behaviour(drop_unknown_args(op, f"ops[{i}]")) for i, op in enumerate(nd.ops)]
    return NetDef(
        nd.name,
        ops,
        nd.type,
        nd.num_workers,
        nd.external_inputs,
        nd.external_outputs,
        nd.device_option,
        nd.own_pool,
        nd.intra_op_threads,
    )


def to_asyncnet(pb: Any, where: str = "") -> NetDef:
    """asyncnet's NetDef for a ``caffe2_pb2.NetDef`` (each field checked; errors name the field)."""
    prefix = f"{where}: " if where else ""
    net_type = pb.type or "simple"
    if net_type not in NET_TYPES:
        raise NetDefinitionError(f"{prefix}net type {net_type!r} is not supported; expected one of {NET_TYPES}", "type")
    num_workers = pb.num_workers if pb.HasField("num_workers") else None
    for arg in pb.arg:
        if arg.name == "num_workers" and arg.HasField("i"):
            num_workers = arg.i
        elif (pb.name, arg.name) not in _WARNED_NET_ARGS:  # executor hints (first_iter_only_one_worker...)
            _WARNED_NET_ARGS.add((pb.name, arg.name))
            logger.warning(
                "%snet argument %r has no asyncnet meaning; ignored (asyncnet takes num_workers here)", prefix, arg.name
            )
    if len(pb.partition_info):
        raise NetDefinitionError(f"{prefix}partition_info is not supported (backend partitions)", "partition_info")
    ops = []
    for i, op in enumerate(pb.op):
        try:
            ops.append(op_to_asyncnet(op, f"ops[{i}]"))
        except NetDefinitionError as e:
            raise NetDefinitionError(f"{prefix}{e.args[0] if e.args else e}") from None
    dev = device_to_asyncnet(pb.device_option, "device_option") if pb.HasField("device_option") else None
    try:
        out = NetDef(
            pb.name,
            ops,
            type=net_type,
            num_workers=num_workers or None,
            external_inputs=list(pb.external_input),
            external_outputs=list(pb.external_output),
            device_option=dev,
        )
    except NetDefinitionError as e:
        raise NetDefinitionError(f"{prefix}{e.args[0] if e.args else e}") from None
    out._caffe2_proto = pb  # type: ignore[attr-defined]
    return out


def from_asyncnet(nd: NetDef) -> Any:
    """The ``caffe2_pb2.NetDef`` of an asyncnet NetDef: the proto it was read from while nothing
    changed, else the canonical one (default-valued fields left out, each unchanged op as read)."""
    orig = _original(nd, to_asyncnet)
    if orig is not None:
        return orig
    out = caffe2_pb2.NetDef(name=nd.name)
    out.op.extend(op_from_asyncnet(op) for op in nd.ops)
    if nd.type != "simple":
        out.type = nd.type
    if nd.num_workers is not None:
        out.num_workers = nd.num_workers
    if nd.device_option is not None:
        out.device_option.CopyFrom(device_from_asyncnet(nd.device_option))
    out.external_input.extend(nd.external_inputs)
    out.external_output.extend(nd.external_outputs)
    return out


# -- files -----------------------------------------------------------------------------------

MAX_FILE_BYTES = 2**31 - 1  # protobuf's own limit on one message


def read_netdef(path: str | os.PathLike[str]) -> Any:
    """A ``caffe2_pb2.NetDef`` from a binary ``.pb`` file, or a text-format one (``.pbtxt``,
    ``.prototxt``, ``.txt``); any defect is a :class:`~asyncnet.NetDefinitionError` naming the file."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise NetDefinitionError(f"{path}: larger than protobuf's 2 GiB message limit")
    pb = caffe2_pb2.NetDef()
    if path.lower().endswith((".pbtxt", ".prototxt", ".txt")):
        try:
            text_format.Parse(data.decode("utf-8"), pb)
        except UnicodeDecodeError as e:
            raise NetDefinitionError(f"{path}: expected UTF-8 protobuf text: {e}") from None
        except text_format.ParseError as e:
            raise NetDefinitionError(f"{path}: invalid protobuf text (caffe2.NetDef): {e}") from None
        return pb
    try:
        pb.ParseFromString(data)
    except _pb_message.DecodeError as e:
        raise NetDefinitionError(f"{path}: not a valid binary caffe2.NetDef (truncated or corrupt?): {e}") from None
    unknown = _unknown_fields(pb)
    if unknown:
        raise NetDefinitionError(f"{path}: unknown protobuf field(s) {unknown}; expected caffe2.NetDef's fields")
    return pb


def _unknown_fields(msg: Any, path: str = "net") -> list[str]:
    """Paths of fields a parsed message carries that its schema does not name."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    found = [f"{path}#{f.field_number}" for f in UnknownFieldSet(msg)]
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        for i, item in enumerate(value if repeated else [value]):
            found += _unknown_fields(item, f"{path}.{fd.name}[{i}]" if repeated else f"{path}.{fd.name}")
    return found


def load_net_file(path: str | os.PathLike[str], validate: bool = True) -> NetDef:
    """Read a Caffe2 ``.pb``/``.pbtxt`` net file as asyncnet's NetDef, with Caffe2's leniency
    (:func:`drop_unknown_args`); with ``validate`` each op is also checked against its schema
    (unknown op types, argument types, arities), errors naming the file.

        >>> load_net_file("/no/such.pb")
        Traceback (most recent call last):
        FileNotFoundError: [Errno 2] No such file or directory: '/no/such.pb'
    """
    nd = to_asyncnet(read_netdef(path), os.fspath(path))
    try:
        nd = lenient(nd)
    except NetDefinitionError as e:
        raise NetDefinitionError(f"{os.fspath(path)}: {e}") from None
    if validate:
        for i, op in enumerate(nd.ops):
            try:
                validate_op(op, i, nd.device_option)
            except NetDefinitionError as e:
                raise NetDefinitionError(f"{os.fspath(path)}: {e}") from None
    return nd


def write_netdef(nd: NetDef | Any, path: str | os.PathLike[str]) -> None:
    """Write a NetDef (asyncnet's or Caffe2's) as binary protobuf, or as text for ``.pbtxt``."""
    pb = from_asyncnet(nd) if isinstance(nd, NetDef) else nd
    path = os.fspath(path)
    if path.lower().endswith((".pbtxt", ".prototxt", ".txt")):
        data = text_format.MessageToString(pb).encode("utf-8")
    else:
        data = pb.SerializeToString()
    with open(path, "wb") as f:
        f.write(data)


# -- plans -----------------------------------------------------------------------------------

_STEP_UNSUPPORTED = (
    "criteria_network",
    "report_net",
    "report_interval",
    "run_every_ms",
    "create_workspace",
    "num_concurrent_instances",
)


def plan_to_asyncnet(pb: Any) -> Any:
    """asyncnet's :class:`~asyncnet.Plan` for a ``caffe2_pb2.PlanDef`` (its nets made lenient)."""
    from asyncnet.exec.plan import Plan

    nets: dict[str, NetDef] = {}
    for i, net in enumerate(pb.network):
        nets[net.name] = lenient(to_asyncnet(net, f"plan {pb.name!r} network[{i}]"))
    return Plan(pb.name, [step_to_asyncnet(s, nets, f"execution_step[{i}]") for i, s in enumerate(pb.execution_step)])


def step_to_asyncnet(pb: Any, nets: dict[str, NetDef], where: str = "step") -> Any:
    """asyncnet's ExecutionStep for a ``caffe2_pb2.ExecutionStep``; its nets are looked up in ``nets``."""
    from asyncnet.exec.plan import ExecutionStep

    for fname in _STEP_UNSUPPORTED:
        if pb.HasField(fname):
            raise NetDefinitionError(f"step field {fname!r} is not supported", f"{where} {pb.name!r}.{fname}")
    missing = [n for n in pb.network if n not in nets]
    if missing:
        raise NetDefinitionError(
            f"the step runs net(s) {missing} that the plan does not define", f"{where} {pb.name!r}"
        )
    return ExecutionStep(
        pb.name,
        nets=[nets[n] for n in pb.network] or None,
        substeps=[step_to_asyncnet(s, nets, f"{where}.substep[{i}]") for i, s in enumerate(pb.substep)] or None,
        num_iter=pb.num_iter if pb.HasField("num_iter") else None,
        concurrent_substeps=pb.concurrent_substeps,
        should_stop_blob=pb.should_stop_blob or None,
        only_once=pb.only_once,
    )
