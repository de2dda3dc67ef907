"""Caffe2's ``caffe2.python.core``: nets as live ``caffe2_pb2.NetDef`` protos, blob references,
operator creation, execution steps and plans.

A :class:`Net` holds the proto itself: ``net.Proto()`` is that proto (edits to it are the net),
and ``net.Relu(...)`` appends an ``OperatorDef`` to it as Caffe2 did, unchecked until the net
is created (``workspace.CreateNet``) or run, where it is converted to asyncnet's NetDef and
validated once. Gradients come from asyncnet's autodiff::

    >>> from caffe2.python import core
    >>> net = core.Net("core_doc")
    >>> x = net.AddExternalInputs("x")
    >>> y = net.Relu(x, "y")
    >>> z = y.Sigmoid([], "z")
    >>> [op.type for op in net.Proto().op], str(z)
    (['Relu', 'Sigmoid'], 'z')
    >>> net.Proto().type = "dag"; net.Proto().type
    'dag'
"""

from __future__ import annotations

import inspect
import os
from collections import OrderedDict, namedtuple
from collections.abc import Iterable
from typing import Any

import numpy as np

import asyncnet as an
from asyncnet.errors import near_names
from caffe2.convert import device_id_of
from caffe2.proto import caffe2_pb2
from caffe2.python import _control_grad, _python_op, scope, utils, workspace
from caffe2.python._gradients import GradientRegistry

__all__ = [
    "AddNets",
    "BlobReference",
    "CreateOperator",
    "CreatePythonOperator",
    "DataType",
    "DeviceOption",
    "DeviceScope",
    "ExecutionStep",
    "GlobalInit",
    "GradientRegistry",
    "GradientSlice",
    "InferBlobDevices",
    "InferOpBlobDevices",
    "InferOpBlobDevicesAsDict",
    "SetEnginePref",
    "IsGPUDeviceType",
    "IsOperator",
    "IsOperatorWithEngine",
    "NameScope",
    "Net",
    "Plan",
    "RefreshRegisteredOperators",
    "ScopedBlobReference",
    "ScopedName",
    "device_option_equal",
    "execution_step",
    "get_net_name",
    "to_execution_step",
]

DeviceScope = scope.DeviceScope
NameScope = scope.NameScope
GlobalInit = workspace.GlobalInit
C = workspace.C


class DataType:
    """Caffe2's ``TensorProto.DataType`` codes by name."""

    UNDEFINED = 0
    FLOAT = 1
    INT32 = 2
    BYTE = 3
    STRING = 4
    BOOL = 5
    UINT8 = 6
    INT8 = 7
    UINT16 = 8
    INT16 = 9
    INT64 = 10
    FLOAT16 = 12
    DOUBLE = 13
    ZERO_COLLISION_HASH = 14
    REBATCHING_BUFFER = 15


def IsOperator(op_type: str) -> bool:
    """Whether asyncnet registers an operator named ``op_type``."""
    return op_type in _registered()


def IsOperatorWithEngine(op_type: str, engine: str) -> bool:
    """Whether ``op_type`` runs with ``engine``: asyncnet has one implementation per op, Caffe2's
    default engine ("" or "DEFAULT"); other engine names given to an op are ignored at run time."""
    return IsOperator(op_type) and engine in ("", "DEFAULT")


_REGISTERED: dict[str, Any] = {}


def _registered() -> dict[str, Any]:
    if not _REGISTERED:
        _REGISTERED.update(an.registered_ops())
    return _REGISTERED


def RefreshRegisteredOperators() -> None:
    """Forget the cached operator list (after registering new asyncnet ops)."""
    _REGISTERED.clear()


def IsGPUDeviceType(device_type: int) -> bool:
    """Whether ``device_type`` is CUDA or HIP."""
    return device_type in (caffe2_pb2.CUDA, caffe2_pb2.HIP)


def DeviceOption(
    device_type: int,
    device_id: int = 0,
    random_seed: int | None = None,
    node_name: str | None = None,
    numa_node_id: int | None = None,
    extra_info: Iterable[str] | None = None,
    cuda_gpu_id: int | None = None,
) -> Any:
    """A ``caffe2_pb2.DeviceOption`` with ``device_type`` and ``device_id`` set (as Caffe2 writes
    it); Caffe2 2018's keyword ``cuda_gpu_id`` sets ``cuda_gpu_id`` instead (read as the device id).

        >>> DeviceOption(caffe2_pb2.CUDA, cuda_gpu_id=1).cuda_gpu_id
        1
    """
    if cuda_gpu_id is not None:
        option = caffe2_pb2.DeviceOption(device_type=device_type, cuda_gpu_id=cuda_gpu_id)
    else:
        option = caffe2_pb2.DeviceOption(device_type=device_type, device_id=device_id)
    if node_name is not None:
        option.node_name = node_name
    if random_seed is not None:
        option.random_seed = random_seed
    if numa_node_id is not None:
        if device_type != caffe2_pb2.CPU:
            raise ValueError("numa_node_id applies to CPU device options only")
        option.numa_node_id = numa_node_id
    if extra_info is not None:
        option.extra_info.extend(extra_info)
    return option


def device_option_equal(opt1: Any, opt2: Any, ignore_node_name: bool = True, ignore_random_seed: bool = True) -> bool:
    """Caffe2's comparison of two device options (CPU options are all equal)."""
    if not opt1 or not opt2:
        return opt1 == opt2
    if not ignore_node_name and opt1.node_name != opt2.node_name:
        return False
    if not ignore_random_seed and opt1.random_seed != opt2.random_seed:
        return False
    if not opt1.device_type or not opt2.device_type:
        return not opt1.device_type and not opt2.device_type
    return device_id_of(opt1) == device_id_of(opt2)


def InferBlobDevices(net: Net) -> dict[str, Any]:
    """{blob: the device option of the op that writes it}."""
    return {b: op.device_option for op in net.Proto().op for b in op.output}


def InferOpBlobDevices(op: Any) -> tuple[list[Any], list[Any]]:
    """The device option of each input and each output of ``op``: the op's own (asyncnet keeps no
    per-blob device map, so every blob of an op lives on the op's device)."""
    return [op.device_option] * len(op.input), [op.device_option] * len(op.output)


def InferOpBlobDevicesAsDict(op: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`InferOpBlobDevices` as ``({input: device}, {output: device})``."""
    ins, outs = InferOpBlobDevices(op)
    return dict(zip(op.input, ins)), dict(zip(op.output, outs))


_engine_prefs: dict[str, Any] = {"per_device": {}, "per_op": {}}


def SetEnginePref(per_device_type_engine_pref: Any, global_engine_pref: Any) -> None:
    """Record Caffe2's engine preferences; asyncnet has one implementation per op, so they only
    are kept (``op.engine`` is ignored at run time)."""
    _engine_prefs["per_device"] = dict(per_device_type_engine_pref or {})
    _engine_prefs["per_op"] = dict(global_engine_pref or {})


GradientSlice = namedtuple("GradientSlice", ["indices", "values"])


class BlobReference:
    """A blob name plus the net it comes from; ``ref.Relu([], "y")`` adds ``Relu([ref], "y")`` to that net."""

    def __init__(self, name: Any, net: Net | None = None):
        self._name = name if isinstance(name, str) else name.decode("utf-8") if isinstance(name, bytes) else str(name)
        self._from_net = net
        self.meta: dict[str, Any] = {}

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self._name == other
        if isinstance(other, bytes):
            return self._name == other.decode("utf-8")
        if isinstance(other, BlobReference):
            return self._name == other._name
        return False

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f'BlobReference("{self._name}")'

    def __add__(self, other: str) -> BlobReference:
        if not isinstance(other, str):
            raise RuntimeError("Cannot add BlobReference to a non-string.")
        return BlobReference(self._name + other, self._from_net)

    def __radd__(self, other: str) -> BlobReference:
        if not isinstance(other, str):
            raise RuntimeError("Cannot add a non-string to BlobReference.")
        return BlobReference(other + self._name, self._from_net)

    def Net(self) -> Net | None:
        return self._from_net

    def GetNameScope(self) -> str:
        return self._name[: self._name.rfind(scope._NAMESCOPE_SEPARATOR) + 1]

    def GetUnscopedName(self) -> str:
        return self._name[self._name.rfind(scope._NAMESCOPE_SEPARATOR) + 1 :]

    def _CreateAndAddToNet(self, op_type: str, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        inputs = [] if inputs is None else inputs
        if isinstance(inputs, (BlobReference, str)):
            inputs = [inputs]
        inputs = [self, *inputs]
        return getattr(self._from_net, op_type)(inputs, *args, **kwargs)

    def __getattr__(self, op_type: str) -> Any:
        if op_type.startswith("__") or op_type in ("_name", "_from_net", "meta"):
            raise AttributeError(op_type)
        if self._from_net is None:
            raise AttributeError(
                "You cannot use a blob reference that does not have a net source to create "
                "operators. Create the operator from an explicit net object."
            )
        if not IsOperator(op_type):
            raise AttributeError(
                f"Method {op_type} is not a registered operator. Did you mean: "
                f"[{','.join(near_names(op_type, _registered()))}]"
            )
        return lambda *args, **kwargs: self._CreateAndAddToNet(op_type, *args, **kwargs)


def ScopedName(name: Any) -> str:
    """``name`` prefixed with the current name scope."""
    if isinstance(name, bytes):
        name = name.decode("ascii")
    return scope.CurrentNameScope() + name


def ScopedBlobReference(name: Any, *args: Any, **kwargs: Any) -> BlobReference:
    """A BlobReference to ``name`` in the current name scope."""
    return BlobReference(ScopedName(name), *args, **kwargs)


def _RectifyInputOutput(blobs: Any, net: Net | None = None) -> list[BlobReference]:
    if isinstance(blobs, (bytes, str)):
        return [ScopedBlobReference(blobs, net=net)]
    if type(blobs) is BlobReference:
        return [blobs]
    if type(blobs) in (list, tuple):
        out = []
        for blob in blobs:
            if isinstance(blob, (bytes, str)):
                out.append(ScopedBlobReference(blob, net=net))
            elif type(blob) is BlobReference:
                out.append(blob)
            else:
                raise TypeError(f"I/O blob #{len(out)} of unsupported type: {blob!s} of type {type(blob)}")
        return out
    raise TypeError(f"Unknown input/output type: {blobs!s} of type {type(blobs)}.")


def CreateOperator(
    operator_type: str,
    inputs: Any,
    outputs: Any,
    name: str = "",
    control_input: Any = None,
    device_option: Any = None,
    arg: Any = None,
    engine: str | None = None,
    debug_info: str | None = None,
    **kwargs: Any,
) -> Any:
    """A ``caffe2_pb2.OperatorDef`` (string blob names take the current name scope; the device
    option is the given one, else the current DeviceScope's; a ``None`` argument is left out, as in
    Caffe2's last release, where scripts pass optional arguments as None)."""
    op = caffe2_pb2.OperatorDef(type=operator_type, name=name)
    op.input.extend(map(str, _RectifyInputOutput(inputs)))
    op.output.extend(map(str, _RectifyInputOutput(outputs)))
    if control_input:
        op.control_input.extend(map(str, _RectifyInputOutput(control_input)))
    if device_option is not None:
        op.device_option.CopyFrom(device_option)
    elif scope.CurrentDeviceScope() is not None:
        op.device_option.CopyFrom(scope.CurrentDeviceScope())
    if engine is not None:
        op.engine = engine
    if debug_info is not None:
        op.debug_info = debug_info
    if "random_seed" in kwargs:
        op.device_option.random_seed = kwargs.pop("random_seed")
    if arg is not None:
        op.arg.extend(arg)
    for key, value in kwargs.items():
        if value is not None:
            op.arg.add().CopyFrom(utils.MakeArgument(key, value))
    return op


def CreatePythonOperator(
    f: Any,
    inputs: Any,
    outputs: Any,
    grad_f: Any = None,
    pass_workspace: bool = False,
    python_func_type: Any = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """A ``Python`` op running ``f(inputs, outputs)`` (see :mod:`caffe2.python._python_op`)."""
    kwargs["token"] = _python_op.register(f, grad_f, pass_workspace)
    return CreateOperator("Python", inputs, outputs, *args, **kwargs)


def get_net_name(netlike: Any) -> str:
    """The name of a ``Net``, a ``NetDef`` or a name."""
    if isinstance(netlike, Net):
        return netlike.Proto().name
    if isinstance(netlike, caffe2_pb2.NetDef):
        return netlike.name
    return str(netlike)


_TRACEBACKS: dict[str, dict[int, tuple[str, int, str]]] = {}
_HERE = os.path.dirname(os.path.abspath(__file__))


def _caller() -> tuple[str, int, str]:
    """(file, line, function) of the innermost frame outside this package."""
    frame = inspect.currentframe()
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    if frame is None:
        return ("?", 0, "?")
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


class Net:
    """A Caffe2 net: a live ``caffe2_pb2.NetDef`` plus op methods (``net.FC(...)``).

    Built from a name (made unique among the nets of this process, as Caffe2 does: a second
    ``Net("train")`` is named ``train_1``) or from a NetDef (copied)."""

    _net_names_used_counters: dict[str, int] = {}

    @staticmethod
    def _get_next_net_name(basename: str) -> str:
        idx = Net._net_names_used_counters.get(basename, 0)
        Net._net_names_used_counters[basename] = idx + 1
        return basename if idx == 0 else f"{basename}_{idx}"

    @staticmethod
    def _reset_used_names() -> None:
        Net._net_names_used_counters = {}

    def __init__(self, name_or_proto: Any, inplace: bool = False):
        self._registered_blob_names: set[str] = set()
        self._outputs_seen: tuple[int, set[str]] = (0, set())  # (ops read, their outputs): see _op_outputs
        self._attr_dict: dict[str, list[Any]] = {}
        self._next_blob_name_ids: dict[str, int] = {}
        if isinstance(name_or_proto, caffe2_pb2.NetDef):
            self._net = name_or_proto if inplace else caffe2_pb2.NetDef()
            if not inplace:
                self._net.CopyFrom(name_or_proto)
            prefix = self._net.name + "_blob_"
            indices = [
                int(s[len(prefix) :])
                for op in self._net.op
                for s in (*op.input, *op.output)
                if s.startswith(prefix) and s[len(prefix) :].isdigit()
            ]
            self._next_name_index = max(indices) + 1 if indices else 0
            name = self._net.name
        elif name_or_proto is None or isinstance(name_or_proto, str):
            self._net = caffe2_pb2.NetDef()
            self._next_name_index = 0
            name = name_or_proto or "net"
        else:
            raise TypeError(f"Net takes a name (str) or a caffe2_pb2.NetDef, got {type(name_or_proto).__name__}")
        self._net.name = Net._get_next_net_name(name)

    # -- identity ------------------------------------------------------------------------------
    def Name(self) -> str:
        return self._net.name

    def __str__(self) -> str:
        return self.Name()

    def __repr__(self) -> str:
        return f"core.Net({self.Name()!r}, ops={len(self._net.op)})"

    def Proto(self) -> Any:
        """The live ``caffe2_pb2.NetDef`` (edits to it change the net)."""
        self._outputs_seen = (0, set())  # the caller may edit any op through it
        return self._net

    def to_asyncnet(self) -> an.NetDef:
        """asyncnet's NetDef of this net (Caffe2's leniency applied: unknown arguments dropped)."""
        return workspace._as_asyncnet(self)

    # -- blobs -----------------------------------------------------------------------------------
    def _op_outputs(self) -> set[str]:
        """Every op's outputs, read once per op as ops are appended (``Proto()``, through which
        anything may be edited, starts the reading again): building a net stays linear."""
        ops = self._net.op
        seen, outputs = self._outputs_seen
        if len(ops) < seen:
            seen, outputs = 0, set()
        for op in ops[seen:]:
            outputs.update(op.output)
        self._outputs_seen = (len(ops), outputs)
        return outputs

    def BlobIsDefined(self, blob: Any) -> bool:
        name = str(blob)
        return name in self._op_outputs() or name in self._net.external_input

    def UsesBlob(self, blob: Any) -> bool:
        name = str(blob)
        return any(name in op.input for op in self._net.op) or name in self._net.external_input

    def _CheckLookupTables(self) -> None:
        """Assert that the blob names this net knows cover its proto's op outputs and external inputs."""
        known = self.UsedBlobNames()
        missing = {o for op in self._net.op for o in op.output} - known
        missing |= set(self._net.external_input) - known
        if missing:
            raise AssertionError(f"net {self.Name()!r}: blobs {sorted(missing)} are missing from its lookup tables")

    def UsedBlobNames(self) -> set[str]:
        names = {b for op in self._net.op for b in (*op.input, *op.output)}
        return names | set(self._net.external_input) | set(self._net.external_output)

    def GetBlobRef(self, blob_name: Any) -> BlobReference:
        if not self.BlobIsDefined(blob_name):
            raise KeyError(f"Net does not define blob {blob_name}")
        return BlobReference(str(blob_name), self)

    def NextName(self, prefix: str | None = None, output_id: int | None = None) -> str:
        """A blob name not used in this net yet (``<net>/<prefix>`` or ``<net>_blob_<n>``)."""
        if prefix:
            base = f"{self._net.name}/{prefix}"
            name = base + (f":{output_id}" if output_id is not None else "")
            index = self._next_blob_name_ids.get(name, 2)
            key = name
            while self.BlobIsDefined(str(ScopedBlobReference(name))):
                name = f"{base}_{index}" + (f":{output_id}" if output_id is not None else "")
                index += 1
                self._next_blob_name_ids[key] = index
            return name
        name = f"{self._net.name}_blob_{self._next_name_index}"
        self._next_name_index += 1
        return name

    def NextBlob(self, prefix: str = "unnamed") -> BlobReference:
        base = BlobReference(prefix)
        out, index = base, 0
        while str(out) in self._registered_blob_names or self.BlobIsDefined(out):
            out = base + f"_auto_{index}"
            index += 1
        self._registered_blob_names.add(str(out))
        return out

    def NextScopedBlob(self, prefix: str = "unnamed") -> BlobReference:
        return self.NextBlob(ScopedName(prefix))

    def AddExternalInput(self, *inputs: Any) -> Any:
        """Declare external inputs; returns the reference (one input) or the list of references."""
        if not inputs:
            raise ValueError("AddExternalInput takes at least one blob")
        names = [str(i) for i in inputs]
        for n in names:
            if n in self._net.external_input or names.count(n) > 1:
                raise ValueError(f"Net already contains an input named {n}")
        self._net.external_input.extend(names)
        refs = [BlobReference(n) for n in names]
        return refs[0] if len(refs) == 1 else refs

    AddExternalInputs = AddExternalInput

    def AddExternalOutput(self, *outputs: Any) -> None:
        for o in outputs:
            if not self.BlobIsDefined(o):
                raise ValueError(f"{o} is not defined")
        self._net.external_output.extend(str(o) for o in outputs)

    def AddExternalOutputs(self, *outputs: Any) -> None:
        self.AddExternalOutput(*outputs)

    def AddScopedExternalInputs(self, *inputs: Any) -> list[BlobReference]:
        res = self.AddExternalInput(*[ScopedBlobReference(b) for b in inputs])
        return res if isinstance(res, list) else [res]

    def AddScopedExternalOutputs(self, *outputs: Any) -> None:
        self.AddExternalOutput(*[ScopedBlobReference(b) for b in outputs])

    @property
    def external_inputs(self) -> list[BlobReference]:
        return [BlobReference(x) for x in self._net.external_input]

    @property
    def external_outputs(self) -> list[BlobReference]:
        return [BlobReference(x) for x in self._net.external_output]

    def is_external_input(self, blob: Any) -> bool:
        return str(blob) in self._net.external_input

    def AddArgument(self, arg_name: str, arg_value: Any) -> None:
        self._net.arg.extend([utils.MakeArgument(arg_name, arg_value)])

    # -- ops -------------------------------------------------------------------------------------
    def _ExtendOps(self, new_ops: Iterable[Any]) -> None:
        self._net.op.extend(new_ops)

    def extend_ops(self, new_ops: Iterable[Any]) -> None:
        self._ExtendOps(new_ops)

    def _CreateAndAddToSelf(self, op_type: str, inputs: Any, outputs: Any = None, **kwargs: Any) -> Any:
        inputs = _RectifyInputOutput(inputs)
        for i in inputs:
            if not self.BlobIsDefined(i):
                self.AddExternalInput(i)
        if outputs is None:
            outputs = self.NextName(prefix=op_type)
        elif type(outputs) is int:
            outputs = [self.NextName(prefix=op_type, output_id=i) for i in range(outputs)]
        outputs = _RectifyInputOutput(outputs, net=self)
        op = CreateOperator(op_type, inputs, outputs, **kwargs)
        self._ExtendOps([op])
        if workspace.IsImmediate():
            workspace.RunOperatorImmediate(op)
        _TRACEBACKS.setdefault(self.Name(), {})[len(self._net.op) - 1] = _caller()
        if not op.output:
            return None
        if len(op.output) == 1:
            return BlobReference(op.output[0], self)
        return tuple(BlobReference(o, self) for o in op.output)

    def __getattr__(self, op_type: str) -> Any:
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        if not IsOperator(op_type):
            raise AttributeError(
                f"Method {op_type} is not a registered operator. Did you mean: "
                f"[{','.join(near_names(op_type, _registered()))}]"
            )
        return lambda *args, **kwargs: self._CreateAndAddToSelf(op_type, *args, **kwargs)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(_registered()))

    def Python(
        self,
        f: Any,
        grad_f: Any = None,
        python_func_type: Any = None,
        pass_workspace: bool = False,
        grad_output_indices: Any = None,
        grad_input_indices: Any = None,
    ) -> Any:
        """A function ``(inputs, outputs, **kwargs)`` adding a ``Python`` op running ``f``."""
        token = _python_op.register(f, grad_f, pass_workspace)
        extra: dict[str, Any] = {"token": token}
        if grad_output_indices:
            extra["grad_output_indices"] = list(grad_output_indices)
        if grad_input_indices:
            extra["grad_input_indices"] = list(grad_input_indices)
        return lambda *args, **kwargs: self._CreateAndAddToSelf("Python", *args, **extra, **kwargs)

    def Const(self, array: Any, blob_out: Any = None, dtype: Any = None) -> BlobReference:
        """A ``GivenTensor*Fill`` op holding ``array`` (a bool becomes a ConstantFill)."""
        if isinstance(array, bool):
            return self.ConstantFill([], blob_out or 1, dtype=DataType.BOOL, value=array)
        array = np.array(array) if dtype is None else np.array(array, dtype=dtype)
        fill = {
            np.dtype(np.int32): "GivenTensorIntFill",
            np.dtype(np.int64): "GivenTensorInt64Fill",
            np.dtype(np.bool_): "GivenTensorBoolFill",
        }.get(array.dtype, "GivenTensorFill")
        if array.dtype.kind in "SUO":
            fill = "GivenTensorStringFill"
        return getattr(self, fill)([], blob_out or 1, shape=list(array.shape), values=array.ravel().tolist())

    def AppendNet(self, net: Net, device_option: Any = None) -> Net:
        outputs = self._op_outputs()
        for i in net.Proto().external_input:
            if i not in self._net.external_input and i not in outputs:
                self._net.external_input.append(i)
        self._net.external_output.extend(o for o in net.Proto().external_output if o not in self._net.external_output)
        ops = list(net.Proto().op)
        if device_option is not None:
            copies = []
            for op in ops:
                c = caffe2_pb2.OperatorDef()
                c.CopyFrom(op)
                c.device_option.CopyFrom(device_option)
                copies.append(c)
            ops = copies
        self._ExtendOps(ops)
        return self

    def Clone(
        self,
        name: str,
        blob_remap: dict[str, str] | None = None,
        op_id_mask: list[int] | None = None,
        remap_funcs: Any = None,
        keep_schema: bool = True,
        update_external_list: bool = False,
    ) -> Net:
        """A copy named ``name`` with blob names remapped by ``blob_remap`` and only the ops in ``op_id_mask``."""
        remap = {str(k): str(v) for k, v in (blob_remap or {}).items()}
        proto = caffe2_pb2.NetDef()
        proto.CopyFrom(self._net)
        proto.name = name
        ids = range(len(self._net.op)) if op_id_mask is None else op_id_mask
        del proto.op[:]
        for i in ids:
            op = proto.op.add()
            op.CopyFrom(self._net.op[i])
            _remap(op.input, remap)
            _remap(op.output, remap)
        _remap(proto.external_input, remap)
        _remap(proto.external_output, remap)
        new = Net(proto)
        new._attr_dict.update(self._attr_dict)
        return new

    def ClonePartial(self, name: str, inputs: Any, outputs: Any, remap_funcs: Any = None) -> tuple[Net, list[Any]]:
        """A net named ``name`` with only the ops needed to compute ``outputs`` from ``inputs``
        (a list of blobs, kept as they are, or a dict / list of pairs renaming them); blobs the
        clone computes are put under the ``name/`` scope, blobs it reads but does not compute
        (parameters) keep their names. Returns the net and references to its outputs.

            >>> n = Net("clone_partial_doc")
            >>> _ = n.Relu(n.Sigmoid("a", "b"), "c")
            >>> part, (out,) = n.ClonePartial("part", ["b"], ["c"])
            >>> [op.type for op in part.Proto().op], str(out), list(part.Proto().external_input)
            (['Relu'], 'part/c', ['b'])
        """
        given = _input_renames(inputs)
        targets = [str(o) for o in outputs]
        for o in targets:
            assert self.BlobIsDefined(o), f"ClonePartial: no op of net {self.Name()!r} writes {o!r}"
        steps, latest = _blob_versions(self._net, dict.fromkeys(given, 0))
        used = _ops_computing(steps, latest, set(given), targets)
        before = _ops_computing(steps, latest, set(), list(given))
        assert not set(used) & set(before), (
            "Cannot partially clone net: some of the ops required would generate the given input."
        )
        read_first = {b for i in used for b, v in steps[i][0] if v == 0} - set(given)
        prefix = f"{name}/" if name else ""
        mapping = {b: given.get(b, b if b in read_first else prefix + b) for b in latest}
        new = self.Clone(name, mapping, used, remap_funcs)
        new_inputs = [mapping[b] for b in given] + sorted(read_first)
        new_outputs = [mapping[o] for o in targets]
        proto = new.Proto()
        del proto.external_input[:]
        proto.external_input.extend(new_inputs)
        del proto.external_output[:]
        proto.external_output.extend(new_outputs)
        return new, [new.GetBlobRef(o) for o in new_outputs]

    def AddObserver(self, observer_type: str) -> Any:
        """Attach an observer (``"TimeObserver"``) to this net's runs by ``workspace.RunNet``."""
        from caffe2.python import _observers

        return _observers.add(self.Name(), observer_type)

    def RemoveObserver(self, observer: Any) -> None:
        from caffe2.python import _observers

        _observers.remove(self.Name(), observer)

    def NumObservers(self) -> int:
        from caffe2.python import _observers

        return _observers.count(self.Name())

    def set_rand_seed(self, seed: int = 100, sequence_seed: bool = True, seed_on_op_def: bool = False) -> None:
        """Give every op a random seed: ``seed + i`` (``sequence_seed``), or ``seed``."""
        if sequence_seed and seed_on_op_def:
            raise ValueError("sequence_seed and seed_on_op_def cannot be both set to True.")
        for i, op in enumerate(self._net.op):
            if seed_on_op_def:
                op.device_option.random_seed = hash(str(op) + str(seed)) % np.iinfo(np.uint32).max
            else:
                op.device_option.random_seed = seed + i if sequence_seed else seed

    def RunAllOnGPU(self, gpu_id: int = 0, use_cudnn: bool = False) -> None:
        """Put the net on CUDA device ``gpu_id`` (``engine`` "CUDNN" on every op with ``use_cudnn``)."""
        self._net.device_option.CopyFrom(DeviceOption(caffe2_pb2.CUDA, gpu_id))
        if use_cudnn:
            for op in self._net.op:
                op.engine = "CUDNN"

    def PopulateProtoWithFileName(self) -> None:
        """Name each op after the file, line and function that created it (``file:line:function``)."""
        tb = _TRACEBACKS.get(self.Name(), {})
        for idx, op in enumerate(self._net.op):
            if idx in tb:
                op.name = ":".join(map(str, tb[idx]))

    def LogInfo(self, *msg_or_blobs: Any) -> None:
        """Print each argument when the net runs: a blob as it is, anything else as a string
        blob made for the purpose (a ``GivenTensorStringFill`` into a fresh ``log`` name).

        >>> net = Net("logging")
        >>> net.LogInfo("starting")
        >>> [op.type for op in net.Proto().op]
        ['GivenTensorStringFill', 'Print']
        """
        for item in msg_or_blobs:
            blob = item
            if not isinstance(item, BlobReference):
                blob = self.GivenTensorStringFill([], self.NextName("log"), shape=[], values=[item])
            self.Print(blob, [])

    def add_attribute(self, name: str, obj: Any) -> None:
        self._attr_dict.setdefault(name, []).append(obj)

    def get_attributes(self, name: str) -> list[Any]:
        return self._attr_dict.get(name, [])

    # -- gradients -------------------------------------------------------------------------------
    def AddGradientOperators(self, ys: Any, skip: int = 0) -> dict[str, Any]:
        """Append the backward ops of the net's ops (after the first ``skip``) from ``ys``: a
        blob or list of blobs (each seeded with ones, ``ConstantFill`` into
        ``<blob>_autogen_grad``) or a dict {blob: its gradient blob, or None for ones}.
        Returns {blob: gradient BlobReference or GradientSlice} for every blob a gradient
        reaches. Each op's gradient is its Python maker's (``GradientRegistry.RegisterGradient``)
        or asyncnet's; a blob read by several ops gets the sum of their gradients.

            >>> net = Net("add_gradient_operators_doc")
            >>> _ = net.Sigmoid(net.Relu("x", "h"), "y")
            >>> grads = net.AddGradientOperators(["y"])
            >>> [op.type for op in net.Proto().op], str(grads["x"])
            (['Relu', 'Sigmoid', 'ConstantFill', 'SigmoidGradient', 'ReluGradient'], 'x_grad')
        """
        if isinstance(ys, (str, BlobReference)):
            ys = [ys]
        if not isinstance(ys, dict):
            ys = list(ys)
            if not ys:
                raise ValueError("AddGradientOperators needs at least one blob to differentiate")
        grad_ops, grads = GradientRegistry.GetBackwardPass(self._net.op[skip:], ys)
        if workspace.IsImmediate():
            for op in grad_ops:
                workspace.RunOperatorImmediate(op)
        self._ExtendOps(grad_ops)
        return {k: _grad_ref(v, self) for k, v in grads.items()}


def _control_gradient(make: Any) -> Any:
    def maker(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
        return make(op, g_output, GradientRegistry.GetBackwardPass)

    return maker


GradientRegistry.RegisterGradient("Do")(_control_gradient(_control_grad.do_gradient))
GradientRegistry.RegisterGradient("If")(_control_gradient(_control_grad.if_gradient))
GradientRegistry.RegisterGradient("While")(_control_gradient(_control_grad.while_gradient))


def _input_renames(inputs: Any) -> dict[str, str]:
    """{blob: its name in a partial clone} from a list of blobs, a list of pairs or a dict."""
    if isinstance(inputs, dict):
        return {str(k): str(v) for k, v in inputs.items()}
    items = list(inputs)
    if items and all(isinstance(i, tuple) and len(i) == 2 for i in items):
        return {str(k): str(v) for k, v in items}
    return {str(i): str(i) for i in items}


Versioned = tuple[str, int]


def _blob_versions(
    proto: Any, start: dict[str, int]
) -> tuple[list[tuple[list[Versioned], list[Versioned]]], dict[str, int]]:
    """For each op, its (blob, version) inputs and outputs (each write makes the next version;
    blobs never written are version 0), and the latest version of every blob."""
    latest = dict(start)
    for b in proto.external_input:
        latest.setdefault(str(b), 0)
    steps = []
    for op in proto.op:
        ins = [(b, latest.setdefault(b, 0)) for b in op.input]
        outs = []
        for b in op.output:
            latest[b] = latest.get(b, 0) + 1
            outs.append((b, latest[b]))
        steps.append((ins, outs))
    return steps, latest


def _ops_computing(steps: list[Any], latest: dict[str, int], given: set[str], targets: list[str]) -> list[int]:
    """The sorted indices of the ops needed to compute the latest versions of ``targets`` when
    the latest versions of the ``given`` blobs are available."""
    have = {(b, latest[b]) for b in given}
    writer = {key: i for i, (_, outs) in enumerate(steps) for key in outs}
    pending = [(t, latest[t]) for t in targets]
    used: set[int] = set()
    while pending:
        key = pending.pop()
        i = writer.get(key)
        if key in have or i is None or i in used:
            continue
        used.add(i)
        pending.extend(steps[i][0])
    return sorted(used)


def get_ssa(net: Any, blob_versions: dict[str, int] | None = None) -> tuple[list[Any], dict[str, int]]:
    """``(ssa, blob_versions)`` of a Net or NetDef: for each op its inputs and outputs as
    (blob, version) pairs (each write makes the next version; blobs never written are version 0)
    and the latest version of every blob; ``blob_versions`` gives starting versions (updated).

        >>> n = Net("get_ssa_doc"); _ = n.Relu("x", "x"); _ = n.Sigmoid("x", "y")
        >>> get_ssa(n)
        ([([('x', 0)], [('x', 1)]), ([('x', 1)], [('y', 1)])], {'x': 1, 'y': 1})
    """
    proto = net.Proto() if isinstance(net, Net) else net
    versions = {} if blob_versions is None else blob_versions
    steps, latest = _blob_versions(proto, versions)
    versions.update(latest)
    return steps, versions


def get_undefined_blobs(ssa: list[Any]) -> set[str]:
    """The blobs an op of ``ssa`` reads before any op writes them (version 0)."""
    return {b for ins, _ in ssa for b, v in ins if v == 0}


def get_output_producers(ssa: list[Any]) -> dict[tuple[str, int], int]:
    """{(blob, version): index of the op of ``ssa`` writing that version}."""
    return {key: i for i, (_, outs) in enumerate(ssa) for key in outs}


def get_op_ids_in_path(ssa: list[Any], blob_versions: dict[str, int], inputs: Any, outputs: Any) -> list[int]:
    """The sorted indices of the ops of ``ssa`` needed to compute the latest ``outputs`` when
    the latest ``inputs`` are given."""
    return _ops_computing(ssa, blob_versions, {str(i) for i in inputs}, [str(o) for o in outputs])


def _remap(field: Any, remap: dict[str, str]) -> None:
    new = [remap.get(b, b) for b in field]
    del field[:]
    field.extend(new)


def _grad_ref(g: Any, net: Net) -> Any:
    if isinstance(g, tuple):
        return GradientSlice(BlobReference(str(g[0]), net), BlobReference(str(g[1]), net))
    return BlobReference(str(g), net)


def AddNets(*nets: Net) -> None:
    """Nothing: Caffe2 kept no global net list either (kept for scripts that call it)."""


# -- execution steps and plans -----------------------------------------------------------------

_step_counter: dict[str, int] = {}


def _next_step_name(base: str) -> str:
    n = _step_counter.get(base, 0)
    _step_counter[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def _add_net_to_dict(net_dict: OrderedDict[str, Net | None], net: Any) -> bool:
    name = get_net_name(net)
    if name in net_dict:
        if net_dict[name] is not None and isinstance(net, Net) and net is not net_dict[name]:
            raise ValueError(f"Different nets with the same name: {name}")
        return False
    net_dict[name] = net if isinstance(net, Net) else None
    return True


class ExecutionStep:
    """A step of a plan (a live ``caffe2_pb2.ExecutionStep``): nets or substeps, iterated."""

    def __init__(self, name: str, nets: Any = None, num_iter: int | None = None):
        self._step = caffe2_pb2.ExecutionStep(name=name or _next_step_name("step"))
        self._net_dict: OrderedDict[str, Net | None] = OrderedDict()
        self._substeps: list[ExecutionStep] = []
        if nets is not None:
            for net in [nets] if isinstance(nets, Net) else nets:
                if _add_net_to_dict(self._net_dict, net):
                    self._step.network.extend([get_net_name(net)])
        if num_iter is not None:
            self._step.num_iter = num_iter

    def get_net(self, name: str) -> Net | None:
        return self._net_dict[name]

    @classmethod
    def create_from_proto(
        cls, step_proto: Any, net_obj_dict: dict[str, Net], net_proto_dict: dict[str, Any]
    ) -> ExecutionStep:
        """The step ``step_proto`` with its nets taken from ``net_obj_dict`` (by name)."""
        step = ExecutionStep(step_proto.name)
        fields = (
            "num_iter",
            "should_stop_blob",
            "only_once",
            "concurrent_substeps",
            "create_workspace",
            "num_concurrent_instances",
            "run_every_ms",
        )
        for field in fields:
            if step_proto.HasField(field):
                setattr(step._step, field, getattr(step_proto, field))
        if step_proto.report_net:
            step.SetReportNet(net_obj_dict[step_proto.report_net], step_proto.report_interval)
        for name in step_proto.network:
            if name not in net_obj_dict:
                raise ValueError(f"step {step_proto.name!r} runs net {name!r} that the plan does not hold")
            step.AddNet(net_obj_dict[name])
        for sub in step_proto.substep:
            step.AddSubstep(ExecutionStep.create_from_proto(sub, net_obj_dict, net_proto_dict))
        return step

    def get_all_attributes(self, name: str) -> list[Any]:
        """The attributes ``name`` of every net of this step and its substeps."""
        return [attr for net in self._net_dict.values() if net is not None for attr in net.get_attributes(name)]

    def Name(self) -> str:
        return self._step.name

    def __str__(self) -> str:
        return self._step.name

    def Proto(self) -> Any:
        return self._step

    def HasNets(self) -> bool:
        return len(self._step.network) > 0

    def HasSubsteps(self) -> bool:
        return len(self._step.substep) > 0

    def Nets(self) -> list[Net]:
        return [n for n in self._net_dict.values() if n is not None]

    def Substeps(self) -> list[ExecutionStep]:
        return self._substeps

    def SetIter(self, num_iter: int) -> None:
        self._step.num_iter = num_iter

    def SetCreateWorkspace(self, create_workspace: bool) -> None:
        self._step.create_workspace = create_workspace

    def SetNumConcurrentInstances(self, num_concurrent_instances: int) -> None:
        self._step.num_concurrent_instances = num_concurrent_instances

    def SetOnlyOnce(self, only_once: bool) -> None:
        self._step.only_once = only_once

    def SetShouldStopBlob(self, should_stop_blob: Any) -> None:
        self._step.should_stop_blob = str(should_stop_blob)

    def RunEveryMillis(self, interval: int) -> None:
        self._step.run_every_ms = interval

    def SetReportNet(self, report_net: Net, report_interval: int) -> None:
        _add_net_to_dict(self._net_dict, report_net)
        self._step.report_net = get_net_name(report_net)
        self._step.report_interval = report_interval

    def SetConcurrentSubsteps(self, concurrent_substeps: bool) -> None:
        self._step.concurrent_substeps = concurrent_substeps

    def AddSubstep(self, substep: Any) -> ExecutionStep:
        if self.HasNets():
            raise ValueError("Cannot have both network and substeps.")
        if isinstance(substep, ExecutionStep):
            if not substep.HasNets() and not substep.HasSubsteps():
                return self
            for net in substep._net_dict.values():
                if net is not None:
                    _add_net_to_dict(self._net_dict, net)
            self._substeps.append(substep)
            proto = substep.Proto()
        else:
            proto = substep
        self._step.substep.add().CopyFrom(proto)
        return self

    def AddNet(self, net: Any) -> ExecutionStep:
        """Run ``net`` in this step (again, when it is already there: Caffe2 runs it twice)."""
        if self.HasSubsteps():
            raise ValueError("Cannot have both network and substeps.")
        _add_net_to_dict(self._net_dict, net)
        self._step.network.extend([get_net_name(net)])
        return self


def _nets_in_order(step: ExecutionStep, out: list[str]) -> None:
    for sub in step.Substeps():
        _nets_in_order(sub, out)
    for name in step.Proto().network:
        if name not in out:
            out.append(name)
    if step.Proto().report_net and step.Proto().report_net not in out:
        out.append(step.Proto().report_net)


class Plan:
    """A plan (a live ``caffe2_pb2.PlanDef``): its steps and the nets they run."""

    def __init__(self, name_or_step: Any):
        self._plan = caffe2_pb2.PlanDef()
        self._net_dict: OrderedDict[str, Net | None] = OrderedDict()
        self._steps: list[ExecutionStep] = []
        if isinstance(name_or_step, ExecutionStep):
            self._plan.name = name_or_step.Name()
            self.AddStep(name_or_step)
        elif isinstance(name_or_step, str):
            self._plan.name = name_or_step
        else:
            raise ValueError("name_or_step must be a string or ExecutionStep")

    def __str__(self) -> str:
        return self._plan.name

    def Proto(self) -> Any:
        return self._plan

    def AddNets(self, nets: Iterable[Any]) -> None:
        for net in nets:
            if _add_net_to_dict(self._net_dict, net):
                if not isinstance(net, Net):
                    raise TypeError(f"a plan holds core.Net objects, got {type(net).__name__}")
                self._plan.network.add().CopyFrom(net.Proto())

    def Nets(self) -> list[Net | None]:
        return list(self._net_dict.values())

    def AddStep(self, step: ExecutionStep) -> None:
        if not isinstance(step, ExecutionStep):
            raise TypeError(f"expected an ExecutionStep, got {type(step).__name__}")
        if not step.HasNets() and not step.HasSubsteps():
            return
        self._plan.execution_step.add().CopyFrom(step.Proto())
        self._steps.append(step)
        names: list[str] = []
        _nets_in_order(step, names)
        self.AddNets([_find_net(step, n) for n in names])

    def Steps(self) -> list[ExecutionStep]:
        return self._steps

    @classmethod
    def create_from_proto(cls, plan_proto: Any) -> Plan:
        """A Plan rebuilt from a ``caffe2_pb2.PlanDef`` (its nets become new ``core.Net`` objects)."""
        if not isinstance(plan_proto, caffe2_pb2.PlanDef):
            raise TypeError(f"expected a caffe2_pb2.PlanDef, got {type(plan_proto).__name__}")
        plan = Plan(plan_proto.name)
        nets: dict[str, Net] = {}
        protos: dict[str, Any] = {}
        for net_proto in plan_proto.network:
            if net_proto.name in nets:
                raise ValueError(f"the plan holds two nets named {net_proto.name!r}")
            nets[net_proto.name] = Net(net_proto)
            protos[net_proto.name] = net_proto
        for step_proto in plan_proto.execution_step:
            plan.AddStep(ExecutionStep.create_from_proto(step_proto, nets, protos))
        return plan


def _find_net(step: ExecutionStep, name: str) -> Net:
    net = step._net_dict.get(name)
    if net is None:
        raise ValueError(f"step {step.Name()!r} names net {name!r} but holds no core.Net of that name")
    return net


def execution_step(
    default_name: str,
    steps_or_nets: Any,
    num_iter: int | None = None,
    report_net: Net | None = None,
    report_interval: int | None = None,
    concurrent_substeps: bool | None = None,
    should_stop_blob: Any = None,
    only_once: bool | None = None,
    num_concurrent_instances: int | None = None,
    create_workspace: bool = False,
    run_every_ms: int | None = None,
) -> ExecutionStep:
    """An ExecutionStep of nets or substeps with Caffe2's options."""
    if should_stop_blob is not None and num_iter is not None:
        raise ValueError("Cannot set both should_stop_blob and num_iter.")
    step = ExecutionStep(default_name)
    if should_stop_blob is not None:
        step.SetShouldStopBlob(should_stop_blob)
    if only_once is not None:
        step.SetOnlyOnce(only_once)
    if concurrent_substeps is not None:
        step.SetConcurrentSubsteps(concurrent_substeps)
    if report_net is not None:
        step.SetReportNet(report_net, report_interval or 1)
    if num_iter is not None:
        step.SetIter(num_iter)
    if num_concurrent_instances is not None:
        step.SetNumConcurrentInstances(num_concurrent_instances)
    if create_workspace:
        step.SetCreateWorkspace(True)
    if run_every_ms:
        step.RunEveryMillis(run_every_ms)
    if isinstance(steps_or_nets, ExecutionStep):
        step.AddSubstep(steps_or_nets)
    elif isinstance(steps_or_nets, Net):
        step.AddNet(steps_or_nets)
    elif isinstance(steps_or_nets, list):
        if all(isinstance(x, Net) for x in steps_or_nets):
            for x in steps_or_nets:
                step.AddNet(x)
        else:
            for x in steps_or_nets:
                step.AddSubstep(to_execution_step(x))
    elif steps_or_nets:
        raise ValueError(f"steps_or_nets must be a step, a net, or a list of them, got {type(steps_or_nets).__name__}")
    return step


def to_execution_step(step_or_nets: Any, default_name: str | None = None) -> ExecutionStep:
    """``step_or_nets`` as an ExecutionStep (a ``net_builder.NetBuilder`` becomes a step of its
    children, stopped by its stop blob)."""
    from caffe2.python.net_builder import NetBuilder

    if isinstance(step_or_nets, ExecutionStep):
        return step_or_nets
    stop_blob = None
    if not default_name and hasattr(step_or_nets, "name"):
        default_name = step_or_nets.name
    if isinstance(step_or_nets, NetBuilder):
        stop_blob = step_or_nets._stop_blob
        step_or_nets = step_or_nets.get()
    return execution_step(default_name or "", step_or_nets, should_stop_blob=stop_blob)
