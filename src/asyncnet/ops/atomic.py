"""Atomic operators with Caffe2's semantics: mutexes, atomic fetch-add, atomic bools, iteration counters,
and Caffe2's count-down counters (``CreateCounter``, ``CountDown``, ``CountUp``, ...).

Mutex and atomic-bool blobs are opaque objects (:class:`asyncnet.atomic.Mutex`,
:class:`asyncnet.atomic.AtomicBool`; the shared-memory versions are accepted too). None of
these ops has a gradient.

Why the counters are updated *in place*: an executor gathers an op's inputs before calling it
and stores its outputs after it returns, both outside the op's mutex. If ``AtomicFetchAdd``
returned a fresh array, two nets could read the same old array and the later store would
lose the other's update. So the op reads and writes the existing array's memory while it
holds the mutex and returns a view of that same memory; whatever object the blob holds, every
net then updates one buffer. (Caffe2 does the same: the output tensor reuses the input's
storage.)

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> init = an.Net("init")
    >>> _ = init.CreateMutex([], "mutex")
    >>> _ = init.ConstantFill([], "count", shape=[], value=10, dtype="int32")
    >>> _ = init.ConstantFill([], "step", shape=[], value=-1, dtype="int32")
    >>> ws.run_net_once(init)
    >>> net = an.Net("tick")
    >>> _ = net.AtomicFetchAdd(["mutex", "count", "step"], ["count", "fetched"])
    >>> _ = ws.create_net(net)
    >>> ws.run_net("tick", num_iter=3)
    >>> int(ws.fetch("count")), int(ws.fetch("fetched"))
    (7, 8)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from asyncnet.atomic._intmath import wrap
from asyncnet.atomic.local import AtomicBool, AtomicInt, Mutex
from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_op
from asyncnet.ops.caffe2_stats import DEFAULT as STATS
from asyncnet.ops.caffe2_stats import atomic_iter_key
from asyncnet.tensor.namespace import is_array, namespace

__all__ = ["increment_iter"]


def _is(x: Any, local: type, shared_name: str) -> bool:
    """``x`` is a ``local`` primitive or the shared one named ``shared_name``; the shared module is
    only consulted once loaded (no shared primitive exists before it is)."""
    if isinstance(x, local):
        return True
    shared = sys.modules.get("asyncnet.atomic.shared")
    return shared is not None and isinstance(x, getattr(shared, shared_name))


_INT64_MAX = np.iinfo(np.int64).max
_INT64 = np.dtype(np.int64)


def _mutex(ctx: Any, x: Any, i: int) -> Any:
    if not _is(x, Mutex, "SharedMutex"):
        raise TypeError(
            f"expected a Mutex (made by CreateMutex) in input {i} {ctx.op.inputs[i]!r}, got {type(x).__name__}"
        )
    return x


def _atomic_bool(ctx: Any, x: Any, i: int) -> Any:
    if not _is(x, AtomicBool, "SharedAtomicBool"):
        raise TypeError(
            f"expected an AtomicBool (made by CreateAtomicBool) in input {i} {ctx.op.inputs[i]!r}, "
            f"got {type(x).__name__}"
        )
    return x


def _tensor(ctx: Any, x: Any, i: int, dtype: type, what: str = "input") -> np.ndarray:
    """``x`` if it is a numpy array of ``dtype`` with at least one element, else a clear error."""
    if type(x) is np.ndarray and x.dtype.type is dtype and x.size:  # the hot path: no string work
        return x
    name = ctx.op.inputs[i] if what == "input" else ctx.op.outputs[i]
    kind = str(np.dtype(dtype))
    kind = ("an " if kind[0] in "aeiou" else "a ") + kind
    if not isinstance(x, np.ndarray):
        raise TypeError(f"expected {kind} tensor in {what} {i} {name!r}, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"expected {kind} tensor in {what} {i} {name!r}, got dtype {x.dtype}")
    if x.size == 0:
        raise ValueError(f"expected at least one element in {what} {i} {name!r}, got shape {x.shape}")
    return x


def _element0(ctx: Any, x: np.ndarray, i: int) -> np.ndarray:
    """A writable 0-d view of ``x``'s first element (shares memory with ``x``)."""
    if not x.flags.writeable:
        raise ValueError(f"input {i} {ctx.op.inputs[i]!r} is updated in place but its array is read-only")
    return x if x.ndim == 0 else x[(slice(0, 1),) * x.ndim].reshape(())


def _fetch_add(
    ctx: Any, mutex: Any, value: Any, increment: Any, dtype: type, bits: int
) -> tuple[np.ndarray, np.ndarray]:
    mutex = _mutex(ctx, mutex, 0)
    value = _tensor(ctx, value, 1, dtype)
    inc = int(_tensor(ctx, increment, 2, dtype).flat[0])
    inplace = ctx.op.outputs[0] == ctx.op.inputs[1]
    target = _element0(ctx, value, 1) if inplace else None
    half = 1 << (bits - 1)
    with mutex:
        fetched = int(target[()] if target is not None else value.flat[0])
        total = fetched + inc
        if not -half <= total < half:
            total = wrap(total, bits)
        if target is not None:
            target[()] = total
            new = target
        else:
            new = np.array(total, dtype=dtype)
    return new, np.array(fetched, dtype=dtype)


_FETCH_ADD_DOC = (
    "Under the mutex (input 0): fetched_value = mut_value[0]; mut_value = mut_value[0] + increment[0]. "
    "{width} scalars, both outputs 0-d; output 0 may be input 1 in place (the normal use, atomic "
    "across concurrent nets). Overflow wraps around (two's complement)."
)


@register_op(
    "AtomicFetchAdd",
    inputs=3,
    outputs=2,
    allow_inplace={1: 0},
    doc=_FETCH_ADD_DOC.format(width="int32"),
    inputs_doc=("mutex", "mut_value (int32)", "increment (int32)"),
    outputs_doc=("mut_value (int32, 0-d)", "fetched_value (int32, 0-d)"),
)
def atomic_fetch_add(ctx: Any, mutex: Any, value: Any, increment: Any) -> tuple[np.ndarray, np.ndarray]:
    return _fetch_add(ctx, mutex, value, increment, np.int32, 32)


@register_op(
    "AtomicFetchAdd64",
    inputs=3,
    outputs=2,
    allow_inplace={1: 0},
    doc=_FETCH_ADD_DOC.format(width="int64"),
    inputs_doc=("mutex", "mut_value (int64)", "increment (int64)"),
    outputs_doc=("mut_value (int64, 0-d)", "fetched_value (int64, 0-d)"),
)
def atomic_fetch_add64(ctx: Any, mutex: Any, value: Any, increment: Any) -> tuple[np.ndarray, np.ndarray]:
    return _fetch_add(ctx, mutex, value, increment, np.int64, 64)


@register_op(
    "CreateMutex", inputs=0, outputs=1, doc="Store a new, unlocked Mutex in the output blob.", outputs_doc=("mutex",)
)
def create_mutex(ctx: Any) -> Mutex:
    return Mutex()


@register_op(
    "CreateAtomicBool",
    inputs=0,
    outputs=1,
    doc="Store a new AtomicBool, initially false.",
    outputs_doc=("atomic_bool",),
)
def create_atomic_bool(ctx: Any) -> AtomicBool:
    return AtomicBool(False)


@register_op(
    "ConditionalSetAtomicBool",
    inputs=2,
    outputs=0,
    doc="If condition[0] is true, set the atomic bool to true; never resets it to false.",
    inputs_doc=("atomic_bool", "condition (bool tensor)"),
)
def conditional_set_atomic_bool(ctx: Any, flag: Any, condition: Any) -> None:
    flag = _atomic_bool(ctx, flag, 0)
    if _tensor(ctx, condition, 1, np.bool_).flat[0]:
        flag.store(True)
    return None


@register_op(
    "CheckAtomicBool",
    inputs=1,
    outputs=1,
    doc="Copy the atomic bool's current value into a bool tensor of shape [1].",
    inputs_doc=("atomic_bool",),
    outputs_doc=("value (bool, shape [1])",),
)
def check_atomic_bool(ctx: Any, flag: Any) -> np.ndarray:
    return np.array([_atomic_bool(ctx, flag, 0).load()], dtype=np.bool_)


def increment_iter(counter: np.ndarray) -> None:
    """Add one to an int64 iteration counter in place, with Caffe2's three checks.

    >>> it = np.zeros(1, np.int64); increment_iter(it); it
    array([1])
    """
    size = (
        counter.size if isinstance(counter, np.ndarray) else counter.numel()
    )  # numpy array (or subclass) or torch tensor
    if size != 1:
        raise ValueError(
            f"The output of IterOp exists, but not of the right size (it has shape {tuple(counter.shape)}, expected 1 element)."
        )
    cell = counter.reshape(-1)  # a view (numpy array or torch tensor): size-1 arrays reshape without a copy
    value = int(cell[0])
    if value < 0:
        raise ValueError(f"Previous iteration number is negative ({value}).")
    if value >= _INT64_MAX:
        raise ValueError(f"Overflow will happen! (iteration number {value} is the int64 maximum)")
    cell[0] = value + 1


def _iter_tensor(ctx: Any, x: Any, i: int, what: str) -> np.ndarray:
    name = ctx.op.inputs[i] if what == "input" else ctx.op.outputs[i]
    if not is_array(x):
        raise TypeError(f"expected an int64 iteration tensor in {what} {i} {name!r}, got {type(x).__name__}")
    if str(x.dtype).rpartition(".")[2] != "int64":
        raise TypeError(f"expected an int64 iteration tensor in {what} {i} {name!r}, got dtype {x.dtype}")
    if not namespace(ctx, x).writable(x):
        raise ValueError(f"{what} {i} {name!r} is updated in place but its array is read-only")
    return x


def _iter_plain(ctx: Any, counter: np.ndarray) -> np.ndarray:
    """Iter on a numpy int64 [1] counter: increment_iter's checks and write (a read-only counter
    raises in the write, before changing anything)."""
    value = counter.item(0)
    if not 0 <= value < _INT64_MAX:
        increment_iter(counter)  # raises Caffe2's message
    counter[0] = value + 1
    return counter


def _narrow_counter(x: Any) -> bool:
    """Whether ``x`` is a numpy integer array of a dtype other than int64 (Iter's widen_to_int64)."""
    return isinstance(x, np.ndarray) and x.dtype.kind in "iu" and x.dtype != np.int64


def _specialize_iter(ctx: Any, *inputs: Any) -> Any:
    ok = len(inputs) == 1 and type(inputs[0]) is np.ndarray and inputs[0].dtype is _INT64 and inputs[0].shape == (1,)
    return _iter_plain if ok else None


@register_op(
    "Iter",
    inputs=(0, 1),
    outputs=1,
    enforce_inplace={0: 0},
    devices=("cpu", "cuda"),
    specialize=_specialize_iter,
    args=[
        Arg(
            "widen_to_int64",
            bool,
            False,
            "a one-element counter of another integer dtype is replaced by an int64 counter of its "
            "value, then incremented (Caffe2's Iter re-typed such a blob to int64)",
        )
    ],
    doc="Increment an int64 counter in place; created at 0 (shape [1]) if absent, so the first value is 1.",
    inputs_doc=("iter (int64, optional; same blob as the output)",),
    outputs_doc=("iter (int64)",),
)
def iter_op(ctx: Any, *inputs: Any) -> np.ndarray:
    if inputs and ctx.args["widen_to_int64"] and _narrow_counter(inputs[0]):
        counter = inputs[0].astype(np.int64)
        increment_iter(counter)
        return counter
    if inputs and type(inputs[0]) is np.ndarray and inputs[0].dtype is _INT64 and inputs[0].flags.writeable:
        counter = inputs[0]  # a host counter: _iter_tensor's checks in one line
        if counter.shape == (1,):
            return _iter_plain(ctx, counter)
        increment_iter(counter)
        return counter
    if inputs:
        counter = _iter_tensor(ctx, inputs[0], 0, "input")
    else:
        current = ctx.output(0)
        counter = np.zeros(1, np.int64) if current is None else _iter_tensor(ctx, current, 0, "output")
    increment_iter(counter)
    return counter


@register_op(
    "AtomicIter",
    inputs=2,
    outputs=1,
    enforce_inplace={1: 0},
    devices=("cpu", "cuda"),
    doc="Under the mutex (input 0), increment the int64 counter in input 1 in place (output 0 is the same blob); "
    "counts the run in the process's stat registry (key atomic_iter/stats/<iter>/num_iter, see StatRegistryExport).",
    inputs_doc=("mutex", "iter (int64, 1 element)"),
    outputs_doc=("iter (int64)",),
)
def atomic_iter(ctx: Any, mutex: Any, counter: Any) -> np.ndarray:
    mutex = _mutex(ctx, mutex, 0)
    counter = _iter_tensor(ctx, counter, 1, "input")
    with mutex:
        increment_iter(counter)
    STATS.add(atomic_iter_key(ctx.op.inputs[1]), 1)
    return counter


# -- Caffe2's counters (counter_ops.cc): an atomic int64 that counts down to "done" -------------

_INIT_COUNT = Arg("init_count", int, 0, "the counter's value")


def _counter(ctx: Any, x: Any) -> Any:
    if not _is(x, AtomicInt, "SharedAtomicInt"):
        raise TypeError(
            f"expected a counter (made by CreateCounter) in input 0 {ctx.op.inputs[0]!r}, got {type(x).__name__}"
        )
    return x


def _validate_init_count(op: OperatorDef) -> None:
    v = op.args.get("init_count", 0)
    if isinstance(v, int) and not -(2**63) <= v < 2**63:
        raise ValueError(f"{op.type}: init_count {v} does not fit a signed 64-bit integer (Caffe2's int64 argument)")


@register_op(
    "CreateCounter",
    inputs=0,
    outputs=1,
    args=[_INIT_COUNT],
    outputs_doc=("counter",),
    validate=_validate_init_count,
    doc="Store a new count-down counter (a 64-bit AtomicInt) holding init_count.",
)
def create_counter(ctx: Any) -> AtomicInt:
    return AtomicInt(ctx.args["init_count"], bits=64)


@register_op(
    "ResetCounter",
    inputs=1,
    outputs=(0, 1),
    args=[_INIT_COUNT],
    inputs_doc=("counter",),
    validate=_validate_init_count,
    outputs_doc=("previous value (int64, 0-d, optional)",),
    doc="Set the counter to init_count; the optional output gets the value it had.",
)
def reset_counter(ctx: Any, counter: Any) -> np.ndarray | None:
    previous = _counter(ctx, counter).exchange(ctx.args["init_count"])
    return np.array(previous, np.int64) if ctx.op.outputs else None


@register_op(
    "CountDown",
    inputs=1,
    outputs=1,
    inputs_doc=("counter",),
    outputs_doc=("done (bool, 0-d)",),
    doc="Decrement the counter (also below 0, as Caffe2); done is true when it was already <= 0.",
)
def count_down(ctx: Any, counter: Any) -> np.ndarray:
    return np.array(_counter(ctx, counter).fetch_add(-1) <= 0)


@register_op(
    "CheckCounterDone",
    inputs=1,
    outputs=1,
    inputs_doc=("counter",),
    outputs_doc=("done (bool, 0-d)",),
    doc="done = the counter is <= 0.",
)
def check_counter_done(ctx: Any, counter: Any) -> np.ndarray:
    return np.array(_counter(ctx, counter).load() <= 0)


@register_op(
    "CountUp",
    inputs=1,
    outputs=1,
    inputs_doc=("counter",),
    outputs_doc=("previous value (int64, 0-d)",),
    doc="Increment the counter; the output gets the value from before, atomically.",
)
def count_up(ctx: Any, counter: Any) -> np.ndarray:
    return np.array(_counter(ctx, counter).fetch_add(1), np.int64)


@register_op(
    "RetrieveCount",
    inputs=1,
    outputs=1,
    inputs_doc=("counter",),
    outputs_doc=("count (int64, 0-d)",),
    doc="The counter's current value.",
)
def retrieve_count(ctx: Any, counter: Any) -> np.ndarray:
    return np.array(_counter(ctx, counter).load(), np.int64)
