"""asyncnet as an ONNX backend (``onnx.backend.base.Backend``): ``prepare`` imports a model and
creates its nets once in a workspace; ``rep.run(inputs)`` feeds, runs the predict net, fetches.

Options of :func:`prepare` (and :func:`run_model`, :func:`run_node`): ``net_type`` ("simple" or
"async_scheduling", any asyncnet net type), ``num_workers``, ``tensors`` ("numpy" or "torch":
the library the blobs live in while the net runs; results come back as numpy arrays),
``intra_op_threads`` (the BLAS and torch threads of each kernel while the rep is open; see
:class:`AsyncnetRep`). A
"simple" predict net is created as a "straight" one (:mod:`asyncnet.exec.straight`): the simple
net's order, bits and errors, without its per-op dispatch.

    >>> import onnx, onnx.helper as oh, numpy as np
    >>> from asyncnet.interop.onnx import backend
    >>> node = oh.make_node("Mul", ["x", "y"], ["z"])
    >>> backend.run_node(node, [np.float32([1, 2]), np.float32([3, 4])])[0]
    array([3., 8.], dtype=float32)
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from asyncnet.core.workspace import Workspace
from asyncnet.errors import ExecutionError
from asyncnet.interop.onnx._import import OnnxInputError, OnnxModel, load
from asyncnet.ops.onnx_ref import _TORCH_DTYPES, OnnxValue
from asyncnet.tensor.namespace import to_numpy
from asyncnet.tensor.threads import claim_threads

__all__ = ["AsyncnetBackend", "AsyncnetRep", "close_live_reps", "prepare", "run_model", "run_node", "supports_device"]

TENSORS = ("numpy", "torch")
DEFAULT_INTRA_OP_THREADS = 1
_ids = itertools.count()
_live: weakref.WeakSet[AsyncnetRep] = weakref.WeakSet()


class AsyncnetRep(BackendRep):
    """A prepared model: its workspace holds the initializers and the created predict net.

    While open, the rep holds a claim on asyncnet's thread budget
    (:func:`asyncnet.tensor.threads.claim_threads`) of ``intra_op_threads`` BLAS and torch threads
    per kernel (default 1; 0: no claim, the libraries' own settings): with the libraries' defaults, OpenBLAS's and torch's thread teams both
    spin on every core and, on a busy machine, collapse throughput. :meth:`close` (or leaving a
    ``with`` block, or the rep's garbage collection) gives the claim back and closes the nets.

        >>> import onnx.helper as oh, numpy as np
        >>> node = oh.make_node("Relu", ["x"], ["y"])
        >>> graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 1, [2])],
        ...                       [oh.make_tensor_value_info("y", 1, [2])])
        >>> with prepare(oh.make_model(graph), intra_op_threads=1) as rep:
        ...     rep.run(np.float32([-1, 2]))[0]
        array([0., 2.], dtype=float32)
    """

    def __init__(self, model: OnnxModel, tensors: str = "numpy", intra_op_threads: int | None = None):
        if tensors not in TENSORS:
            raise ValueError(f"expected tensors one of {TENSORS}, got {tensors!r}")
        threads = DEFAULT_INTRA_OP_THREADS if intra_op_threads is None else intra_op_threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise ValueError(f"expected intra_op_threads a non-negative int or None, got {intra_op_threads!r}")
        self.model = model
        self.tensors = tensors
        self.workspace = Workspace()
        self._lock = threading.Lock()
        self.workspace.run_net_once(model.init_net)
        if tensors == "torch":
            for name in self.workspace.blobs():
                self.workspace.feed(name, _to_torch(self.workspace.fetch(name)))
        if tensors == "torch":
            model.predict_net = _torch_outputs(model.predict_net)
        self.net = self.workspace.create_net(_straight(model.predict_net))
        self.input_names = [v.name for v in model.inputs]
        self.output_names = [v.name for v in model.outputs]
        self._pack = _outputs_type(self.output_names)
        self._checked: dict[str, tuple[Any, Any, Any]] = {}  # input -> (type, dtype, shape) last accepted
        self.intra_op_threads = threads
        claim = claim_threads(threads=threads) if threads else None
        self._finalizer = weakref.finalize(self, _close, claim, self.net)
        _live.add(self)

    def close(self) -> None:
        """Give the thread claim back and close the nets (idempotent); the rep cannot run after."""
        self._finalizer()
        _live.discard(self)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> AsyncnetRep:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Outputs (numpy arrays, in graph order) for ``inputs``: a list in graph-input order, a
        dict by name, or one array for a one-input model."""
        if not self._finalizer.alive:
            raise ExecutionError(
                f"rep of net {self.model.predict_net.name!r} is closed: expected an open rep (prepare the model again)"
            )
        feeds = self._feeds(inputs)
        self._check(feeds)
        torch_blobs = self.tensors == "torch"
        with self._lock:
            blobs = self.net.blobs
            for name, value in feeds.items():
                value = _as_blob(value)
                blobs[name] = _to_torch(value) if torch_blobs else value
            self.net.run()
            outs = [_host(self.workspace.fetch(n)) for n in self.output_names]
        return self._pack(outs)

    def _check(self, feeds: dict[str, Any]) -> None:
        """The model's input checks, skipped for inputs of the type, dtype and shape last accepted."""
        checked = self._checked
        if len(feeds) == len(self.input_names):
            for name, x in feeds.items():
                seen = checked.get(name)
                if seen is None or type(x) is not seen[0] or getattr(x, "shape", None) != seen[2]:
                    break
                if x.dtype is not seen[1] and x.dtype != seen[1]:
                    break
            else:
                return
        self.model.check_feeds(feeds)
        checked.clear()
        for name, x in feeds.items():
            if hasattr(x, "dtype") and hasattr(x, "shape"):
                checked[name] = (type(x), x.dtype, x.shape)

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        if isinstance(inputs, Mapping):
            return dict(inputs)
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != len(self.input_names):
                raise OnnxInputError(f"expected {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
            return dict(zip(self.input_names, inputs))
        if len(self.input_names) == 1:
            return {self.input_names[0]: inputs}
        raise OnnxInputError(
            f"expected a list or dict of {len(self.input_names)} inputs {self.input_names}, got {type(inputs).__name__}"
        )


def _close(claim: Any, net: Any) -> None:
    if claim is not None:
        claim.release()
    net.close()


def close_live_reps() -> int:
    """Close every rep still open in this process (e.g. between tests); returns how many.

    >>> close_live_reps() >= 0
    True
    """
    reps = list(_live)
    for rep in reps:
        rep.close()
    return len(reps)


def _straight(net: Any) -> Any:
    """A "simple" net as a "straight" one: the same ops in the same order on the calling thread,
    with the same bits and errors, compiled once into straight-line code (no per-op dispatch)."""
    import dataclasses

    return dataclasses.replace(net, type="straight") if net.type == "simple" else net


def _torch_outputs(net: Any) -> Any:
    """The net with its reference ops returning torch tensors (their inputs may be numpy-only dtypes)."""
    import dataclasses

    ops = [
        dataclasses.replace(op, args={**op.args, "torch_outputs": True}) if op.type == "ONNXReference" else op
        for op in net.ops
    ]
    return dataclasses.replace(net, ops=ops)


_TORCH_NP_DTYPES = frozenset(np.dtype(n) for n in _TORCH_DTYPES)


def _to_torch(x: Any) -> Any:
    """A numpy array as a torch CPU tensor sharing its memory, 0-d arrays staying 0-d."""
    if not isinstance(x, np.ndarray) or x.dtype not in _TORCH_NP_DTYPES:
        return x
    import torch

    return torch.from_numpy(x if x.flags.c_contiguous and x.flags.writeable else x.copy())


def _as_blob(x: Any) -> Any:
    if isinstance(x, np.generic):
        return np.asarray(x)
    if x is None or isinstance(x, list):
        return OnnxValue(x)
    return x


def _host(x: Any) -> Any:
    if type(x) is np.ndarray:
        return x
    if isinstance(x, OnnxValue):
        x = x.value
    if isinstance(x, list):
        return [_host(v) for v in x]
    return to_numpy(x)


def _outputs_type(names: Sequence[str]) -> Any:
    """values -> a namedtuple of the outputs by name (a plain tuple for names that cannot be fields)."""
    fields = [n if n.isidentifier() and not n.startswith("_") else f"output_{i}" for i, n in enumerate(names)]
    try:
        cls = namedtuple("Outputs", fields)  # type: ignore[misc]
    except ValueError:  # repeated or keyword names
        return tuple
    return lambda values: cls(*values)


class AsyncnetBackend(Backend):
    """The ONNX backend API on asyncnet's executors (CPU)."""

    @classmethod
    def prepare(
        cls,
        model: Any,
        device: str = "CPU",
        net_type: str = "simple",
        num_workers: int | None = None,
        tensors: str = "numpy",
        check: bool = True,
        optimize: bool = True,
        intra_op_threads: int | None = None,
        **kwargs: Any,
    ) -> AsyncnetRep:
        """Import ``model`` (ModelProto, path or bytes) and create its nets once (``check``: run
        onnx.checker first); ``intra_op_threads``: see :class:`AsyncnetRep`."""
        if not cls.supports_device(device):
            raise ValueError(f"expected device 'CPU', got {device!r}")
        imported = load(
            model, net_type=net_type, num_workers=num_workers, name=f"onnx_{next(_ids)}", check=check, optimize=optimize
        )
        return AsyncnetRep(imported, tensors, intra_op_threads)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(inputs)

    @classmethod
    def run_node(
        cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any
    ) -> tuple[Any, ...]:
        """Run one ``NodeProto`` on ``inputs`` (a list in the node's input order, or a dict)."""
        import onnx.helper

        names = [n for n in node.input if n]
        values = [inputs[n] for n in names] if isinstance(inputs, Mapping) else list(inputs)
        g_in = [
            onnx.helper.make_tensor_value_info(
                n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v)
            )
            for n, v in zip(names, values)
        ]
        g_out = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(
            onnx.helper.make_graph([node], "run_node", g_in, g_out),
            opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)],
        )
        with cls.prepare(model, device, check=False, **kwargs) as rep:  # outputs have no declared types
            return rep.run(dict(zip(names, values)))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = AsyncnetBackend.prepare
run_model = AsyncnetBackend.run_model
run_node = AsyncnetBackend.run_node
supports_device = AsyncnetBackend.supports_device
