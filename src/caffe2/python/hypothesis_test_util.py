"""Caffe2's ``caffe2.python.hypothesis_test_util``: hypothesis strategies for tensors and
devices, and :class:`HypothesisTestCase` whose checks run an op on asyncnet and compare it with
a reference function, with finite differences, or across devices.

    >>> import numpy as np
    >>> from caffe2.python import core, hypothesis_test_util as hu
    >>> case = hu.HypothesisTestCase()
    >>> op = core.CreateOperator("Relu", ["x"], ["y"])
    >>> x = np.array([-1.0, 3.0], np.float32)
    >>> case.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: (np.maximum(x, 0),))[0]
    array([0., 3.], dtype=float32)
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import inspect
import logging
import math
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import hypothesis
import hypothesis.extra.numpy
import hypothesis.strategies as st
import numpy as np

from caffe2.proto import caffe2_pb2
from caffe2.python import core, device_checker, gradient_checker, test_util, workspace

logger = logging.getLogger("caffe2.hypothesis_test_util")


def is_sandcastle() -> bool:
    """Whether Caffe2's CI environment variables are set."""
    return os.getenv("SANDCASTLE") == "1" or os.getenv("TW_JOB_USER") == "sandcastle"


def is_travis() -> bool:
    """Whether the TRAVIS environment variable is set."""
    return "TRAVIS" in os.environ


# Settings and strategy arguments hypothesis has since removed, which Caffe2's tests still pass
# (``@settings(timeout=100)``, ``st.lists(average_size=...)``, ``st.text(alphabet=None)``): dropped,
# as they only tuned the search or spelled the default.
_LEGACY_SETTINGS = ("timeout", "min_satisfying_examples", "max_iterations", "perform_health_check", "strict")
_LEGACY_LIST_ARGS = ("average_size",)


def _accept_legacy_arguments() -> None:
    """Make ``hypothesis.settings`` and ``hypothesis.strategies.lists`` ignore the legacy arguments
    above (once; only arguments that would otherwise raise are touched)."""
    if getattr(hypothesis.settings, "_caffe2_legacy", False):
        return
    init = hypothesis.settings.__init__

    @functools.wraps(init)
    def settings_init(self: Any, parent: Any = None, **kwargs: Any) -> None:
        for name in _LEGACY_SETTINGS:
            kwargs.pop(name, None)
        init(self, parent, **kwargs)

    hypothesis.settings.__init__ = settings_init
    hypothesis.settings._caffe2_legacy = True
    for name in ("lists", "text", "sets", "frozensets", "dictionaries"):
        setattr(st, name, _dropping(getattr(st, name), _LEGACY_LIST_ARGS))


def _dropping(strategy: Any, legacy: tuple[str, ...]) -> Any:
    @functools.wraps(strategy)
    def wrapper(*args: Any, **kwargs: Any) -> st.SearchStrategy:
        for name in legacy:
            kwargs.pop(name, None)
        if kwargs.get("alphabet", 0) is None:  # st.text(alphabet=None): the old default alphabet
            del kwargs["alphabet"]
        return strategy(*args, **kwargs)

    return wrapper


_accept_legacy_arguments()

# NumPy's aliases of the builtin types, removed in NumPy 1.24, which Caffe2's tests still use
# (``np.float``, ``np.int``, ``np.object``, ``np.str``): restored as the builtins they were;
# and ``np.asscalar`` (removed in 1.23).
_NUMPY_ALIASES = {"int": int, "float": float, "object": object, "str": str, "complex": complex}


def _asscalar(a: Any) -> Any:
    """NumPy's removed ``np.asscalar``: the one element of ``a`` as a Python scalar."""
    return np.asarray(a).item()


def _restore_numpy_aliases() -> None:
    for name, builtin in {**_NUMPY_ALIASES, "asscalar": _asscalar}.items():
        if name not in np.__dict__:
            setattr(np, name, builtin)


_restore_numpy_aliases()

# Two more spellings Caffe2's tests still use: ``np.set_printoptions(threshold=np.nan)`` (NumPy now
# wants a number: nan meant "never summarize", which is ``sys.maxsize``) and ``inspect.getargspec``
# (removed in Python 3.11; its four fields come from ``inspect.getfullargspec``).
ArgSpec = collections.namedtuple("ArgSpec", ["args", "varargs", "keywords", "defaults"])


def _getargspec(func: Any) -> ArgSpec:
    """Python's removed ``inspect.getargspec``: names, ``*args``, ``**kwargs`` and defaults of ``func``."""
    spec = inspect.getfullargspec(func)
    return ArgSpec(spec.args, spec.varargs, spec.varkw, spec.defaults)


def _accept_nan_print_threshold() -> None:
    if getattr(np.set_printoptions, "_caffe2_legacy", False):
        return
    original = np.set_printoptions

    @functools.wraps(original)
    def set_printoptions(*args: Any, **kwargs: Any) -> Any:
        threshold = kwargs.get("threshold")
        if isinstance(threshold, float) and math.isnan(threshold):
            kwargs["threshold"] = sys.maxsize
        return original(*args, **kwargs)

    set_printoptions._caffe2_legacy = True  # type: ignore[attr-defined]
    np.set_printoptions = set_printoptions


def _accept_positional_elements() -> None:
    """``hypothesis.extra.numpy.arrays(dtype, shape, elements)``: hypothesis now wants ``elements``
    (and what follows) by keyword; Caffe2's tests pass it third."""
    original = hypothesis.extra.numpy.arrays
    if getattr(original, "_caffe2_legacy", False):
        return

    @functools.wraps(original)
    def arrays(dtype: Any, shape: Any, *rest: Any, **kwargs: Any) -> st.SearchStrategy:
        for name, value in zip(("elements", "fill", "unique"), rest):
            kwargs[name] = value
        return original(dtype, shape, **kwargs)

    arrays._caffe2_legacy = True  # type: ignore[attr-defined]
    hypothesis.extra.numpy.arrays = arrays


_accept_positional_elements()


def _sum(original: Any) -> Any:
    """``np.sum(generator)``: NumPy now refuses it; it summed the generator with Python's sum."""

    @functools.wraps(original)
    def np_sum(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, types.GeneratorType):
            return original(list(a), *args, **kwargs)
        return original(a, *args, **kwargs)

    return np_sum


def _fromstring(original: Any) -> Any:
    """``np.fromstring(bytes, dtype)`` (binary mode, no ``sep``): removed; it was ``np.frombuffer``
    of a copy."""

    @functools.wraps(original)
    def fromstring(string: Any, dtype: Any = float, count: int = -1, *, sep: str = "", **kwargs: Any) -> Any:
        if sep == "" and not kwargs:
            data = string.encode("latin-1") if isinstance(string, str) else string
            return np.frombuffer(data, dtype=dtype, count=count).copy()
        return original(string, dtype=dtype, count=count, sep=sep, **kwargs)

    return fromstring


def _delete(original: Any) -> Any:
    """``np.delete(a, np.array([]), ...)``: an empty float index array (what ``np.array([])``
    gives) is now an error; it deleted nothing."""

    @functools.wraps(original)
    def delete(arr: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(obj, np.ndarray) and obj.size == 0 and obj.dtype.kind == "f":
            obj = obj.astype(np.intp)
        return original(arr, obj, *args, **kwargs)

    return delete


def _accept_legacy_numpy_calls() -> None:
    for name, wrap in (("sum", _sum), ("fromstring", _fromstring), ("delete", _delete)):
        current = getattr(np, name)
        if not getattr(current, "_caffe2_legacy", False):
            patched = wrap(current)
            patched._caffe2_legacy = True
            setattr(np, name, patched)


_accept_legacy_numpy_calls()
if not hasattr(inspect, "getargspec"):
    inspect.getargspec = _getargspec  # type: ignore[attr-defined]
_accept_nan_print_threshold()

_COMMON = dict(suppress_health_check=list(hypothesis.HealthCheck), database=None, deadline=None)
hypothesis.settings.register_profile("sandcastle", hypothesis.settings(derandomize=True, max_examples=100, **_COMMON))
hypothesis.settings.register_profile("dev", hypothesis.settings(max_examples=10, **_COMMON))
hypothesis.settings.register_profile("debug", hypothesis.settings(max_examples=1000, **_COMMON))
hypothesis.settings.load_profile("sandcastle" if is_sandcastle() else os.getenv("CAFFE2_HYPOTHESIS_PROFILE", "dev"))


def dims(min_value: int = 1, max_value: int = 5) -> st.SearchStrategy:
    """A dimension size."""
    return st.integers(min_value=min_value, max_value=max_value)


def elements_of_type(dtype: Any = np.float32, filter_: Any = None) -> st.SearchStrategy:
    """Elements for arrays of ``dtype``: floats in [-1, 1], non-negative ints, booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        elems = st.floats(min_value=-1.0, max_value=1.0, width=min(dtype.itemsize * 8, 64))
    elif dtype == np.int32:
        elems = st.integers(min_value=0, max_value=2**31 - 1)
    elif dtype == np.int64:
        elems = st.integers(min_value=0, max_value=2**63 - 1)
    elif dtype == np.bool_:
        elems = st.booleans()
    else:
        raise ValueError(f"Unexpected dtype {dtype} without elements provided")
    return elems if filter_ is None else elems.filter(filter_)


def arrays(dims: Any, dtype: Any = np.float32, elements: Any = None) -> st.SearchStrategy:
    """Arrays of shape ``dims``. Given ``elements`` of a numeric ``dtype`` are converted the way
    NumPy assigns them (ints wrap around, floats into an int array are truncated), as Caffe2's
    tests expect: ``elements=st.integers(0, 2**32 - 1)`` for an int32 array draws negatives too."""
    if elements is None:
        elements = elements_of_type(dtype)
    elif np.dtype(dtype).kind in "iuf":
        elements = elements.map(functools.partial(_assigned_as, np.dtype(dtype)))
    return hypothesis.extra.numpy.arrays(dtype, dims, elements=elements)


def _assigned_as(dtype: np.dtype, value: Any) -> Any:
    """``value`` as an element of an array of ``dtype`` holds it (C casting: wrap, truncate)."""
    with np.errstate(all="ignore"):
        return np.array(value).astype(dtype)[()]


def tensor(
    min_dim: int = 1, max_dim: int = 4, dtype: Any = np.float32, elements: Any = None, **kwargs: Any
) -> st.SearchStrategy:
    """An array of ``min_dim`` to ``max_dim`` dimensions, each drawn by :func:`dims` (``kwargs``)."""
    dims_ = st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)
    return dims_.flatmap(lambda d: arrays(d, dtype, elements))


def tensor1d(min_len: int = 1, max_len: int = 64, dtype: Any = np.float32, elements: Any = None) -> st.SearchStrategy:
    """A vector of ``min_len`` to ``max_len`` elements."""
    return tensor(1, 1, dtype, elements, min_value=min_len, max_value=max_len)


def segment_ids(size: int, is_sorted: bool) -> st.SearchStrategy:
    """int32 segment ids for ``size`` rows (sorted from 0 when ``is_sorted``)."""
    if size == 0:
        return st.just(np.empty(shape=[0], dtype=np.int32))
    if is_sorted:
        return arrays([size], dtype=np.int32, elements=st.booleans()).map(lambda x: np.cumsum(x, dtype=np.int32) - x[0])
    return arrays([size], dtype=np.int32, elements=st.integers(min_value=0, max_value=2 * size))


def lengths(
    size: int, min_segments: int | None = None, max_segments: int | None = None, **kwargs: Any
) -> st.SearchStrategy:
    """int32 segment lengths adding up to ``size`` (zero lengths allowed)."""
    min_segments = 0 if min_segments is None else min_segments
    max_segments = size if max_segments is None else max_segments
    if size == 0 and max_segments == 0:
        return st.just(np.empty(shape=[0], dtype=np.int32))
    if max_segments <= 0:
        raise ValueError("size is not 0, need at least one segment")

    def cut(borders: np.ndarray) -> np.ndarray:
        points = np.sort(np.concatenate([borders, np.array([0, size], np.int32)]))
        return np.diff(points).astype(np.int32)

    count = st.integers(min_value=max(min_segments - 1, 0), max_value=max_segments - 1)
    return count.flatmap(
        lambda n: hypothesis.extra.numpy.arrays(np.int32, n, elements=st.integers(min_value=0, max_value=size))
    ).map(cut)


def segmented_tensor(
    min_dim: int = 1,
    max_dim: int = 4,
    dtype: Any = np.float32,
    is_sorted: bool = True,
    elements: Any = None,
    segment_generator: Any = segment_ids,
    allow_empty: bool = False,
    **kwargs: Any,
) -> st.SearchStrategy:
    """``(data, segments)``: an array and segment ids (or lengths) for its first dimension."""
    empty = st.booleans() if allow_empty else st.just(False)
    shape = st.tuples(empty, st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)).map(
        lambda p: ([0] if p[0] else []) + p[1]
    )
    return shape.flatmap(lambda d: st.tuples(arrays(d, dtype, elements), segment_generator(d[0], is_sorted=is_sorted)))


def lengths_tensor(
    min_segments: int | None = None, max_segments: int | None = None, *args: Any, **kwargs: Any
) -> st.SearchStrategy:
    """``(data, lengths)``."""
    gen = functools.partial(lengths, min_segments=min_segments, max_segments=max_segments)
    return segmented_tensor(*args, segment_generator=gen, **kwargs)


def sparse_segmented_tensor(
    min_dim: int = 1,
    max_dim: int = 4,
    dtype: Any = np.float32,
    is_sorted: bool = True,
    elements: Any = None,
    allow_empty: bool = False,
    segment_generator: Any = segment_ids,
    itype: Any = np.int64,
    **kwargs: Any,
) -> st.SearchStrategy:
    """``(data, indices, segments)``: a table, row indices into it, and segments of the indices."""
    empty = st.booleans() if allow_empty else st.just(False)
    shapes = st.tuples(empty, st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)).flatmap(
        lambda p: st.tuples(st.just(p[1]), st.just(0) if p[0] else st.integers(min_value=1, max_value=p[1][0]))
    )
    return shapes.flatmap(
        lambda d: st.tuples(
            arrays(d[0], dtype, elements),
            arrays(d[1], dtype=itype, elements=st.integers(min_value=0, max_value=d[0][0] - 1)),
            segment_generator(d[1], is_sorted=is_sorted),
        )
    )


def sparse_lengths_tensor(**kwargs: Any) -> st.SearchStrategy:
    """``(data, indices, lengths)``."""
    return sparse_segmented_tensor(segment_generator=lengths, **kwargs)


def tensors(
    n: int, min_dim: int = 1, max_dim: int = 4, dtype: Any = np.float32, elements: Any = None, **kwargs: Any
) -> st.SearchStrategy:
    """``n`` arrays of one shape."""
    dims_ = st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)
    return dims_.flatmap(lambda d: st.lists(arrays(d, dtype, elements), min_size=n, max_size=n))


def ntensors(
    min_n: int,
    max_n: int,
    min_dim: int = 1,
    max_dim: int = 4,
    dtype: Any = np.float32,
    elements: Any = None,
    **kwargs: Any,
) -> st.SearchStrategy:
    """``min_n`` to ``max_n`` arrays of one shape."""
    dims_ = st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)
    return dims_.flatmap(lambda d: st.lists(arrays(d, dtype, elements), min_size=min_n, max_size=max_n))


def tensors1d(
    n: int, min_len: int = 1, max_len: int = 64, dtype: Any = np.float32, elements: Any = None
) -> st.SearchStrategy:
    """``n`` vectors of one length."""
    return tensors(n, 1, 1, dtype, elements, min_value=min_len, max_value=max_len)


cpu_do = caffe2_pb2.DeviceOption()
cuda_do = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA)
hip_do = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.HIP)
gpu_do = caffe2_pb2.DeviceOption(device_type=workspace.GpuDeviceType)
_device_options_no_hip = [cpu_do] + ([cuda_do] if workspace.has_cuda_support else [])
device_options = _device_options_no_hip + ([hip_do] if workspace.has_hip_support else [])
expanded_device_options = [cpu_do] + [
    caffe2_pb2.DeviceOption(device_type=workspace.GpuDeviceType, device_id=i) for i in range(workspace.NumGpuDevices())
]


def device_checker_device_options() -> st.SearchStrategy:
    """Every device this machine has, as one list."""
    return st.just(device_options)


def gradient_checker_device_option() -> st.SearchStrategy:
    """One of the devices."""
    return st.sampled_from(device_options)


gcs = dict(gc=gradient_checker_device_option(), dc=device_checker_device_options())
gcs_cpu_only = dict(gc=st.sampled_from([cpu_do]), dc=st.just([cpu_do]))
gcs_cuda_only = dict(gc=st.sampled_from([cuda_do]), dc=st.just([cuda_do]))
gcs_gpu_only = dict(gc=st.sampled_from([gpu_do]), dc=st.just([gpu_do]))
gcs_no_hip = dict(gc=st.sampled_from(_device_options_no_hip), dc=st.just(_device_options_no_hip))


@contextlib.contextmanager
def temp_workspace(name: Any = b"temp_ws") -> Iterator[None]:
    """Run the body in a fresh workspace ``name``, then reset it and switch back."""
    name = name.decode() if isinstance(name, bytes) else name
    old = workspace.CurrentWorkspace()
    workspace.SwitchWorkspace(name, True)
    try:
        yield
    finally:
        workspace.ResetWorkspace()
        workspace.SwitchWorkspace(old)


def _feed_inputs(op: Any, inputs: list[Any], device_option: Any, input_device_options: Any) -> None:
    if len(op.input) > len(inputs):
        raise ValueError(f"must supply an input for each input on the op: {list(op.input)} vs {len(inputs)} inputs")
    devices = input_device_options or core.InferOpBlobDevicesAsDict(op)[0]
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value, device_option=devices.get(name, device_option))


def runOpOnInput(device_option: Any, op: Any, inputs: list[Any], input_device_options: Any = None) -> list[Any]:
    """Run ``op`` once on ``inputs`` in a temporary workspace; its outputs."""
    op = copy.deepcopy(op)
    op.device_option.CopyFrom(device_option)
    with temp_workspace():
        _feed_inputs(op, inputs, device_option, input_device_options)
        workspace.RunOperatorOnce(op)
        return [workspace.FetchBlob(n) for n in op.output]


def runOpBenchmark(
    device_option: Any, op: Any, inputs: list[Any], input_device_options: Any = None, iterations: int = 10
) -> Any:
    """Time ``op`` on ``inputs`` (``workspace.BenchmarkNet``'s result)."""
    op = copy.deepcopy(op)
    op.device_option.CopyFrom(device_option)
    net = caffe2_pb2.NetDef()
    net.op.extend([op])
    net.name = op.name or "test"
    with temp_workspace():
        _feed_inputs(op, inputs, device_option, input_device_options)
        workspace.CreateNet(net)
        return workspace.BenchmarkNet(net.name, 1, iterations, True)


def _as_arrays(inputs: list[Any]) -> list[Any]:
    return list(inputs)


class HypothesisTestCase(test_util.TestCase):
    """Checks for one operator: against a reference, finite differences, devices."""

    def assertDeviceChecks(
        self,
        device_options: list[Any],
        op: Any,
        inputs: list[Any],
        outputs_to_check: list[int],
        input_device_options: Any = None,
        threshold: float = 0.01,
    ) -> None:
        """The op gives the same outputs on every device of ``device_options``."""
        checker = device_checker.DeviceChecker(threshold, device_options=device_options)
        self.assertTrue(checker.CheckSimple(op, inputs, outputs_to_check, input_device_options))

    def assertGradientChecks(
        self,
        device_option: Any,
        op: Any,
        inputs: list[Any],
        outputs_to_check: int,
        outputs_with_grads: list[int],
        grad_ops: Any = None,
        threshold: float = 0.005,
        stepsize: float = 0.05,
        input_device_options: Any = None,
        ensure_outputs_are_inferred: bool = False,
    ) -> None:
        """Input ``outputs_to_check``'s gradient matches central finite differences."""
        checker = gradient_checker.GradientChecker(
            stepsize=stepsize,
            threshold=threshold,
            device_option=device_option,
            workspace_name=str(device_option),
            input_device_options=input_device_options,
        )
        ok, grad, estimate = checker.CheckSimple(
            op,
            inputs,
            outputs_to_check,
            outputs_with_grads,
            grad_ops=grad_ops,
            input_device_options=input_device_options,
        )
        self.assertEqual(grad.shape, estimate.shape)
        self.assertTrue(
            ok,
            f"Gradient check failed for input {op.input[outputs_to_check]}: analytic {grad}, estimated {estimate}",
        )

    def _assertGradReferenceChecks(
        self,
        op: Any,
        inputs: list[Any],
        ref_outputs: Any,
        output_to_grad: str,
        grad_reference: Any,
        threshold: float = 1e-4,
    ) -> None:
        grad_blob = output_to_grad + "_grad"
        grad_ops, grad_map = core.GradientRegistry.GetBackwardPass([op], {output_to_grad: grad_blob})
        output_grad = workspace.FetchBlob(output_to_grad)
        refs = grad_reference(output_grad, ref_outputs, inputs)
        workspace.FeedBlob(grad_blob, workspace.FetchBlob(output_to_grad))
        workspace.RunOperatorsOnce(grad_ops)
        self.assertEqual(len(refs), len(inputs))
        for name, ref in zip(op.input, refs):
            grad = grad_map.get(name)
            if not grad:
                self.assertIsNone(ref)
                continue
            if isinstance(grad, core.BlobReference):
                ref_vals, ref_indices, val_name = ref, None, grad
            else:
                (ref_vals, ref_indices), val_name = ref, grad.values
            vals = workspace.FetchBlob(str(val_name))
            np.testing.assert_allclose(
                vals,
                ref_vals,
                atol=threshold,
                rtol=threshold,
                err_msg=f"Gradient {val_name} does not match the reference",
            )
            if ref_indices is not None:
                indices = workspace.FetchBlob(str(grad.indices))
                np.testing.assert_allclose(indices, ref_indices, atol=1e-4, rtol=1e-4)

    def assertReferenceChecks(
        self,
        device_option: Any,
        op: Any,
        inputs: list[Any],
        reference: Any,
        input_device_options: Any = None,
        threshold: float = 1e-4,
        output_to_grad: str | None = None,
        grad_reference: Any = None,
        atol: float | None = None,
        outputs_to_check: list[int] | None = None,
        ensure_outputs_are_inferred: bool = False,
    ) -> list[Any]:
        """The op's outputs equal ``reference(*inputs)`` (a tuple or list) within ``threshold``;
        with ``grad_reference``, its gradient too. Returns the op's outputs."""
        op = copy.deepcopy(op)
        op.device_option.CopyFrom(device_option)
        with temp_workspace():
            _feed_inputs(op, inputs, device_option, input_device_options)
            net = core.Net("opnet")
            net.Proto().op.extend([op])
            workspace.RunNetOnce(net)
            expected = reference(*inputs)
            if not isinstance(expected, (tuple, list)):
                raise RuntimeError(
                    "You are providing a wrong reference implementation. A proper one should "
                    "return a tuple/list of numpy arrays."
                )
            if not outputs_to_check:
                self.assertEqual(len(expected), len(op.output))
                outputs_to_check = list(range(len(op.output)))
            outs = []
            for index, ref in zip(outputs_to_check, expected):
                name = op.output[index]
                output = workspace.FetchBlob(name)
                if np.asarray(output).dtype.kind in ("S", "O", "U"):
                    np.testing.assert_array_equal(output, ref)
                else:
                    np.testing.assert_allclose(
                        output,
                        ref,
                        atol=threshold if atol is None else atol,
                        rtol=threshold,
                        err_msg=f"Output {name} is not matching the reference",
                    )
                outs.append(output)
            if grad_reference is not None:
                if output_to_grad is None:
                    raise ValueError("If grad_reference is set, output_to_grad has to be set as well")
                with core.DeviceScope(device_option):
                    self._assertGradReferenceChecks(
                        op, inputs, expected, output_to_grad, grad_reference, threshold=threshold
                    )
            return outs

    def assertValidationChecks(
        self,
        device_option: Any,
        op: Any,
        inputs: list[Any],
        validator: Any,
        input_device_options: Any = None,
        as_kwargs: bool = True,
        init_net: Any = None,
    ) -> None:
        """Run the op and call ``validator`` on its inputs and outputs."""
        if as_kwargs and len(set(op.input) | set(op.output)) != len(op.input) + len(op.output):
            raise ValueError("in-place ops are not supported in as_kwargs mode")
        op = copy.deepcopy(op)
        op.device_option.CopyFrom(device_option)
        with temp_workspace():
            _feed_inputs(op, inputs, device_option, input_device_options)
            if init_net:
                workspace.RunNetOnce(init_net)
            workspace.RunOperatorOnce(op)
            outputs = [workspace.FetchBlob(n) for n in op.output]
            if as_kwargs:
                validator(**dict(zip(list(op.input) + list(op.output), list(inputs) + outputs)))
            else:
                validator(inputs=inputs, outputs=outputs)

    def assertRunOpRaises(
        self,
        device_option: Any,
        op: Any,
        inputs: list[Any],
        input_device_options: Any = None,
        exception: Any = (Exception,),
        regexp: str | None = None,
    ) -> None:
        """Running the op raises ``exception`` (matching ``regexp`` when given)."""
        op = copy.deepcopy(op)
        op.device_option.CopyFrom(device_option)
        with temp_workspace():
            _feed_inputs(op, inputs, device_option, input_device_options)
            if regexp is None:
                self.assertRaises(exception, workspace.RunOperatorOnce, op)
            else:
                self.assertRaisesRegex(exception, regexp, workspace.RunOperatorOnce, op)
