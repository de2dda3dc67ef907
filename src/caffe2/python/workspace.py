"""Caffe2's ``caffe2.python.workspace`` on asyncnet's :class:`~asyncnet.Workspace`.

A module-level *current* workspace ("default" at import) and named ones, as in Caffe2: every
function acts on the current one. Nets given as ``core.Net`` objects or ``caffe2_pb2.NetDef``
protos are converted once (when created, or at each ``RunNetOnce``) with Caffe2's leniency
(unknown arguments dropped with a warning); running a created net goes straight to asyncnet.
Return values are Caffe2's (``True`` from ``RunNetOnce``, ``CreateNet``, ``RunNet``, ``FeedBlob``)::

    >>> import numpy as np
    >>> from caffe2.python import workspace
    >>> workspace.SwitchWorkspace("doc", True)
    >>> workspace.FeedBlob("x", np.ones(2, np.float32))
    True
    >>> workspace.Blobs(), workspace.CurrentWorkspace()
    (['x'], 'doc')
    >>> workspace.SwitchWorkspace("default")
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

import asyncnet as an
from asyncnet.core.defs import NetDef
from asyncnet.errors import AsyncNetError, BlobNotFoundError, NetDefinitionError
from caffe2.convert import device_id_of, lenient, op_to_asyncnet, plan_to_asyncnet, to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python import _plan_instances, scope

__all__ = [
    "ApplyTransform",
    "ApplyTransformIfFaster",
    "GetOperatorCost",
    "Blobs",
    "C",
    "CreateBlob",
    "CreateNet",
    "CurrentWorkspace",
    "DeserializeBlob",
    "FeedBlob",
    "FetchBlob",
    "FetchBlobNotFound",
    "FetchBlobs",
    "GetNameScope",
    "GetNetName",
    "GlobalInit",
    "GpuDeviceType",
    "HasBlob",
    "IsImmediate",
    "InferShapesAndTypes",
    "StartImmediate",
    "StopImmediate",
    "ImmediateBlobs",
    "RunOperatorImmediate",
    "FetchImmediate",
    "FeedImmediate",
    "Nets",
    "Predictor",
    "NumCudaDevices",
    "GetCUDAVersion",
    "IsNUMAEnabled",
    "GetNumNUMANodes",
    "GetBlobNUMANode",
    "GetCuDNNVersion",
    "NumGpuDevices",
    "RegisteredOperators",
    "RemoveBlob",
    "ResetBlob",
    "ResetWorkspace",
    "RootFolder",
    "RunNet",
    "RunNetOnce",
    "RunOperatorOnce",
    "RunOperatorsOnce",
    "RunPlan",
    "RunPlanInBackground",
    "SerializeBlob",
    "StringifyProto",
    "SwitchWorkspace",
    "WorkspaceGuard",
    "Workspaces",
    "asyncnet_workspace",
    "blobs",
    "has_cuda_support",
    "has_gpu_support",
]

logger = logging.getLogger("caffe2")

_workspaces: dict[str, an.Workspace] = {"default": an.Workspace()}
_current = "default"
_roots: dict[str, str] = {"default": "."}
# blobs the created nets write: Caffe2 created them (uninitialized) with the net
_declared: dict[str, set[str]] = {}
_child_ids = itertools.count()

has_cuda_support = False
has_hip_support = False
has_gpu_support = False
GpuDeviceType = caffe2_pb2.CUDA
is_asan = False


class FetchBlobNotFound(BlobNotFoundError, RuntimeError):
    """A blob that is not in the workspace (a KeyError as asyncnet raises it, and a RuntimeError
    as Caffe2 raised it)."""


def asyncnet_workspace() -> an.Workspace:
    """The asyncnet :class:`~asyncnet.Workspace` behind the current Caffe2 workspace."""
    return _workspaces[_current]


# -- errors as Caffe2 raised them -------------------------------------------------------------

_dual_errors: dict[type, type] = {}


def _as_runtime_error(err: AsyncNetError) -> BaseException:
    """``err`` made also a RuntimeError (Caffe2 raised RuntimeError for every failed enforce),
    keeping its asyncnet class, message and context."""
    if isinstance(err, RuntimeError):
        return err
    cls = type(err)
    dual = _dual_errors.get(cls)
    if dual is None:
        dual = _dual_errors[cls] = type(cls.__name__, (cls, RuntimeError), {"__module__": cls.__module__})
    try:
        err.__class__ = dual
    except TypeError:
        return err
    return err


def _caffe2_errors(fn: Any) -> Any:
    """Run ``fn``, re-raising asyncnet's errors as :func:`_as_runtime_error` makes them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AsyncNetError as err:
            raise _as_runtime_error(err) from None

    return wrapper


# -- workspaces ------------------------------------------------------------------------------


def SwitchWorkspace(name: str, create_if_missing: bool = False) -> None:
    """Make workspace ``name`` current (created when ``create_if_missing``)."""
    global _current
    if name not in _workspaces:
        if not create_if_missing:
            raise RuntimeError(
                f"Workspace {name!r} does not exist; pass create_if_missing=True to create it "
                f"(existing: {sorted(_workspaces)})"
            )
        _workspaces[name] = an.Workspace()
        _roots[name] = "."
    _current = name


def CurrentWorkspace() -> str:
    """The current workspace's name."""
    return _current


def Workspaces() -> list[str]:
    """The names of every workspace (``workspace.C.Workspace`` objects are not listed)."""
    return sorted(n for n in _workspaces if not n.startswith(("__C_workspace_", "__child_workspace_")))


def ResetWorkspace(root_folder: str | None = None) -> bool:
    """Empty the current workspace (its blobs and nets); returns True."""
    ws = _workspaces[_current]
    ws.reset()
    _declared.pop(_current, None)
    if root_folder is not None:
        if root_folder and not os.path.exists(root_folder):
            os.makedirs(root_folder)
        _roots[_current] = root_folder
    return True


def RootFolder() -> str:
    """The root folder given to :func:`ResetWorkspace` ("." by default, as in Caffe2)."""
    return _roots.get(_current, ".")


@contextlib.contextmanager
def WorkspaceGuard(workspace_name: str) -> Iterator[None]:
    """Run the body in workspace ``workspace_name`` (created if missing), then switch back."""
    current = CurrentWorkspace()
    SwitchWorkspace(workspace_name, True)
    try:
        yield
    finally:
        SwitchWorkspace(current)


def GlobalInit(args: list[str]) -> None:
    """Caffe2's flag parsing: the flags are accepted and logged; asyncnet has no global flags."""
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"GlobalInit takes a list of strings, got {type(args).__name__}")
    if len(args) > 1:
        logger.info("GlobalInit: Caffe2 flags %s have no asyncnet equivalent; ignored", list(args[1:]))


def RegisteredOperators() -> list[str]:
    """The operator types asyncnet runs."""
    return list(an.registered_ops())


_IMMEDIATE_WORKSPACE = "_CAFFE2_IMMEDIATE"
_immediate: dict[str, Any] = {"on": False, "root": ""}
_immediate_root_folder = ""  # the temporary root folder of immediate mode ("" when it is off)


def _in_immediate(func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` with the immediate-mode workspace current."""
    with WorkspaceGuard(_IMMEDIATE_WORKSPACE):
        return func(*args, **kwargs)


def IsImmediate() -> bool:
    """Whether immediate mode is on (see :func:`StartImmediate`)."""
    return bool(_immediate["on"])


def StartImmediate(i_know: bool = False) -> None:
    """Caffe2's immediate mode: from now on each op added to a ``core.Net`` also runs at once, in
    a workspace of its own (``_CAFFE2_IMMEDIATE``, rooted in a fresh temporary folder) that
    :func:`FetchImmediate`, :func:`FeedImmediate` and :func:`ImmediateBlobs` read. A second
    call starts afresh. Example::

        >>> from caffe2.python import core, workspace
        >>> workspace.StartImmediate(i_know=True)
        >>> _ = core.Net("now").ConstantFill([], "seven", shape=[2], value=7.0)
        >>> workspace.FetchImmediate("seven").tolist()
        [7.0, 7.0]
        >>> workspace.StopImmediate()
    """
    StopImmediate()
    root = tempfile.mkdtemp(prefix="caffe2_immediate_")
    _in_immediate(ResetWorkspace, root)
    _immediate.update(on=True, root=root)
    global _immediate_root_folder
    _immediate_root_folder = root
    if not i_know:
        logger.warning("Immediate mode: every op added to a net now also runs; use it to debug only")


def StopImmediate() -> None:
    """Leave immediate mode (nothing to do when it is off): its workspace is emptied and its
    root folder removed."""
    if not _immediate["on"]:
        return
    _in_immediate(ResetWorkspace)
    shutil.rmtree(_immediate["root"], ignore_errors=True)
    _immediate.update(on=False, root="")
    global _immediate_root_folder
    _immediate_root_folder = ""


def ImmediateBlobs() -> list[str]:
    """The blobs of the immediate-mode workspace."""
    return _in_immediate(Blobs)


def RunOperatorImmediate(op: Any) -> None:
    """Run one op in the immediate-mode workspace."""
    _in_immediate(RunOperatorOnce, op)


def FetchImmediate(*args: Any, **kwargs: Any) -> Any:
    """:func:`FetchBlob` in the immediate-mode workspace."""
    return _in_immediate(FetchBlob, *args, **kwargs)


def FeedImmediate(*args: Any, **kwargs: Any) -> bool:
    """:func:`FeedBlob` in the immediate-mode workspace."""
    return _in_immediate(FeedBlob, *args, **kwargs)


def GetNameScope() -> str:
    """The current name scope (``scope.CurrentNameScope()``)."""
    return scope.CurrentNameScope()


def NumCudaDevices() -> int:
    """The number of CUDA devices torch sees (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


NumGpuDevices = NumCudaDevices


def IsNUMAEnabled() -> bool:
    """Whether blobs are placed on NUMA nodes (never here: asyncnet leaves placement to the OS)."""
    return False


def GetNumNUMANodes() -> int:
    """The number of NUMA nodes blobs can be placed on (0: NUMA placement is not supported)."""
    return 0


def GetBlobNUMANode(blob: Any) -> int:
    """The NUMA node of a blob's memory (-1: unknown, NUMA placement is not supported)."""
    if not HasBlob(blob):
        raise FetchBlobNotFound(f"blob {_name(blob)!r} not found in the workspace")
    return -1


_NUMPY_TO_TENSOR_TYPE = {
    "float32": caffe2_pb2.TensorProto.FLOAT,
    "float64": caffe2_pb2.TensorProto.DOUBLE,
    "float16": caffe2_pb2.TensorProto.FLOAT16,
    "int32": caffe2_pb2.TensorProto.INT32,
    "int64": caffe2_pb2.TensorProto.INT64,
    "int16": caffe2_pb2.TensorProto.INT16,
    "int8": caffe2_pb2.TensorProto.INT8,
    "uint8": caffe2_pb2.TensorProto.UINT8,
    "uint16": caffe2_pb2.TensorProto.UINT16,
    "bool": caffe2_pb2.TensorProto.BOOL,
}


def InferShapesAndTypes(
    nets: Any, blob_dimensions: Any = None, nets_proto: bool = False, blob_types: Any = None
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """``({blob: shape}, {blob: TensorProto data type})`` of the blobs the nets make, from input
    shapes ``blob_dimensions`` (and types ``blob_types``, float by default). asyncnet finds them
    by running the ops, one by one, on zero-filled inputs in a scratch workspace (Caffe2 ran
    each op's shape function); an op whose output sizes depend on its input values (such as
    ``GatherRanges``) takes its shapes from a shape function instead, the largest the inputs
    allow. An op that cannot run leaves its outputs out. Example::

        >>> from caffe2.python import core, workspace
        >>> net = core.Net("shapes")
        >>> _ = net.FC(["x", "w", "b"], "y")
        >>> shapes, types = workspace.InferShapesAndTypes([net], {"x": [0, 3], "w": [5, 3], "b": [5]})
        >>> shapes["y"], types["y"] == caffe2_pb2.TensorProto.FLOAT
        ([0, 5], True)
    """
    from caffe2.python._cworkspace import Workspace as _CWorkspace

    ws = _CWorkspace()
    for name, dims in (blob_dimensions or {}).items():
        dtype = _tensor_type_to_numpy((blob_types or {}).get(name, caffe2_pb2.TensorProto.FLOAT))
        ws.feed_blob(str(name), np.zeros([int(d) for d in dims], dtype=dtype))
    for net in nets:
        proto = net if nets_proto else net.Proto()
        for op in proto.op:
            try:
                _infer_operator(ws, op)
            except Exception:  # noqa: BLE001 - an op that cannot run leaves its outputs out of the answer
                continue
    shapes: dict[str, list[int]] = {}
    types: dict[str, int] = {}
    for name in ws.blobs:
        value = ws.fetch_blob(name)
        if isinstance(value, np.ndarray):
            shapes[name] = list(value.shape)
            kind = caffe2_pb2.TensorProto.STRING if value.dtype.kind in "SUO" else None
            types[name] = kind if kind is not None else _NUMPY_TO_TENSOR_TYPE.get(value.dtype.name, 0)
    return shapes, types


def _gather_ranges_shapes(data: np.ndarray, ranges: np.ndarray) -> list[tuple[tuple[int, ...], Any]]:
    """GatherRanges at most gathers all of DATA; one int32 length per example (RANGES' rows)."""
    return [((int(data.size),), data.dtype), ((int(ranges.shape[0]) if ranges.ndim else 0,), np.dtype(np.int32))]


_SHAPE_FUNCTIONS: dict[str, Any] = {"GatherRanges": _gather_ranges_shapes}


def _infer_operator(ws: Any, op: Any) -> None:
    """Write ``op``'s outputs into the scratch workspace ``ws``: zeros shaped by its shape function
    when it has one, else what the op makes of the zero-filled inputs."""
    shape_fn = _SHAPE_FUNCTIONS.get(op.type)
    if shape_fn is None:
        ws._run_operator(op.SerializeToString())
        return
    inputs = [np.asarray(ws.fetch_blob(name)) for name in op.input]
    for name, (shape, dtype) in zip(op.output, shape_fn(*inputs)):
        ws.feed_blob(name, np.zeros(shape, dtype=dtype))


def _tensor_type_to_numpy(data_type: int) -> Any:
    for name, code in _NUMPY_TO_TENSOR_TYPE.items():
        if code == data_type:
            return np.dtype(name)
    return np.dtype(np.float32)


def GetCUDAVersion() -> int:
    """0, as Caffe2 answered when built without CUDA support (``has_cuda_support`` is False)."""
    return 0


def GetCuDNNVersion() -> int:
    """0, as Caffe2 answered when built without CUDA support (``has_cuda_support`` is False)."""
    return 0


# -- blobs -----------------------------------------------------------------------------------

_FEEDABLE_KINDS = "biuf"


def _name(name: Any) -> str:
    if isinstance(name, str):
        return name
    if type(name).__name__ == "BlobReference":
        return str(name)
    if isinstance(name, bytes):
        return name.decode("utf-8")
    raise TypeError(f"expected a blob name (str or BlobReference), got {type(name).__name__}")


def FeedBlob(name: Any, arr: Any, device_option: Any = None) -> bool:
    """Copy ``arr`` (a numpy array, a ``TensorProto``, a string or a torch tensor) into blob ``name``.

    Strings become object arrays; other dtypes must be bool, ints, unsigned ints or floats (a
    complex, datetime or structured array is refused, naming the blob and its dtype)."""
    name = _name(name)
    if isinstance(arr, caffe2_pb2.TensorProto):
        from caffe2.python.utils import Caffe2TensorToNumpyArray

        arr = Caffe2TensorToNumpyArray(arr)
    if device_option is None:
        device_option = scope.CurrentDeviceScope()
    value = _copy_for_feed(name, arr)
    device = None
    if device_option is not None and device_option.device_type == caffe2_pb2.CUDA:
        device = f"cuda:{device_id_of(device_option)}"
    _workspaces[_current].feed(name, value, device=device)
    return True


def _copy_for_feed(name: str, arr: Any) -> Any:
    if isinstance(arr, (str, bytes)):
        return arr
    if type(arr).__module__ == "torch":
        if arr.device.type == "cpu":  # a Caffe2 CPU tensor, as every other fed array (Caffe2 wrapped it)
            arr = arr.detach().numpy()
        else:
            return arr.detach().clone()
    if isinstance(arr, np.generic):
        arr = np.asarray(arr)
    if not isinstance(arr, np.ndarray):
        raise TypeError(
            f"FeedBlob({name!r}): expected a numpy array, a TensorProto or a string, got "
            f"{type(arr).__name__} (Caffe2 feeds only those)"
        )
    if arr.dtype.kind in "SU":
        return arr.astype(object)
    if arr.dtype.kind == "O":
        return arr.copy()
    if arr.dtype.kind not in _FEEDABLE_KINDS or arr.dtype.fields is not None:
        raise TypeError(
            f"FeedBlob({name!r}): unsupported dtype {arr.dtype}; expected bool, int8-64, uint8/16, "
            "float16/32/64 or strings"
        )
    return np.array(arr, copy=True, order="C")


def FetchBlob(name: Any) -> Any:
    """A copy of blob ``name``'s value (numpy for tensors on any device; a string as bytes, as
    Caffe2 gave it: ``FeedBlob("s", "abc")`` then ``FetchBlob("s") == b"abc"``)."""
    name = _name(name)
    ws = _workspaces[_current]
    if not ws.has(name):
        raise FetchBlobNotFound(name, ws.blobs())
    return _as_caffe2_fetch(ws.fetch(name, copy=True, host=True))


def _as_caffe2_fetch(value: Any) -> Any:
    """Caffe2 held strings as C++ std::string: a string blob, and each element of a string
    tensor, came back as bytes (UTF-8 for a fed str)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.ndarray) and value.dtype == object:
        out = np.empty(value.shape, dtype=object)
        for i, v in np.ndenumerate(value):
            out[i] = v.encode("utf-8") if isinstance(v, str) else v
        return out
    return value


def FetchBlobs(names: Any) -> list[Any]:
    """``[FetchBlob(n) for n in names]``."""
    return [FetchBlob(n) for n in names]


def Blobs() -> list[str]:
    """The names of the current workspace's blobs."""
    return _workspaces[_current].blobs()


def HasBlob(name: Any) -> bool:
    """Whether blob ``name`` exists in the current workspace (an output of a created net counts,
    as Caffe2 created it with the net)."""
    name = _name(name)
    return _workspaces[_current].has(name) or name in _declared.get(_current, ())


def CreateBlob(name: Any) -> bool:
    """Make blob ``name`` exist (an empty float32 array when new; an existing blob is kept)."""
    name = _name(name)
    ws = _workspaces[_current]
    if not ws.has(name):
        ws.feed(name, np.empty((0,), np.float32))
    return True


def ResetBlob(name: Any) -> None:
    """Empty blob ``name`` (it keeps existing)."""
    _workspaces[_current].feed(_name(name), np.empty((0,), np.float32))


def RemoveBlob(name: Any) -> None:
    """Delete blob ``name``."""
    _workspaces[_current].remove(_name(name))


def SerializeBlob(name: Any) -> bytes:
    """Blob ``name`` as a serialized ``caffe2_pb2.BlobProto`` (what Save writes for it)."""
    return C.Workspace.current.blobs[_name(name)].serialize(_name(name))


def DeserializeBlob(name: Any, serialized: bytes) -> None:
    """Set blob ``name`` from a serialized ``caffe2_pb2.BlobProto``."""
    C.Workspace.current.create_blob(_name(name)).deserialize(serialized)


class _BlobDict:
    """``workspace.blobs["x"]`` fetches, ``workspace.blobs["x"] = v`` feeds (Caffe2's dict view)."""

    def __getitem__(self, key: Any) -> Any:
        return FetchBlob(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        FeedBlob(key, value)

    def __len__(self) -> int:
        return len(Blobs())

    def __iter__(self) -> Iterator[str]:
        return iter(Blobs())

    def __contains__(self, item: Any) -> bool:
        return HasBlob(item)


blobs = _BlobDict()


# -- nets ------------------------------------------------------------------------------------


def StringifyProto(obj: Any) -> bytes:
    """The serialized protobuf of a message, or of an object with ``Proto()``."""
    if isinstance(obj, (str, bytes)):
        return obj if isinstance(obj, bytes) else obj.encode("utf-8")
    if hasattr(obj, "SerializeToString"):
        return obj.SerializeToString()
    if hasattr(obj, "Proto"):
        return obj.Proto().SerializeToString()
    raise ValueError(f"Unexpected argument to StringifyProto of type {type(obj).__name__}")


def GetNetName(net: Any) -> str:
    """The name of a net given as a name, a ``core.Net`` or a ``caffe2_pb2.NetDef``."""
    if isinstance(net, str):
        return net
    if type(net).__name__ == "Net" and hasattr(net, "Name"):
        return net.Name()
    if isinstance(net, caffe2_pb2.NetDef):
        return net.name
    raise TypeError(f"Not a Net object: {net!r:.80}")


def _net_proto(net: Any) -> Any:
    if isinstance(net, caffe2_pb2.NetDef):
        return net
    if hasattr(net, "Proto"):
        return net.Proto()
    if isinstance(net, (bytes, str)):
        pb = caffe2_pb2.NetDef()
        pb.ParseFromString(net if isinstance(net, bytes) else net.encode("latin-1"))
        return pb
    raise TypeError(f"expected a core.Net or a caffe2_pb2.NetDef, got {type(net).__name__}")


def _as_asyncnet(net: Any) -> NetDef:
    return _expand_load_all(_with_root(lenient(to_asyncnet(_net_proto(net)))))


_ROOTED_REPORTS = ("Print", "Summarize")
_ROOTED_FILES = ("Save", "Load")


def _with_root(nd: NetDef) -> NetDef:
    """Caffe2 resolved report files and relative Save/Load paths against the workspace's root
    folder; asyncnet's ops take the folder as an argument, filled in here."""
    root = RootFolder()
    if root in ("", "."):
        return nd
    for i, op in enumerate(nd.ops):
        if op.type in _ROOTED_REPORTS and op.args.get("to_file") and "root_folder" not in op.args:
            nd.ops[i] = _replace_args(op, root_folder=root)
        elif op.type in _ROOTED_FILES and not op.args.get("absolute_path"):
            fixed = {
                k: os.path.join(root, op.args[k]) for k in ("db",) if op.args.get(k) and not os.path.isabs(op.args[k])
            }
            if op.args.get("dbs"):
                fixed["dbs"] = [p if os.path.isabs(p) else os.path.join(root, p) for p in op.args["dbs"]]
            if fixed:
                nd.ops[i] = _replace_args(op, **fixed)
    return nd


def _expand_load_all(nd: NetDef) -> NetDef:
    """Caffe2's ``Load(load_all=1)`` loads every blob of its databases; asyncnet's ops have fixed
    outputs, so the blobs the databases hold when the net is converted become the outputs."""
    from asyncnet.core.defs import OperatorDef
    from asyncnet.ops.dbio import _blob_name, open_db

    for i, op in enumerate(nd.ops):
        if op.type != "Load" or not op.args.get("load_all") or op.outputs or op.inputs:
            continue
        paths = list(op.args.get("dbs") or []) or ([op.args["db"]] if op.args.get("db") else [])
        if not paths or not all(os.path.exists(p) for p in paths):
            continue
        names: list[str] = []
        try:
            keys = [key for p in paths for key, _ in open_db(p, op.args.get("db_type", ""))]
        except (OSError, ValueError):
            continue  # the op itself reports the unreadable database when it runs
        for key in keys:
            name = _blob_name(key, op.args.get("strip_prefix", ""), op.args.get("add_prefix", ""))
            if name not in names:
                names.append(name)
        args = {**op.args, "load_all": 0}
        nd.ops[i] = OperatorDef(op.type, op.inputs, names, args, op.name, op.device_option, op.control_inputs)
    return nd


def _replace_args(op: Any, **changes: Any) -> Any:
    from asyncnet.core.defs import OperatorDef

    return OperatorDef(
        op.type, op.inputs, op.outputs, {**op.args, **changes}, op.name, op.device_option, op.control_inputs
    )


# Optimizer ops whose state input Caffe2 wrote as float whatever it held (mutable_data<float>()
# re-typed the tensor): {op type: index of the state input}.
_FLOAT_STATE_INPUTS = {"Adagrad": 1, "SparseAdagrad": 1, "RowWiseSparseAdagrad": 1}


def _float_state(nd: NetDef) -> None:
    """An integer array fed as an Adagrad moment (dlrm feeds ``np.full(shape, 0)``) becomes float32
    once, when the net is created: Caffe2's kernels re-typed it to float on their first write."""
    ws = _workspaces[_current]
    for op in nd.ops:
        i = _FLOAT_STATE_INPUTS.get(op.type)
        if i is None or len(op.inputs) <= i or not ws.has(op.inputs[i]):
            continue
        value = ws.fetch(op.inputs[i])
        if isinstance(value, np.ndarray) and value.dtype.kind in "iub":
            ws.feed(op.inputs[i], value.astype(np.float32))


@_caffe2_errors
def CreateNet(net: Any, overwrite: bool = False, input_blobs: Any = None) -> bool:
    """Create ``net`` in the current workspace (checked once, here); returns True."""
    for b in input_blobs or []:
        CreateBlob(b)
    nd = _as_asyncnet(net)
    _check_inputs_exist(nd)
    _float_state(nd)
    _workspaces[_current].create_net(nd, overwrite=overwrite)
    _declared.setdefault(_current, set()).update(o for op in nd.ops for o in op.outputs)
    return True


def _check_inputs_exist(nd: NetDef) -> None:
    """Caffe2 created a net's operators in order, each needing its inputs to exist: fed, written
    by an earlier op of the net, or an output of a net created before."""
    ws = _workspaces[_current]
    known = set(_declared.get(_current, ()))
    for i, op in enumerate(nd.ops):
        for name in op.inputs:
            if name not in known and not ws.has(name):
                raise NetDefinitionError(
                    f"op #{i} ({op.type}) of net {nd.name!r}: Encountered a non-existing input blob: {name!r}",
                    f"ops[{i}].inputs",
                )
        known.update(op.outputs)


@_caffe2_errors
def RunNet(name: Any, num_iter: int = 1, allow_fail: bool = False) -> bool:
    """Run the created net ``name`` (a name, ``core.Net`` or NetDef) ``num_iter`` times; True,
    or False on failure when ``allow_fail``."""
    from caffe2.python import _observers

    try:
        with _observers.observing(GetNetName(name), num_iter):
            _workspaces[_current].run_net(GetNetName(name), num_iter=num_iter)
    except AsyncNetError:
        if allow_fail:
            logger.exception("RunNet(%r) failed", GetNetName(name))
            return False
        raise
    return True


@_caffe2_errors
def RunNetOnce(net: Any) -> bool:
    """Run ``net`` once without keeping it; returns True."""
    nd = _as_asyncnet(net)
    _check_inputs_exist(nd)
    _float_state(nd)
    _workspaces[_current].run_net_once(nd)
    return True


@_caffe2_errors
def RunOperatorOnce(operator: Any) -> bool:
    """Run one ``caffe2_pb2.OperatorDef`` (or its serialized bytes); returns True."""
    if isinstance(operator, bytes):
        operator = caffe2_pb2.OperatorDef.FromString(operator)
    if not isinstance(operator, caffe2_pb2.OperatorDef):
        raise TypeError(f"expected a caffe2_pb2.OperatorDef, got {type(operator).__name__}")
    op = op_to_asyncnet(operator)
    nd = _expand_load_all(_with_root(lenient(NetDef(op.name or op.type, ops=[op]))))
    _workspaces[_current].run_net_once(nd)
    return True


def RunOperatorsOnce(operators: Any) -> bool:
    """Run each operator once, in order; returns True."""
    for op in operators:
        RunOperatorOnce(op)
    return True


def _plan(plan_or_step: Any) -> Any:
    if isinstance(plan_or_step, bytes):
        plan_or_step = caffe2_pb2.PlanDef.FromString(plan_or_step)
    if hasattr(plan_or_step, "Proto"):
        plan_or_step = plan_or_step.Proto()
    if isinstance(plan_or_step, caffe2_pb2.ExecutionStep):
        raise TypeError(
            "RunPlan takes a core.Plan, a core.ExecutionStep or a caffe2_pb2.PlanDef; a bare "
            "ExecutionStep proto has no nets"
        )
    if not isinstance(plan_or_step, caffe2_pb2.PlanDef):
        raise TypeError(f"expected a plan, got {type(plan_or_step).__name__}")
    return plan_to_asyncnet(plan_or_step)


@_caffe2_errors
def RunPlan(plan_or_step: Any) -> bool:
    """Run a ``core.Plan`` (or ``core.ExecutionStep``, or PlanDef) in the current workspace; True."""
    if type(plan_or_step).__name__ == "ExecutionStep" and hasattr(plan_or_step, "Proto"):
        from caffe2.python import core

        plan_or_step = core.Plan(plan_or_step)
    proto = _plan_proto(plan_or_step)
    if proto is not None and any(_plan_instances.needs_walk(s) for s in proto.execution_step):
        _plan_instances.run(proto, _current)
        return True
    _workspaces[_current].run_plan(_plan(plan_or_step))
    return True


def _plan_proto(plan_or_step: Any) -> Any:
    """The ``caffe2_pb2.PlanDef`` of a plan given as a ``core.Plan``, proto or bytes (else None)."""
    if hasattr(plan_or_step, "Proto"):
        plan_or_step = plan_or_step.Proto()
    if isinstance(plan_or_step, bytes):
        plan_or_step = caffe2_pb2.PlanDef.FromString(plan_or_step)
    return plan_or_step if isinstance(plan_or_step, caffe2_pb2.PlanDef) else None


def _new_child(parent: str) -> str:
    """A new anonymous workspace holding the blobs of workspace ``parent`` (the same objects)."""
    key = f"__child_workspace_{next(_child_ids)}__"
    _register_anonymous(key)
    for name in _workspaces[parent].blobs():
        _workspaces[key].feed(name, _workspaces[parent].fetch(name))
    return key


def RunPlanInBackground(plan_or_step: Any) -> Any:
    """Start a plan on a thread of its own; returns a handle with ``is_done()``, ``is_succeeded()``, ``wait()``."""
    if type(plan_or_step).__name__ == "ExecutionStep" and hasattr(plan_or_step, "Proto"):
        from caffe2.python import core

        plan_or_step = core.Plan(plan_or_step)
    return _workspaces[_current].run_plan_async(_plan(plan_or_step))


class Predictor:
    """Caffe2's ``workspace.Predictor``: runs ``init_net`` once in the current workspace, then
    ``run(inputs)`` feeds ``inputs`` (a list, in the order of the predict net's external inputs,
    or a dict by name), runs the predict net and returns its external outputs."""

    def __init__(self, init_net: Any, predict_net: Any):
        self._init = _net_proto(init_net)
        self._net = _net_proto(predict_net)
        self._ws = _current
        with _switched(self._ws):
            RunNetOnce(self._init)
            CreateNet(self._net, overwrite=True)

    def run(self, inputs: Any) -> list[Any]:
        """The predict net's external outputs for ``inputs``."""
        names = list(self._net.external_input)
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(names, inputs))
        if not isinstance(inputs, dict) and len(inputs) > len(names):
            raise ValueError(f"Predictor.run: {len(inputs)} inputs for {len(names)} external inputs {names}")
        with _switched(self._ws):
            for name, value in feeds.items():
                FeedBlob(name, value)
            RunNet(self._net.name)
            return [FetchBlob(o) for o in self._net.external_output]


def Nets() -> list[str]:
    """The names of the nets created in the current workspace."""
    return _workspaces[_current].nets()


def _register_anonymous(key: str) -> None:
    _workspaces[key] = an.Workspace()
    _roots[key] = "."


def _drop_anonymous(key: str) -> None:
    _workspaces.pop(key, None)
    _roots.pop(key, None)
    _declared.pop(key, None)


@contextlib.contextmanager
def _switched(key: str) -> Iterator[None]:
    """Make workspace ``key`` current for the body (``workspace.C.Workspace`` objects)."""
    global _current
    old, _current = _current, key
    try:
        yield
    finally:
        _current = old


class _C:
    """The ``workspace.C`` (Caffe2's pybind module) entries scripts and tests reach for."""

    from caffe2.python._cdb import Mode
    from caffe2.python._cworkspace import Blob, Tensor, Workspace

    @staticmethod
    def create_db(db_type: str, path: str, mode: Any) -> Any:
        """Open a minidb or lmdb database (see ``caffe2.python._cdb``)."""
        from caffe2.python._cdb import create_db

        return create_db(db_type, path, mode)

    has_mkldnn = False
    use_mkldnn = False
    use_ideep = False
    has_fbgemm = False
    is_asan = False
    define_cuda = False

    @staticmethod
    def nearby_opnames(op_type: str) -> list[str]:
        from asyncnet.errors import near_names

        return near_names(op_type, an.registered_ops())

    @staticmethod
    def registered_operators() -> list[str]:
        return RegisteredOperators()


C = _C()


# -- transforms ------------------------------------------------------------------------------


def ApplyTransform(transform_key: str, net: Any) -> Any:
    """``net`` (a ``caffe2_pb2.NetDef``) rewritten by the transform named ``transform_key``
    (``"ConvToNNPack"``); RuntimeError for an unknown name.

        >>> from caffe2.python import core
        >>> net = core.Net("apply_transform_doc"); _ = net.Conv(["x", "w", "b"], "y", kernel=3)
        >>> ApplyTransform("ConvToNNPack", net.Proto()).op[0].engine
        'NNPACK'
    """
    from caffe2.python import _transforms

    return _transforms.apply_transform(transform_key, net)


def ApplyTransformIfFaster(
    transform_key: str,
    net: Any,
    init_net: Any,
    warmup_runs: int = 5,
    main_runs: int = 10,
    improvement_threshold: float = 1.05,
) -> Any:
    """The transformed ``net`` if it runs at least ``improvement_threshold`` times faster than
    ``net`` (median of ``main_runs`` interleaved runs after ``warmup_runs``, both in a scratch
    workspace initialized by ``init_net``), else ``net`` unchanged."""
    from caffe2.python import _transforms

    transformed = _transforms.apply_transform(transform_key, net)
    ws = an.Workspace()
    nets = []
    try:
        ws.run_net_once(_as_asyncnet(init_net))
        nets = [ws.instantiate(_as_asyncnet(n)) for n in (net, transformed)]
        t_before, t_after = _transforms.faster(nets[0].run, nets[1].run, warmup_runs, main_runs)
    finally:
        for n in nets:
            n.close()
        ws.close()
    return transformed if t_after * improvement_threshold < t_before else net


# -- operator cost ---------------------------------------------------------------------------


def GetOperatorCost(operator: Any, blobs: Any) -> tuple[int, int]:
    """``(flops, bytes written)`` of one run of ``operator`` (a ``caffe2_pb2.OperatorDef`` or
    its serialized bytes) on the current shapes of ``blobs`` (its inputs, in the workspace), by
    Caffe2's cost formulas: ``Conv`` counts 2 * N * output pixels * out channels * (W's in
    channels * kernel size; also ``Conv1D``/``Conv2D``/``Conv3D``), ``FC`` 2 * M * N * K.
    Other ops raise RuntimeError.

        >>> import numpy as np
        >>> from caffe2.python import core
        >>> _ = FeedBlob("cost_x", np.zeros((4, 3), np.float32)); _ = FeedBlob("cost_w", np.zeros((5, 3), np.float32))
        >>> GetOperatorCost(core.CreateOperator("FC", ["cost_x", "cost_w", "cost_b"], "y"), ["cost_x", "cost_w"])
        (120, 80)
    """
    if isinstance(operator, bytes):
        operator = caffe2_pb2.OperatorDef.FromString(operator)
    shapes = [tuple(np.shape(FetchBlob(b))) for b in blobs]
    args = {a.name: a for a in operator.arg}
    if operator.type in ("Conv", "Conv1D", "Conv2D", "Conv3D") and len(shapes) >= 2:
        return _conv_cost(shapes[0], shapes[1], args)
    if operator.type == "FC" and len(shapes) >= 2:
        axis = args["axis"].i if "axis" in args else 1
        m, k = int(np.prod(shapes[0][:axis])), int(np.prod(shapes[0][axis:]))
        n = shapes[1][0]
        return 2 * m * n * k, m * n * 4
    raise RuntimeError(f"GetOperatorCost: no cost formula for {operator.type} with inputs of shapes {shapes}")


def _conv_cost(x: tuple[int, ...], w: tuple[int, ...], args: dict[str, Any]) -> tuple[int, int]:
    nhwc = "order" in args and args["order"].s == b"NHWC"
    spatial_in = x[1:-1] if nhwc else x[2:]
    kernel = w[1:-1] if nhwc else w[2:]
    in_channels = w[-1] if nhwc else w[1]
    nd = len(spatial_in)

    def each(name: str, default: int) -> list[int]:
        if name in args and args[name].HasField("i"):
            return [args[name].i] * nd
        if nd == 2 and f"{name}_h" in args:
            return [args[f"{name}_h"].i, args[f"{name}_w"].i if f"{name}_w" in args else default]
        plural = f"{name}s"
        if plural in args and args[plural].ints:
            return list(args[plural].ints)
        return [default] * nd

    strides, dilations = each("stride", 1), each("dilation", 1)
    pads = [p for p in each("pad", 0)] * 2
    for k, side in enumerate(("pad_t", "pad_l")[:nd]):
        pads[k] = args[side].i if side in args else pads[k]
    for k, side in enumerate(("pad_b", "pad_r")[:nd]):
        pads[nd + k] = args[side].i if side in args else pads[nd + k]
    out = [
        (size + pads[k] + pads[nd + k] - (dilations[k] * (kernel[k] - 1) + 1)) // strides[k] + 1
        for k, size in enumerate(spatial_in)
    ]
    pixels = int(np.prod(out))
    flops = 2 * x[0] * pixels * w[0] * in_channels * int(np.prod(kernel))
    return flops, x[0] * w[0] * pixels * 4
