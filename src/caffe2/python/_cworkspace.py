"""``workspace.C``: the parts of Caffe2's pybind module scripts and tests use, on asyncnet.

``C.Workspace()`` is a workspace object of its own (not the module's current one) with Caffe2's
``blobs`` / ``nets`` dicts, ``create_blob``, ``create_net`` and ``run``; a blob has ``fetch``,
``feed``, ``tensor``, ``serialize`` and ``deserialize``::

    >>> import numpy as np
    >>> from caffe2.python import workspace
    >>> ws = workspace.C.Workspace()
    >>> ws.create_blob("x").feed(np.arange(3, dtype=np.float32))
    True
    >>> ws.blobs["x"].fetch()
    array([0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from asyncnet.ops._tensorproto import decode_blob, encode_blob, tensor_from_fields
from caffe2.proto import caffe2_pb2

_ids = itertools.count()


class Tensor:
    """A tensor blob's live array: ``data`` is the stored array (edits change the blob)."""

    def __init__(self, ws: Workspace, name: str):
        self._ws, self._name = ws, name

    @property
    def data(self) -> Any:
        return self._ws._an().fetch(self._name)

    @property
    def _shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.data))

    def init(self, dims: Any, caffe_type: int) -> None:
        """Replace the blob with zeros of shape ``dims`` and Caffe2 type ``caffe_type``
        (a RuntimeError for strings, as in Caffe2)."""
        from caffe2.python.utils import caffe2_dtype_to_numpy

        try:
            dtype = caffe2_dtype_to_numpy(caffe_type)
        except TypeError as err:
            raise RuntimeError(f"Tensor.init: {err}") from None
        self._ws._an().feed(self._name, np.zeros(list(dims), dtype))

    def feed(self, value: Any) -> bool:
        return self._ws.feed_blob(self._name, value)

    def fetch(self) -> Any:
        return self._ws.fetch_blob(self._name)


class Blob:
    """One blob of a :class:`Workspace`."""

    def __init__(self, ws: Workspace, name: str):
        self._ws, self._name = ws, name

    def fetch(self) -> Any:
        return self._ws.fetch_blob(self._name)

    def feed(self, value: Any, device_option: Any = None) -> bool:
        return self._ws.feed_blob(self._name, value, device_option)

    def tensor(self) -> Tensor:
        return Tensor(self._ws, self._name)

    def is_tensor(self) -> bool:
        return isinstance(self._ws._an().fetch(self._name), np.ndarray)

    def serialize(self, name: str) -> bytes:
        """This blob as a serialized ``BlobProto`` called ``name``."""
        value = self._ws._an().fetch(self._name)
        if isinstance(value, (bytes, str)):
            content = value.encode() if isinstance(value, str) else value
            return caffe2_pb2.BlobProto(name=name, type="std::string", content=content).SerializeToString()
        return encode_blob(name, np.asarray(value))

    def deserialize(self, serialized: bytes) -> None:
        """Set this blob from a serialized ``BlobProto``."""
        d = decode_blob(serialized)
        value = tensor_from_fields(d["tensor"]) if d["tensor"] is not None else d["content"]
        self._ws._an().feed(self._name, value)


class NetHandle:
    """A created net of a :class:`Workspace`: ``run()`` runs it once."""

    def __init__(self, ws: Workspace, name: str):
        self._ws, self._name = ws, name

    def run(self) -> bool:
        return self._ws._run_created(self._name)

    def name(self) -> str:
        return self._name


class _WorkspaceType(type):
    @property
    def current(cls) -> Workspace:
        """The module's current workspace (follows ``SwitchWorkspace``)."""
        return cls(_follow_current=True)


class Workspace(metaclass=_WorkspaceType):
    """A workspace of its own, with Caffe2's pybind ``Workspace`` methods
    (``Workspace.current`` is the module's current workspace)."""

    def __init__(self, _follow_current: bool = False) -> None:
        from caffe2.python import workspace

        self._key: str | None = None
        self._owned = not _follow_current
        if self._owned:
            self._key = f"__C_workspace_{next(_ids)}__"
            workspace._register_anonymous(self._key)

    @classmethod
    def _bound(cls, key: str) -> Workspace:
        """A view of the existing workspace ``key`` (not dropped with the view)."""
        view = cls(_follow_current=True)
        view._key = key
        return view

    def __del__(self) -> None:
        if not getattr(self, "_owned", False):
            return
        try:
            from caffe2.python import workspace

            workspace._drop_anonymous(self._key)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _name(self) -> str:
        from caffe2.python import workspace

        return workspace._current if self._key is None else self._key

    def _an(self) -> Any:
        from caffe2.python import workspace

        return workspace._workspaces[self._name()]

    @contextlib.contextmanager
    def _current(self) -> Iterator[Any]:
        from caffe2.python import workspace

        with workspace._switched(self._name()):
            yield workspace

    @property
    def blobs(self) -> dict[str, Blob]:
        """{name: Blob}, the outputs of created nets included (Caffe2 created them with the net)."""
        from caffe2.python import workspace

        names = set(self._an().blobs()) | workspace._declared.get(self._name(), set())
        return {n: Blob(self, n) for n in sorted(names)}

    @property
    def nets(self) -> dict[str, NetHandle]:
        return {n: NetHandle(self, n) for n in self._an().nets()}

    def create_blob(self, name: str) -> Blob:
        with self._current() as ws:
            ws.CreateBlob(name)
        return Blob(self, name)

    def has_blob(self, name: str) -> bool:
        return self._an().has(name)

    def fetch_blob(self, name: str) -> Any:
        with self._current() as ws:
            return ws.FetchBlob(name)

    def feed_blob(self, name: str, value: Any, device_option: Any = None) -> bool:
        with self._current() as ws:
            return ws.FeedBlob(name, value, device_option)

    def remove_blob(self, name: str) -> None:
        self._an().remove(name)

    def create_net(self, net: Any, overwrite: bool = False) -> NetHandle:
        """Create ``net`` (a ``core.Net`` or NetDef); a net of that name is an error unless ``overwrite``."""
        proto = net.Proto() if hasattr(net, "Proto") else net
        if not isinstance(proto, caffe2_pb2.NetDef):
            raise TypeError(f"create_net takes a core.Net or a NetDef, got {type(net).__name__}")
        with self._current() as ws:
            ws.CreateNet(proto, overwrite)
        return NetHandle(self, proto.name)

    def _run_created(self, name: str) -> bool:
        with self._current() as ws:
            return ws.RunNet(name)

    def run(self, obj: Any) -> None:
        """Run an operator, a net (not kept) or a plan given as a proto or a ``core`` object."""
        proto = obj.Proto() if hasattr(obj, "Proto") else obj
        with self._current() as ws:
            if isinstance(proto, caffe2_pb2.OperatorDef):
                ws.RunOperatorOnce(proto)
            elif isinstance(proto, caffe2_pb2.NetDef):
                ws.RunNetOnce(proto)
            elif isinstance(proto, caffe2_pb2.PlanDef):
                ws.RunPlan(proto)
            else:
                raise TypeError(f"run takes an operator, a net or a plan, got {type(obj).__name__}")

    def _run_net(self, serialized: bytes) -> None:
        self.run(caffe2_pb2.NetDef.FromString(serialized))

    def _run_operator(self, serialized: bytes) -> None:
        self.run(caffe2_pb2.OperatorDef.FromString(serialized))

    def _run_plan(self, serialized: bytes) -> None:
        self.run(caffe2_pb2.PlanDef.FromString(serialized))
