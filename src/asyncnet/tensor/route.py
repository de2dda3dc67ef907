"""Which library's kernel an op runs on the CPU: each op on the library measured faster for it.

Policy
------
A blob keeps its library (numpy array or torch tensor) whatever kernel computes it; on the CPU
the two libraries share memory without a copy (``tensor.numpy()`` and ``torch.from_numpy``), so
an op may run either library's kernel and give back its inputs' library. Which one is faster
depends on the op and the size: on the zoo's train nets (batch 32-128, layers of 8-128 units)
torch's CPU kernels cost 1.5-10x numpy's for the same op (``benchmarks/op_libraries.py``: the
fixed cost of torch's dispatcher, and slow paths for comparisons, type promotion and small
reductions), while numpy's convolution and LSTM lose to torch's native ones on other shapes
(those two choose per call, in :mod:`asyncnet.ops.conv` and :mod:`asyncnet.ops.recurrent`).

So on the CPU an op whose type is in :data:`NUMPY_WINS` and whose array inputs are all plain
torch CPU tensors (:func:`~asyncnet.tensor.namespace.cpu_tensors`: no autograd, no subclass)
runs its numpy kernel on zero-copy numpy views of them; its numpy results come back as torch
tensors over the same memory, and a result that *is* one of the views (an in-place update)
comes back as the input tensor itself, so shared parameters (Hogwild) stay shared. Inputs that
mix libraries, live on a GPU, need autograd or have a dtype numpy lacks (bfloat16) take the
op's own kernel, with its checks and messages. Results are then the numpy backend's bits.

Executors install the routing once, when a net is created and torch is already imported
(:func:`route_operators`); a net of numpy arrays pays one type test per input of a routed op.
:data:`ENABLED` (also the environment variable ``ASYNCNET_ROUTE=0``) turns it off, for
measuring each library's own kernels.

    >>> import numpy as np
    >>> k = routed(lambda ctx, x: x * 2)
    >>> k(None, np.ones(2)).tolist()
    [2.0, 2.0]
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from asyncnet.tensor.namespace import loaded_torch

__all__ = [
    "NUMPY_WINS",
    "HOST_INPUTS",
    "ENABLED",
    "routed",
    "route_operators",
    "is_routed",
    "as_tensor",
    "numpy_view",
    "fed_tensor",
    "SYNC_OPS",
    "on_tensors",
    "shadow_cell",
    "version",
]

ENABLED = os.environ.get("ASYNCNET_ROUTE", "1") != "0"

#: Op types whose numpy kernel beats torch's on CPU tensors of the zoo's sizes (measured with
#: ``benchmarks/op_libraries.py``; see docs/performance.md). Pure math on arrays only: ops that
#: move data between devices, synchronise, or hold opaque state keep their own kernels.
NUMPY_WINS = frozenset(
    {
        "FC",
        "FCGradient",
        "Relu",
        "ReluGradient",
        "Sigmoid",
        "SigmoidGradient",
        "Tanh",
        "TanhGradient",
        "Softmax",
        "SoftmaxGradient",
        "SoftmaxWithLoss",
        "SoftmaxWithLossGradient",
        "SigmoidCrossEntropyWithLogits",
        "SigmoidCrossEntropyWithLogitsGradient",
        "AveragedLoss",
        "AveragedLossGradient",
        "ConstantFill",
        "Flatten",
        "ResizeLike",
        "Reshape",
        "Transpose",
        "Shape",
        "Concat",
        "Split",
        "Slice",
        "SliceGradient",
        "Sum",
        "Scale",
        "BatchMatMul",
        "MatMul",
        "MaxPool",
        "MaxPoolGradient",
        "AveragePool",
        "AveragePoolGradient",
        "SGD",
        "Adam",
        "MomentumSGDUpdate",
        "LearningRate",
        "Iter",
        "Conv",
        "ConvGradient",
        "LSTM",
        "LSTMGradient",
        "SparseLengthsSum",
        "SparseLengthsSumGradient",
        "ScatterWeightedSum",
        "SparseToDense",
        "SparseSGDFusedWithSparseLengthsSumGradient",
        "SparseAdagradFusedWithSparseLengthsSumGradient",
        "RowWiseSparseAdagradFusedWithSparseLengthsSumGradient",
        "Accuracy",
    }
)

#: inputs that are host values whatever the blobs' library (the learning rate, the iteration
#: counter): a numpy array there does not stop an optimizer from taking its numpy kernel
HOST_INPUTS = {
    "SGD": frozenset({2}),
    "MomentumSGDUpdate": frozenset({2}),
    "Adam": frozenset({4, 5}),
    "ScatterWeightedSum": frozenset(range(1, 3 * 64, 3)),
    "SparseSGDFusedWithSparseLengthsSumGradient": frozenset({3}),
    "SparseAdagradFusedWithSparseLengthsSumGradient": frozenset({4}),
    "RowWiseSparseAdagradFusedWithSparseLengthsSumGradient": frozenset({4}),
}  # Weight_0, Weight_1, ... (1 element each)

#: Ops that hand their blobs to a gradient sync, whatever object it is: their kernel must see the
#: blobs' own library. They keep their kernel; inside a whole run on numpy views
#: (:mod:`asyncnet.tensor.shadow`) :func:`on_tensors` gives it the tensors the run stores afterwards.
SYNC_OPS = frozenset({"Allreduce", "AllreduceStart", "AllreduceWait"})

_ndarray = np.ndarray
_TENSOR: Any = None
_from_numpy: Any = None


def is_routed(fn: Callable[..., Any]) -> bool:
    """True for a kernel wrapped by :func:`routed`."""
    return getattr(fn, "__wrapped__", None) is not None and getattr(fn, "_asyncnet_routed", False)


def routed(fn: Callable[..., Any], host_inputs: frozenset[int] = frozenset()) -> Callable[..., Any]:
    """``fn(ctx, *inputs)`` that runs on numpy views when every array input is a plain torch CPU
    tensor, and returns torch tensors over the results' memory (see the module docstring).

    Views cost ~1.3 us to make and a tensor ~1.2 us to wrap, as much as a small op: a tensor this
    module made keeps its array (:data:`_MADE`, for the tensor's lifetime), and each op keeps the
    view of the tensor it last read per input (parameters are the same tensor every step).
    Numpy arrays at ``host_inputs`` (an optimizer's learning rate) are passed on as they are."""
    seen: dict[
        int, tuple[Any, Any, int, int | None]
    ] = {}  # input index -> (tensor, its view, its data pointer, version)

    def kernel(ctx: Any, *xs: Any) -> Any:
        t = _TENSOR
        if t is None or not ENABLED:
            return fn(ctx, *xs)
        views = None
        for i, x in enumerate(xs):
            tx = type(x)
            if tx is t:
                if views is None:
                    views = list(xs)
                if x.requires_grad:
                    return fn(ctx, *xs)
                ver = version(x)
                made = _MADE.get(id(x))
                if made is not None and made[0]() is x and ver == made[2] is not None:
                    views[i] = made[1]
                    continue
                e = seen.get(i)
                if e is None or e[0] is not x or x.data_ptr() != e[2] or ver != e[3] or ver is None:
                    v = numpy_view(x)
                    if v is None:
                        return fn(ctx, *xs)
                    e = seen[i] = (x, v, x.data_ptr(), ver)
                    _remember(x, v)  # the next op reading this tensor (an activation) finds its view
                views[i] = e[1]
            elif tx is _ndarray and i not in host_inputs:
                return fn(ctx, *xs)  # numpy inputs (or a mix: the kernel's own error)
        if views is None:
            return fn(ctx, *xs)
        return _back(fn(ctx, *views), views, xs)

    kernel.__wrapped__ = fn  # type: ignore[attr-defined]
    kernel._asyncnet_routed = True  # type: ignore[attr-defined]
    kernel.__name__ = getattr(fn, "__name__", "kernel")
    kernel.__doc__ = fn.__doc__
    return kernel


#: id(tensor) -> (weak reference to the tensor, the numpy array over its memory, the tensor's
#: version then), for tensors made here and tensors viewed here once. A view is reused only while
#: the tensor object, its memory and its version stay: torch's in-place ops (``t_()``,
#: ``resize_()``, ``unsqueeze_()``...) change the shape or strides over the same memory and bump
#: the version; writes through the numpy view do not.
_MADE: dict[int, tuple[Any, Any, int | None]] = {}


def _forget(key: int) -> Callable[[Any], None]:
    def drop(ref: Any) -> None:
        e = _MADE.get(key)
        if e is not None and e[0] is ref:
            del _MADE[key]

    return drop


def _view(x: Any) -> Any:
    """A numpy view of a plain CPU tensor, or None when it has none (GPU, bfloat16)."""
    if not x.is_cpu:
        return None
    try:
        return x.numpy()
    except (TypeError, RuntimeError):
        return None


def _back(result: Any, views: Sequence[Any], xs: Sequence[Any]) -> Any:
    if type(result) is tuple or type(result) is list:
        return type(result)(_one(r, views, xs) for r in result)
    return _one(result, views, xs)


def _one(r: Any, views: Sequence[Any], xs: Sequence[Any]) -> Any:
    if type(r) is not _ndarray:
        if not isinstance(r, (np.ndarray, np.generic)):
            return r
        r = np.asarray(r)
    for i, v in enumerate(views):
        if r is v:
            return xs[i]  # an in-place result: the input tensor itself
    out, r = _wrap(r)
    _remember(out, r)
    return out


def numpy_view(x: Any) -> Any:
    """A numpy array over the memory of plain CPU tensor ``x``, or None when it has none (GPU,
    bfloat16); the array it was made from when :func:`fed_tensor` made it."""
    e = _FED.get(id(x))
    if e is not None and e[0] is x and version(x) == 0:  # no torch in-place op since it was made
        return e[1]
    return _view(x)


#: id(tensor) -> (tensor, its array) for the last :data:`FED_KEPT` tensors :func:`fed_tensor` made
_FED: dict[int, tuple[Any, np.ndarray]] = {}
FED_KEPT = 16
#: arrays larger than this are not kept (their kernels dwarf a view's microsecond; memory is not held)
FED_MAX_BYTES = 1 << 22


def fed_tensor(a: np.ndarray) -> Any:
    """``torch.from_numpy(a)`` for a batch about to be fed: the tensor shares ``a``'s memory,
    and the next routed run reading it takes ``a`` itself instead of making a view (a view costs
    as much as the tensor). The last :data:`FED_KEPT` such tensors of at most
    :data:`FED_MAX_BYTES` are kept alive for that.

        >>> import torch
        >>> a = np.ones(3, np.float32); t = fed_tensor(a)
        >>> numpy_view(t) is a, t.tolist()
        (True, [1.0, 1.0, 1.0])
    """
    from_numpy = _from_numpy
    if from_numpy is None:
        torch = loaded_torch()
        if torch is None:
            import torch
        from_numpy = torch.from_numpy
    t = from_numpy(a)
    if a.nbytes <= FED_MAX_BYTES:
        fed = _FED
        fed[id(t)] = (t, a)  # one dict write: atomic under the GIL, no lock taken per feed
        while len(fed) > FED_KEPT:  # the oldest go; worker threads feed at once and may drop them too
            try:
                del fed[next(iter(fed))]
            except (KeyError, RuntimeError, StopIteration):  # another thread dropped it, or the dict moved
                break
    return t


def as_tensor(r: Any) -> Any:
    """A kernel's numpy result as the routed op gives it: a torch tensor over its memory (a copy
    when torch cannot share it: read-only or negatively strided); anything but an array or a
    numpy scalar as it is. Needs torch imported and :func:`route_operators` called once."""
    if type(r) is not _ndarray:
        if not isinstance(r, (np.ndarray, np.generic)):
            return r
        r = np.asarray(r)
    return _wrap(r)[0]


def _wrap(r: np.ndarray) -> tuple[Any, np.ndarray]:
    """(a tensor over ``r``'s memory, or over a copy torch can share; the array it is over)."""
    if not r.flags.writeable:
        r = np.array(r, copy=True)
    try:
        return _from_numpy(r), r
    except ValueError:  # negative strides (a reversed view): torch needs a copy
        r = np.array(r, copy=True)
        return _from_numpy(r), r


def _remember(t: Any, a: Any) -> None:
    """Keep ``a`` as the numpy view of tensor ``t`` for as long as ``t`` lives."""
    key = id(t)
    _MADE[key] = (weakref.ref(t, _forget(key)), a, version(t))


def version(t: Any) -> int | None:
    """Tensor ``t``'s version counter (bumped by every torch in-place op on it), or None for an
    inference tensor, which keeps none (its views are then never reused)."""
    try:
        return t._version  # type: ignore[no-any-return]
    except RuntimeError:
        return None


def on_tensors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(ctx, *inputs)`` as it is, except inside a whole run on numpy views that armed it
    (``shadow_cell(kernel)[0]`` holds that run's ``id(array) -> tensor`` map): there its numpy
    inputs become the torch tensors the run stores for them (made now over the same memory, as
    the run's write-back would, and entered in the map), and tensors it returns become their
    arrays again. So the kernel sees the objects and the memory the op-by-op run gives it.

        >>> k = on_tensors(lambda ctx, x: x)
        >>> shadow_cell(k)[0] is None
        True
    """
    cell: list[Any] = [None]

    def kernel(ctx: Any, *xs: Any) -> Any:
        back = cell[0]
        if back is None:
            return fn(ctx, *xs)
        arrays: dict[int, Any] = {}  # id(tensor) -> the array it is over
        ts = [x if type(x) is not _ndarray else _tensor_for(x, back, arrays) for x in xs]
        r = fn(ctx, *ts)
        if type(r) is tuple or type(r) is list:
            return type(r)(_array_for(t, back, arrays) for t in r)
        return _array_for(r, back, arrays)

    kernel.__wrapped__ = fn  # type: ignore[attr-defined]
    kernel._asyncnet_cell = cell  # type: ignore[attr-defined]
    kernel.__name__ = getattr(fn, "__name__", "kernel")
    kernel.__doc__ = fn.__doc__
    return kernel


def shadow_cell(fn: Callable[..., Any]) -> list[Any] | None:
    """The one-item list through which a whole run arms an :func:`on_tensors` kernel; None for
    any other kernel."""
    return getattr(fn, "_asyncnet_cell", None)


def _tensor_for(x: np.ndarray, back: dict[int, Any], arrays: dict[int, Any]) -> Any:
    t = back.get(id(x))
    if t is None:
        t, a = _wrap(x)
        back[id(x)] = back[id(a)] = t
        arrays[id(t)] = a
    else:
        arrays[id(t)] = x
    return t


def _array_for(t: Any, back: dict[int, Any], arrays: dict[int, Any]) -> Any:
    a = arrays.get(id(t))
    if a is not None or type(t) is not _TENSOR:
        return t if a is None else a
    v = _view(t)  # a tensor that is none of the inputs: its view, and the view's tensor for the write-back
    if v is None:
        return t
    back[id(v)] = t
    return v


def route_operators(operators: Sequence[Any]) -> None:
    """Wrap the kernel of every op in :data:`NUMPY_WINS` on a CPU device with :func:`routed`,
    and of every op in :data:`SYNC_OPS` with :func:`on_tensors` (once; only when torch is
    imported: without it no tensor can reach a kernel)."""
    global _TENSOR, _from_numpy
    torch = loaded_torch()
    if torch is None or not ENABLED:
        return
    _TENSOR, _from_numpy = torch.Tensor, torch.from_numpy
    for op in operators:
        if op.device.device_type != "cpu" or op.fn is not op.schema.fn:
            continue
        if op.type in NUMPY_WINS:
            op.fn = routed(op.fn, HOST_INPUTS.get(op.type, frozenset()))
        elif op.type in SYNC_OPS:
            op.fn = on_tensors(op.fn)
