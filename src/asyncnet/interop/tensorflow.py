"""TensorFlow interop: Keras models trained data-parallel through any GradientSync, and
TensorFlow functions as operators of a net.

TensorFlow is optional (the extra ``tensorflow`` installs ``tensorflow-cpu``): ``import asyncnet``
never imports it, and importing this module does not either; TensorFlow is loaded when one of
these functions first runs. Importing this module registers the ``TFFunction`` operator.

Data-parallel Keras, in every worker, with that worker's sync::

    from asyncnet.sync import run_parallel_workers
    from asyncnet.interop.tensorflow import SyncOptimizer, broadcast_variables

    def worker(sync):
        model = make_model()                                   # any weights: worker 0's win
        model.compile(optimizer=SyncOptimizer(keras.optimizers.SGD(0.1), sync), loss=...)
        broadcast_variables(model, sync)                       # after the model is built
        model.fit(*my_shard(sync.worker_id, sync.num_workers), shuffle=False, ...)

    run_parallel_workers(2, worker)            # or backend="processes"; or torchrun + gloo

Rules:

- :func:`sync_gradients` sends every gradient of one step to the sync as one list, i.e. one flat
  bucket and one round, and returns new tensors of the original dtypes. ``None`` (a variable
  the loss does not reach) stays ``None``. bfloat16 travels as float32 (numpy has no bfloat16).
- ``tf.IndexedSlices`` (the gradient of an embedding lookup) is **densified**: every worker
  touches other rows, and a GradientSync reduces one fixed layout, so a sparse mean would need
  an all-gather it does not have. The dense mean of a ``V x d`` table costs ``V*d`` floats per
  step; the Keras optimizers accept the dense tensor as they accept the slices.
- Inside a ``tf.function`` (``model.fit`` compiles its train step) the sync runs as a
  ``tf.numpy_function``: the step cannot be XLA-compiled (``jit_compile=True``), which Keras
  does not do on CPU-only machines anyway.
- TensorFlow's thread pools are per process: call :func:`limit_threads` before TensorFlow runs
  anything, in every worker process (``backend="processes"``: workers x TensorFlow threads stay
  within the cores) or once for worker threads (``backend="threads"``: the sync inside a
  ``tf.function`` holds one inter-op thread per waiting worker, so that pool needs at least one
  thread per worker; :func:`sync_gradients` raises ``SyncError`` for fewer instead of waiting
  for the timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.errors import NetDefinitionError, SyncError

__all__ = [
    "sync_gradients",
    "SyncOptimizer",
    "broadcast_variables",
    "limit_threads",
    "register_function",
    "unregister_function",
    "registered_functions",
]


def _tf() -> Any:
    import tensorflow as tf  # lazy: TensorFlow is an optional dependency (absolute import: the real one)

    if not hasattr(tf, "function"):  # a folder named tensorflow on sys.path imports as a namespace package
        raise ImportError(
            f"TensorFlow is not installed (found only {list(getattr(tf, '__path__', []))}); "
            "install the tensorflow extra: pip install 'asyncnet[tensorflow]'"
        )
    return tf


# -- gradients --------------------------------------------------------------------------------
def _numpy_dtype(tf: Any, dtype: Any, index: int) -> np.dtype:
    """The numpy dtype gradient ``index`` travels in (bfloat16 as float32)."""
    if not dtype.is_floating:
        raise TypeError(f"gradient {index}: expected a floating-point dtype, got {dtype.name}")
    return np.dtype(np.float32) if dtype == tf.bfloat16 else np.dtype(dtype.as_numpy_dtype)


def _mean_in_numpy(sync: Any, arrays: Sequence[np.ndarray], dtypes: Sequence[np.dtype]) -> list[np.ndarray]:
    """Fresh, writable copies of ``arrays`` (one per gradient) replaced by their mean over the workers."""
    out = [np.array(a, dtype=d, copy=True, order="C") for a, d in zip(arrays, dtypes)]
    sync.sync_gradients(out)
    return out


def sync_gradients(grads: Sequence[Any], sync: Any) -> list[Any]:
    """The mean over ``sync``'s workers of each gradient in ``grads``, as new TensorFlow tensors.

    ``grads`` is what ``tape.gradient(loss, variables)`` returns: tensors, ``tf.IndexedSlices``
    (densified) or ``None`` (passed through: every worker must have its ``None`` at the same
    places, as the layout must match). All go as one bucket; each result keeps its gradient's
    dtype and shape. Works eagerly and inside a ``tf.function``. Errors of the sync
    (a layout mismatch between workers, a timeout, an abort) are raised unchanged.

        >>> import tensorflow as tf
        >>> from asyncnet.sync import LocalGradientSync
        >>> [g.numpy().tolist() for g in sync_gradients([tf.constant([1.0, 2.0])], LocalGradientSync())]
        [[1.0, 2.0]]
    """
    tf = _tf()
    grads = list(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    dense = [tf.convert_to_tensor(grads[i]) for i in present]  # IndexedSlices -> dense, summing repeats
    if not dense or sync.num_workers == 1:
        for i, t in zip(present, dense):
            _numpy_dtype(tf, t.dtype, i)
        return _refill(grads, present, dense)
    wire = [_numpy_dtype(tf, t.dtype, i) for i, t in zip(present, dense)]
    if tf.executing_eagerly():
        means = [tf.constant(m) for m in _mean_in_numpy(sync, [t.numpy() for t in dense], wire)]
    else:
        _check_graph_mode_threads(tf, sync)
        means = tf.numpy_function(
            lambda *a: _mean_in_numpy(sync, a, wire),
            [tf.cast(t, d) for t, d in zip(dense, wire)],
            Tout=[tf.as_dtype(d) for d in wire],
            stateful=True,
            name="asyncnet_sync_gradients",
        )
        for m, t in zip(means, dense):
            m.set_shape(t.shape)
    results = [tf.cast(m, t.dtype) if m.dtype != t.dtype else m for m, t in zip(means, dense)]
    return _refill(grads, present, results)


def _check_graph_mode_threads(tf: Any, sync: Any) -> None:
    """Inside a graph the sync blocks one of TensorFlow's inter-op threads until every peer
    arrives; peers that are threads of this process need one each, or the last never runs."""
    from asyncnet.sync.threaded import ThreadedGradientSync

    if not isinstance(sync, ThreadedGradientSync):
        return
    from asyncnet.exec.pools import default_pool_size

    inter = tf.config.threading.get_inter_op_parallelism_threads() or default_pool_size()
    if sync.num_workers > inter:
        raise SyncError(
            f"a sync of {sync.num_workers} worker threads inside a tf.function needs >= {sync.num_workers} TensorFlow "
            f"inter-op threads, this process has {inter}: call limit_threads({sync.num_workers}, backend='threads') "
            "before TensorFlow runs anything, or run eagerly (model.compile(run_eagerly=True))"
        )


def _refill(grads: list[Any], present: list[int], values: list[Any]) -> list[Any]:
    out: list[Any] = [None] * len(grads)
    for i, v in zip(present, values):
        out[i] = v
    return out


def SyncOptimizer(optimizer: Any, sync: Any) -> Any:
    """A copy of the Keras ``optimizer`` whose updates use gradients averaged over ``sync``'s workers.

    The result is an instance of a subclass of ``type(optimizer)`` made from its config (so wrap
    it before training: its state is not copied). Its ``apply`` (which ``apply_gradients`` and
    ``model.fit`` call) runs :func:`sync_gradients` on the whole list first, so every worker takes
    the same step. Keras 3 with the TensorFlow backend; ``stateless_apply`` (JAX) is not covered.

        >>> import keras
        >>> from asyncnet.sync import LocalGradientSync
        >>> opt = SyncOptimizer(keras.optimizers.SGD(0.1), LocalGradientSync())
        >>> isinstance(opt, keras.optimizers.SGD), opt.sync
        (True, LocalGradientSync())
    """
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"expected a keras.optimizers.Optimizer, got {type(optimizer).__name__}")
    if getattr(optimizer, "built", False):
        raise ValueError(f"optimizer {optimizer.name!r} already holds state (it was built); wrap it before training")
    base = type(optimizer)
    cls = _SYNC_CLASSES.get(base)
    if cls is None:
        cls = type(base.__name__, (_SyncMixin, base), {"__module__": base.__module__, "__doc__": base.__doc__})
        _SYNC_CLASSES[base] = cls
    wrapped = cls.from_config(optimizer.get_config())
    wrapped.sync = sync
    return wrapped


_SYNC_CLASSES: dict[type, type] = {}


class _SyncMixin:
    """``apply`` averages the gradients over ``self.sync`` before the optimizer's own update."""

    sync: Any = None

    def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
        return super().apply(sync_gradients(list(grads), self.sync), trainable_variables)  # type: ignore[misc]


def broadcast_variables(model_or_variables: Any, sync: Any, root: int = 0) -> None:
    """Overwrite every floating-point variable with worker ``root``'s value, on every worker.

    ``model_or_variables`` is a built Keras model (its ``variables``: weights and batch-norm
    statistics) or a list of ``tf.Variable``. Integer variables (Keras' dropout seeds, counters)
    are left alone: they are per-worker state. Call it in every worker, after the model is built.

        >>> import tensorflow as tf
        >>> from asyncnet.sync import LocalGradientSync
        >>> v = tf.Variable([1.0, 2.0])
        >>> broadcast_variables([v], LocalGradientSync()); v.numpy().tolist()
        [1.0, 2.0]
    """
    tf = _tf()
    if hasattr(model_or_variables, "variables") and not isinstance(model_or_variables, (list, tuple)):
        if getattr(model_or_variables, "built", True) is False:
            raise ValueError(
                f"model {getattr(model_or_variables, 'name', '')!r} is not built yet: call it on a "
                "batch or model.build(input_shape) before broadcast_variables"
            )
        variables = list(model_or_variables.variables)
    else:
        variables = list(model_or_variables)
    floats = [v for v in variables if tf.as_dtype(v.dtype).is_floating]  # Keras variables name their dtype
    if not floats:
        return
    wire = [_numpy_dtype(tf, tf.as_dtype(v.dtype), i) for i, v in enumerate(floats)]
    arrays = [np.array(v.numpy(), dtype=d, copy=True, order="C") for v, d in zip(floats, wire)]
    sync.broadcast(arrays, root)
    for v, a in zip(floats, arrays):
        v.assign(tf.cast(a, v.dtype))


def limit_threads(
    num_workers: int = 1, backend: str = "processes", intra_op: int | None = None, inter_op: int | None = None
) -> tuple[int, int]:
    """Size TensorFlow's two thread pools in this process; return ``(intra_op, inter_op)``.

    TensorFlow's pools are per process. ``cores`` is ``asyncnet.tensor.threads.process_cores()``:
    this process's CPU affinity, already divided among the ranks of a host under ``torchrun``
    (there, call ``limit_threads()``). ``backend="processes"`` (call it in each worker process):
    both pools get ``cores // num_workers`` threads (at least 1), so workers x TensorFlow threads
    <= cores. ``backend="threads"`` (call it once, before starting the threads): the workers
    share one intra-op pool of ``cores`` threads, and the inter-op pool gets ``max(cores,
    num_workers)`` threads, because a sync inside a ``tf.function`` holds one inter-op thread per
    waiting worker (those threads wait, they do not compute). It must run before TensorFlow runs
    anything; afterwards TensorFlow refuses a change, and so does this function (a
    ``RuntimeError`` naming the sizes in force) unless the sizes are already the ones asked.
    """
    from asyncnet.tensor.threads import process_cores

    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
    if backend not in ("threads", "processes"):
        raise ValueError(f"backend must be 'threads' or 'processes', got {backend!r}")
    cores = process_cores()
    share = max(1, cores // num_workers)
    want = (
        intra_op or (share if backend == "processes" else cores),
        inter_op or (share if backend == "processes" else max(cores, num_workers)),
    )
    if min(want) < 1:
        raise ValueError(f"thread counts must be >= 1, got intra_op={want[0]}, inter_op={want[1]}")
    cfg = _tf().config.threading
    have = (cfg.get_intra_op_parallelism_threads(), cfg.get_inter_op_parallelism_threads())
    if have == want:
        return want
    try:
        cfg.set_intra_op_parallelism_threads(want[0])
        cfg.set_inter_op_parallelism_threads(want[1])
    except RuntimeError as exc:
        raise RuntimeError(
            f"TensorFlow already runs with intra_op={have[0]}, inter_op={have[1]} threads "
            f"(0 = its default); call limit_threads before it runs anything ({exc})"
        ) from None
    return want


# -- TFFunction: a TensorFlow function as an operator (what Caffe2's Python op was) ------------
class _Registered(NamedTuple):
    fn: Callable[..., Any]
    grad_inputs: tuple[int, ...] | None  # None: every input
    differentiable: bool


_FUNCTIONS: dict[str, _Registered] = {}
_FUNCTIONS_LOCK = threading.Lock()


def register_function(
    name: str,
    fn: Callable[..., Any],
    grad_inputs: Sequence[int] | None = None,
    differentiable: bool = True,
    replace: bool = False,
) -> str:
    """Register ``fn`` (a ``tf.function`` or any TensorFlow callable) for ``TFFunction`` ops naming it.

    A NetDef stores only ``name``: a process that loads it must register the same name before it
    creates the net. ``grad_inputs`` lists the inputs that get a gradient (default: all; leave out
    integer inputs such as indices); ``differentiable=False`` makes a gradient request an error.

        >>> import tensorflow as tf, numpy as np, asyncnet as an
        >>> _ = register_function("doc_square", tf.function(lambda x: x * x), replace=True)
        >>> ws = an.Workspace(); ws.feed("x", np.array([3.0], np.float32))
        >>> net = an.Net("n"); _ = net.TFFunction(["x"], ["y"], function="doc_square")
        >>> ws.run_net_once(net); ws.fetch("y")
        array([9.], dtype=float32)
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    picked = None if grad_inputs is None else tuple(int(i) for i in grad_inputs)
    if picked is not None and (len(set(picked)) != len(picked) or any(i < 0 for i in picked)):
        raise ValueError(f"grad_inputs must be distinct input indices >= 0, got {list(grad_inputs or ())}")
    with _FUNCTIONS_LOCK:
        if name in _FUNCTIONS and not replace:
            raise ValueError(f"a TensorFlow function is already registered as {name!r} (pass replace=True)")
        _FUNCTIONS[name] = _Registered(fn, picked, bool(differentiable))
    return name


def unregister_function(name: str) -> None:
    """Forget ``name`` (nets already created keep the function they bound)."""
    with _FUNCTIONS_LOCK:
        _FUNCTIONS.pop(name, None)


def registered_functions() -> list[str]:
    """The names ``TFFunction`` ops may use in this process."""
    return sorted(_FUNCTIONS)


def _lookup(name: str) -> _Registered:
    try:
        return _FUNCTIONS[name]
    except KeyError:
        known = ", ".join(repr(n) for n in sorted(_FUNCTIONS)) or "none"
        raise NetDefinitionError(
            f"TFFunction function {name!r} is not registered in this process (registered: {known}); "
            "call asyncnet.interop.tensorflow.register_function(name, fn) before creating the net"
        ) from None


def _validate(op: OperatorDef) -> None:
    _lookup(op.args.get("function", ""))
    if op.type == "TFFunctionGradient":
        picked = op.args.get("grad_outputs", [])
        if not picked:
            raise ValueError("grad_outputs must name at least one output")


def _to_tf(tf: Any, x: Any) -> Any:
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()  # torch CPU tensors travel through numpy; no copy when possible
    return tf.convert_to_tensor(x)


def _to_numpy(t: Any, where: str) -> np.ndarray:
    if t is None or not hasattr(t, "numpy"):
        raise TypeError(f"{where}: expected a TensorFlow tensor, got {type(t).__name__}")
    a = t.numpy()
    a = a if isinstance(a, np.ndarray) else np.asarray(a)
    return a if a.flags.writeable else a.copy()  # a later in-place op may write the blob


def _as_outputs(result: Any, n: int, name: str) -> list[Any]:
    items = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(items) != n:
        raise ValueError(f"function {name!r} returned {len(items)} output(s), the op has {n}")
    return items


@register_op(
    "TFFunction",
    inputs=(0, None),
    outputs=(1, None),
    validate=_validate,
    args=[Arg("function", str, Arg.REQUIRED, "name given to asyncnet.interop.tensorflow.register_function")],
    inputs_doc=("X_1..X_n, passed to the function in order",),
    outputs_doc=("Y_1..Y_m, its results in order",),
    doc="Runs a registered TensorFlow function on the inputs (numpy in, numpy out); Caffe2's Python op for TensorFlow.",
)
def tf_function(ctx: Any, *inputs: Any) -> Any:
    tf = _tf()
    name = ctx.args["function"]
    fn = _lookup(name).fn
    outs = _as_outputs(fn(*[_to_tf(tf, x) for x in inputs]), len(ctx.op.outputs), name)
    arrays = [_to_numpy(t, f"output {i} of function {name!r}") for i, t in enumerate(outs)]
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


@register_op(
    "TFFunctionGradient",
    inputs=(1, None),
    outputs=(1, None),
    validate=_validate,
    args=[
        Arg("function", str, Arg.REQUIRED, "the forward op's function"),
        Arg("num_inputs", int, Arg.REQUIRED, "how many forward inputs come first"),
        Arg("grad_inputs", list, Arg.REQUIRED, "forward inputs that get a gradient", item_type=int),
        Arg("grad_outputs", list, Arg.REQUIRED, "forward outputs whose gradients follow", item_type=int),
    ],
    inputs_doc=("X_1..X_n (forward inputs)", "dY_j for j in grad_outputs"),
    outputs_doc=("dX_i for i in grad_inputs",),
    doc="Gradient of TFFunction: re-runs the function under tf.GradientTape and returns the vector-Jacobian products.",
)
def tf_function_gradient(ctx: Any, *blobs: Any) -> Any:
    tf = _tf()
    a = ctx.args
    name, n = a["function"], a["num_inputs"]
    fn = _lookup(name).fn
    xs = [_to_tf(tf, x) for x in blobs[:n]]
    dys = [_to_tf(tf, d) for d in blobs[n:]]
    watched = [xs[i] for i in a["grad_inputs"]]
    with tf.GradientTape() as tape:
        tape.watch(watched)
        outs = fn(*xs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    targets = [outs[j] for j in a["grad_outputs"]]
    grads = tape.gradient(
        targets,
        watched,
        output_gradients=[tf.cast(d, t.dtype) for d, t in zip(dys, targets)],
        unconnected_gradients=tf.UnconnectedGradients.ZERO,
    )
    arrays = [
        _to_numpy(tf.convert_to_tensor(g), f"gradient of input {i} of function {name!r}")
        for i, g in zip(a["grad_inputs"], grads)
    ]
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


@register_gradient("TFFunction")
def _tf_function_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    name = op.args["function"]
    reg = _lookup(name)
    if not reg.differentiable:
        raise NetDefinitionError(f"TFFunction function {name!r} was registered with differentiable=False")
    n = len(op.inputs)
    inputs = list(range(n)) if reg.grad_inputs is None else [i for i in reg.grad_inputs if i < n]
    outs = [j for j, g in enumerate(gout) if g is not None]
    if not inputs:
        return [], [None] * len(op.inputs)
    grad_names = [f"#d{i}" for i in inputs]
    gop = OperatorDef(
        "TFFunctionGradient",
        list(op.inputs) + [gout[j] for j in outs],
        grad_names,
        {"function": name, "num_inputs": len(op.inputs), "grad_inputs": inputs, "grad_outputs": outs},
    )
    result: list[str | None] = [None] * len(op.inputs)
    for i, g in zip(inputs, grad_names):
        result[i] = g
    return [gop], result
