"""Fill operators: create tensors from constants or seeded random distributions.

Each takes either ``shape`` or, with ``input_as_shape=1``, an input holding the shape, or an
input whose shape it copies. Random fills take their seed as Caffe2 does, from the op's (or
else the net's) ``DeviceOption.random_seed``: each op instance gets its own generator seeded
with it when it first runs, and later runs continue that stream, so a net created again (in any
workspace) repeats its values. asyncnet adds a ``seed`` argument: when >= 0 it wins and the op
gives the same values on every run. With neither, every run draws fresh entropy::

    >>> import asyncnet as an
    >>> def init():
    ...     net = an.Net("init", device_option=an.DeviceOption(random_seed=7))
    ...     _ = net.GaussianFill([], "w", shape=[2])
    ...     return net
    >>> ws1, ws2 = an.Workspace(), an.Workspace()
    >>> ws1.run_net_once(init()); ws2.run_net_once(init())
    >>> bool((ws1.fetch("w") == ws2.fetch("w")).all())
    True

Where the result lives: a fill whose DeviceOption is ``cuda`` gives a torch tensor on that device;
on the CPU it gives a numpy array unless ``library="torch"`` asks for a torch CPU tensor (or its
input, whose shape it copies or that holds the shape, is a torch tensor: the result follows it). The values are drawn by
numpy's generator on every library, so one seed gives the same initial weights to a numpy and a
torch net.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops._check import array, check_alloc
from asyncnet.ops.logic import CAFFE2_DTYPES, cast_dtype
from asyncnet.tensor.namespace import cpu_tensors, is_torch, to_numpy
from asyncnet.tensor.place import device_name, place, place_like

DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
    "uint8": np.uint8,
}
FLOAT_NAMES = ["float32", "float64", "float16"]

_SHAPE_ARGS = [
    Arg("shape", list, [], "output shape (ignored when an input is given)", item_type=int),
    Arg("input_as_shape", bool, False, "when set, input 0 holds the output shape as 1-D ints"),
    Arg("extra_shape", list, [], "dims appended to the shape taken from the input", item_type=int),
    Arg(
        "library",
        str,
        "",
        "numpy or torch: the result's library (default: numpy on cpu, torch on cuda, or the input's)",
        choices=("", "numpy", "torch"),
    ),
]
_SEED = Arg(
    "seed",
    int,
    -1,
    "asyncnet's: a seed >= 0 gives the same values on every run; -1 (default) uses "
    "DeviceOption.random_seed as Caffe2 does, or fresh entropy when there is none",
)


def _shape(ctx: Any, inputs: tuple[Any, ...]) -> tuple[int, ...]:
    a = ctx.args
    if inputs:
        x = array(ctx, inputs[0], 0)
        if a["input_as_shape"]:
            x = to_numpy(x)
            if x.ndim != 1 or x.dtype.kind not in "iu":
                raise ValueError(f"expected a 1-D int array as shape in input 0, got {x.dtype} {x.shape}")
            base = tuple(int(d) for d in x)
        else:
            base = tuple(x.shape)
        shape = base + tuple(a["extra_shape"])
    else:
        if a["input_as_shape"]:
            raise ValueError("input_as_shape=1 needs an input holding the shape")
        shape = tuple(a["shape"])
    if any(d < 0 for d in shape):
        raise ValueError(f"expected non-negative dims, got shape {shape}")
    if math.prod(shape) >= 2**63:
        raise ValueError(f"the output shape {shape} has more than 2**63 elements")
    return shape


def _alloc(shape: tuple[int, ...], make: Any) -> np.ndarray:
    """``make()``, with a MemoryError for a too large ``shape`` told in the op's terms."""
    check_alloc(math.prod(shape), 8, f"the output shape {shape}")  # the draws are float64 or int64
    try:
        return make()
    except MemoryError as exc:
        raise ValueError(f"the output shape {shape} ({math.prod(shape)} elements) is too large to allocate") from exc


def _out(ctx: Any, inputs: tuple[Any, ...], value: np.ndarray) -> Any:
    """The filled numpy array placed where the op's result lives (see the module docstring)."""
    lib = ctx.args["library"]
    if not lib and not inputs and ctx.device.device_type == "cpu":
        return value  # the common case: a numpy array on the host
    like = inputs[0] if inputs and is_torch(inputs[0]) else None  # whose shape it copies, or that holds the shape
    if not lib:
        lib = "torch" if ctx.device.device_type == "cuda" or like is not None else "numpy"
    if lib == "numpy":
        if ctx.device.device_type == "cuda":
            raise ValueError(
                "library='numpy' on a cuda DeviceOption; expected library 'torch' (numpy arrays live on the host)"
            )
        return value
    if like is not None and ctx.device.device_type == "cpu":
        return place_like(value, like)
    device = device_name(ctx.device)  # a cuda op's result is on its device (Caffe2); else the host
    return place(value, device, "torch")


_STREAM = "_random_seed_stream"  # key in the op instance's own args dict holding its generator


def _rng(ctx: Any) -> np.random.Generator:
    """The seed argument's fresh generator, else the op's stream from DeviceOption.random_seed, else entropy."""
    seed = ctx.args["seed"]
    if seed >= 0:
        return np.random.default_rng(seed)
    if ctx.device.random_seed is None:
        return np.random.default_rng()
    stream = ctx.args.get(_STREAM)
    if stream is None:  # one per op instance (its args dict is its own), like Caffe2's CPUContext
        stream = ctx.args[_STREAM] = np.random.default_rng(ctx.device.random_seed)
    return stream


def fill_dtype(dtype: str | int, value: Any = 0.0) -> np.dtype:
    """The numpy dtype a fill's ``dtype`` arg names: a name of :data:`DTYPES`, a Caffe2 name
    (``"FLOAT"``, any case) or TensorProto.DataType number; ``""`` infers it from ``value`` as
    Caffe2's ConstantFill does (an int, or a bool, gives int64; a float gives float32).

    >>> fill_dtype(""), fill_dtype("", 3), fill_dtype(10), fill_dtype("DOUBLE")
    (dtype('float32'), dtype('int64'), dtype('int64'), dtype('float64'))
    """
    if dtype == "":
        return np.dtype(np.int64 if isinstance(value, (int, np.integer, bool, np.bool_)) else np.float32)
    if isinstance(dtype, str) and dtype in DTYPES:
        return np.dtype(DTYPES[dtype])
    try:
        return cast_dtype(dtype)
    except ValueError:
        raise ValueError(
            f"dtype {dtype!r}: expected one of {sorted(DTYPES)}, a Caffe2 name such as 'FLOAT' or a "
            f"TensorProto.DataType number in {sorted(CAFFE2_DTYPES)}"
        ) from None


_DTYPE_KEY = "_fill_dtype"  # the resolved dtype, cached in the op instance's own args dict


def _validate_dtype(op: OperatorDef) -> None:
    value = op.args.get("value", 0.0)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError(f"{op.type}: value {value} does not fit a 64-bit integer (Caffe2's int argument)")
    dtype = fill_dtype(op.args.get("dtype", ""), value)
    if isinstance(value, float) and not math.isfinite(value) and dtype.kind in "iu":
        raise ValueError(f"{op.type}: value {value} cannot fill a tensor of dtype {dtype.name}")
    if isinstance(value, int) and not isinstance(value, bool) and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{op.type}: value {value} does not fit dtype {dtype.name} [{info.min}, {info.max}]")


def _specialize_constant_fill(ctx: Any, *inputs: Any) -> Any:
    """The value in the shape of one numpy input (the loss gradient's seed in a train net)."""
    a = ctx.args
    if not (
        len(inputs) == 1
        and type(inputs[0]) is np.ndarray
        and not a["input_as_shape"]
        and not a["extra_shape"]
        and not a["library"]
        and ctx.device.device_type == "cpu"
    ):
        return None
    value, dtype = a["value"], fill_dtype(a["dtype"], a["value"])
    if not inputs[0].ndim and type(value) is float and dtype.kind == "f":
        return lambda ctx, x: np.array(value, dtype)  # the same rounding as copyto's, in one call

    def fill_like(ctx: Any, x: np.ndarray) -> np.ndarray:
        out = np.empty(x.shape, dtype)
        np.copyto(out, value, casting="unsafe")  # np.full's own two steps
        return out

    return fill_like


@register_op(
    "ConstantFill",
    inputs=(0, 1),
    outputs=1,
    devices=("cpu", "cuda"),
    validate=_validate_dtype,
    specialize=_specialize_constant_fill,
    doc="Fill a tensor of `shape` with `value`. Without `dtype` the value's type decides, as in "
    "Caffe2: an int (or bool) gives int64, a float float32.",
    args=[
        *_SHAPE_ARGS,
        Arg("value", (float, int, bool), 0.0, "fill value"),
        Arg(
            "dtype",
            (str, int),
            "",
            "output dtype: a numpy name, a Caffe2 name or TensorProto.DataType number; empty: from `value`",
        ),
    ],
)
def constant_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    a = ctx.args
    dtype = a.get(_DTYPE_KEY)
    if dtype is None:
        dtype = a[_DTYPE_KEY] = fill_dtype(a["dtype"], a["value"])
    if (
        len(inputs) == 1
        and not a["input_as_shape"]
        and not a["extra_shape"]
        and not a["library"]
        and ctx.device.device_type == "cpu"
    ):
        x = inputs[0]  # shaped like a host input: the result in its library, without _shape and _out
        if type(x) is np.ndarray:
            if not x.ndim and type(a["value"]) is float and dtype.kind == "f":  # a loss's gradient seed
                return np.array(a["value"], dtype)  # the same rounding as copyto's, in one call
            value = np.empty(x.shape, dtype)
            np.copyto(value, a["value"], casting="unsafe")  # np.full's own two steps
            return value
        if cpu_tensors(x) and dtype.kind == "f":
            torch = sys.modules["torch"]  # a tensor exists: torch is imported
            with np.errstate(
                over="ignore"
            ):  # numpy's rounding (1e300 in float32 is inf, as on numpy); torch refuses it
                value = float(np.asarray(a["value"]).astype(dtype))
            return torch.full(tuple(x.shape), value, dtype=getattr(torch, dtype.name))
    shape = _shape(ctx, inputs)
    return _out(ctx, inputs, _alloc(shape, lambda: np.full(shape, a["value"], dtype=dtype)))


@register_op(
    "GaussianFill",
    inputs=(0, 1),
    outputs=1,
    devices=("cpu", "cuda"),
    doc="Fill with samples of N(mean, std^2).",
    args=[
        *_SHAPE_ARGS,
        Arg("mean", float, 0.0),
        Arg("std", float, 1.0),
        _SEED,
        Arg("dtype", str, "float32", "output dtype", choices=FLOAT_NAMES),
    ],
)
def gaussian_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    a = ctx.args
    if not a["std"] >= 0:
        raise ValueError(f"expected std >= 0, got {a['std']}")
    shape = _shape(ctx, inputs)  # std + 0.0: numpy refuses a -0.0 scale
    return _out(
        ctx,
        inputs,
        _alloc(shape, lambda: _rng(ctx).normal(a["mean"], a["std"] + 0.0, shape)).astype(DTYPES[a["dtype"]]),
    )


def _validate_uniform(op: OperatorDef) -> None:
    if len(op.inputs) == 2:
        raise ValueError(f"{op.type} takes 0 or 1 inputs (the shape), or 3 (shape, min, max); got 2")
    if len(op.inputs) == 3 and ({"min", "max"} & set(op.args)):
        raise ValueError(f"{op.type}: min and max come from inputs 1 and 2 here; the args cannot be set as well")


def _bounds(ctx: Any, inputs: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any, Any]:
    """The shape inputs and (min, max): from the args, or (Caffe2) from scalar inputs 1 and 2."""
    if len(inputs) < 3:
        return inputs, ctx.args["min"], ctx.args["max"]
    lo, hi = (to_numpy(array(ctx, inputs[i], i)) for i in (1, 2))
    for i, v in ((1, lo), (2, hi)):
        if v.size != 1:
            raise ValueError(f"expected a scalar {'min' if i == 1 else 'max'} in input {i}, got shape {v.shape}")
    return inputs[:1], lo.reshape(()).item(), hi.reshape(()).item()


def _uniform(ctx: Any, inputs: tuple[Any, ...], draw: Any, dtype: Any) -> Any:
    """Shared body of UniformFill / UniformIntFill: min > max from inputs gives dim 0 of size 0 (Caffe2)."""
    shape_in, lo, hi = _bounds(ctx, inputs)
    shape = _shape(ctx, shape_in)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"expected finite min and max, got min={lo} max={hi}")
    if lo > hi:
        if len(inputs) < 3:
            raise ValueError(f"expected min <= max, got min={lo} max={hi}")
        return _out(ctx, shape_in, np.zeros((0, *shape[1:]), dtype))
    if dtype == np.int32 and not (-(2**31) <= lo and hi < 2**31):
        raise ValueError(f"expected min and max in the int32 range, got min={lo} max={hi}")
    return _out(ctx, shape_in, _alloc(shape, lambda: draw(_rng(ctx), lo, hi, shape)).astype(dtype))


@register_op(
    "UniformFill",
    inputs=(0, 3),
    outputs=1,
    devices=("cpu", "cuda"),
    validate=_validate_uniform,
    doc="Fill with samples of U[min, max); min and max may be scalar inputs 1 and 2 (then min > max "
    "gives an empty dim 0, as Caffe2).",
    args=[
        *_SHAPE_ARGS,
        Arg("min", float, 0.0),
        Arg("max", float, 1.0),
        _SEED,
        Arg("dtype", str, "float32", "output dtype", choices=FLOAT_NAMES),
    ],
)
def uniform_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    # + 0.0 turns a -0.0 bound (numpy refuses U[0, -0)) into 0.0 and leaves every other value as it is
    return _uniform(
        ctx, inputs, lambda g, lo, hi, shape: g.uniform(lo + 0.0, hi + 0.0, shape), DTYPES[ctx.args["dtype"]]
    )


@register_op(
    "UniformIntFill",
    inputs=(0, 3),
    outputs=1,
    devices=("cpu", "cuda"),
    validate=_validate_uniform,
    doc="Fill with int32 samples uniform on [min, max], both ends included (Caffe2's); min and max "
    "may be scalar inputs 1 and 2.",
    args=[*_SHAPE_ARGS, Arg("min", int, 0), Arg("max", int, 1), _SEED],
)
def uniform_int_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    return _uniform(ctx, inputs, lambda g, lo, hi, shape: g.integers(int(lo), int(hi), shape, endpoint=True), np.int32)


@register_op(
    "XavierFill",
    inputs=(0, 1),
    outputs=1,
    devices=("cpu", "cuda"),
    doc="Fill with U[-s, s], s = sqrt(3 / fan_in), fan_in = size / shape[0] (Caffe2's Xavier).",
    args=[*_SHAPE_ARGS, _SEED, Arg("dtype", str, "float32", "output dtype", choices=FLOAT_NAMES)],
)
def xavier_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    shape = _shape(ctx, inputs)
    size = int(np.prod(shape, dtype=np.int64))
    if not shape or shape[0] == 0 or size == 0:
        raise ValueError(f"XavierFill needs a non-empty shape with shape[0] > 0, got {shape}")
    scale = np.sqrt(3.0 / (size / shape[0]))
    return _out(
        ctx, inputs, _alloc(shape, lambda: _rng(ctx).uniform(-scale, scale, shape)).astype(DTYPES[ctx.args["dtype"]])
    )


@register_op(
    "MSRAFill",
    inputs=(0, 1),
    outputs=1,
    devices=("cpu", "cuda"),
    doc="Fill with N(0, 2 / fan_out), fan_out = size / shape[1] (Caffe2's MSRAFill; at least 2-D).",
    args=[*_SHAPE_ARGS, _SEED, Arg("dtype", str, "float32", "output dtype", choices=FLOAT_NAMES)],
)
def msra_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    shape = _shape(ctx, inputs)
    if len(shape) < 2 or shape[1] == 0:
        raise ValueError(f"MSRAFill needs a shape of at least 2 dims with shape[1] > 0, got {shape}")
    fan_out = int(np.prod(shape, dtype=np.int64)) // shape[1]
    std = np.sqrt(2.0 / fan_out) if fan_out else 0.0
    return _out(ctx, inputs, _alloc(shape, lambda: _rng(ctx).normal(0.0, std, shape)).astype(DTYPES[ctx.args["dtype"]]))


@register_op(
    "RangeFill",
    inputs=(0, 1),
    outputs=1,
    devices=("cpu", "cuda"),
    doc="Fill with 0, 1, 2, ... in row-major order (float32, as Caffe2's; for checking reshapes).",
    args=[*_SHAPE_ARGS],
)
def range_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    shape = _shape(ctx, inputs)
    return _out(ctx, inputs, _alloc(shape, lambda: np.arange(math.prod(shape), dtype=np.float32).reshape(shape)))


@register_op(
    "DiagonalFill",
    inputs=(0, 1),
    outputs=1,
    devices=("cpu", "cuda"),
    validate=_validate_dtype,
    doc="Zeros with `value` on the diagonal: every (shape[1] + 1)-th element of the flat array in 2-D "
    "(a tall matrix wraps, as Caffe2's), the entries [i, i, ..., i] past 2-D (all dims equal). "
    "`dtype` as ConstantFill's.",
    args=[
        *_SHAPE_ARGS,
        Arg("value", (float, int, bool), 0.0, "diagonal value"),
        Arg("dtype", (str, int), "", "as ConstantFill's"),
    ],
)
def diagonal_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    a, shape = ctx.args, _shape(ctx, inputs)
    if len(shape) < 2:
        raise ValueError(f"DiagonalFill needs a shape of at least 2 dims, got {shape}")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise ValueError(f"DiagonalFill: all dims must be equal past 2-D, got {shape}")
    y = _alloc(shape, lambda: np.zeros(shape, fill_dtype(a["dtype"], a["value"])))
    # Caffe2's stride over the flat array: a tall 2-D matrix wraps (5x3: [0,0] [1,1] [2,2] [4,0])
    step = shape[1] + 1 if len(shape) == 2 else 1 + int(np.cumprod(shape[:-1]).sum())
    y.reshape(-1)[::step] = a["value"]
    return _out(ctx, inputs, y)


@register_op(
    "LengthsRangeFill",
    inputs=1,
    outputs=1,
    devices=("cpu",),
    inputs_doc=("lengths: 1-D int32 or int64 segment lengths",),
    outputs_doc=("the ranges, int32",),
    doc="[4, 3, 1] -> [0, 1, 2, 3, 0, 1, 2, 0]: one range(0, length) per segment (Caffe2's).",
)
def lengths_range_fill(ctx: Any, lengths: Any) -> Any:
    given = array(ctx, lengths, 0)
    lengths = to_numpy(given)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(f"expected 1-D int lengths in input 0, got {lengths.dtype} {lengths.shape}")
    if (lengths < 0).any():
        raise ValueError(f"expected lengths >= 0, got {lengths[lengths < 0][:3].tolist()}")
    if lengths.dtype == np.uint64:
        if lengths.size and int(lengths.max()) >= 2**63:
            raise ValueError(f"expected lengths below 2**63, got {int(lengths.max())}")
        lengths = lengths.astype(np.int64)
    total = int(lengths.sum(dtype=np.int64)) if lengths.dtype.kind == "i" else int(lengths.sum())
    check_alloc(total, 16, f"the output of {total} elements (the sum of the lengths)")
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    ranges = (np.arange(total, dtype=np.int64) - starts).astype(np.int32)
    return place_like(ranges, given) if is_torch(given) else ranges


# -- GivenTensorFill and its typed variants: the tensor's values spelled out in the op ----------
_GIVEN_TYPES = {  # op type -> (dtype, value item types)
    "GivenTensorFill": (None, (float, int)),
    "GivenTensorDoubleFill": (np.float64, (float, int)),
    "GivenTensorBoolFill": (np.bool_, (bool, int)),
    "GivenTensorInt16Fill": (np.int16, (int,)),
    "GivenTensorIntFill": (np.int32, (int,)),
    "GivenTensorInt64Fill": (np.int64, (int,)),
}
_VALUES_KEY = "_given_values"  # the values as an array, cached in the op instance's own args dict


def _given_dtype(op_type: str, args: dict[str, Any]) -> np.dtype:
    fixed, asked = _GIVEN_TYPES[op_type][0], args.get("dtype", "")
    if fixed is None:
        return fill_dtype(asked or "float32")
    if asked not in ("", None):
        fill_dtype(asked)  # a dtype that names nothing is still an error
    # as Caffe2's GivenTensorFillOp<T>: only the untyped fill reads ``dtype``; the typed ones
    # ignore it (Caffe2's own test fills doubles with dtype=INT32)
    return np.dtype(fixed)


def _validate_given(op: OperatorDef) -> None:
    dtype, items = _given_dtype(op.type, op.args), _GIVEN_TYPES[op.type][1]
    values = op.args.get("values", [])
    exact = {bool, int} if op.type == "GivenTensorBoolFill" else set(items)
    if not set(map(type, values)) <= exact:  # one pass in C; the slow scan below only names the culprit
        _refuse_given_item(op, values, items)
    if dtype.kind in "iu" and values and not np.iinfo(dtype).min <= min(values) <= max(values) <= np.iinfo(dtype).max:
        info = np.iinfo(dtype)
        out = [v for v in values if not info.min <= v <= info.max]
        raise ValueError(f"{op.type}: values {out[:3]} do not fit {dtype.name} [{info.min}, {info.max}]")
    if dtype == np.bool_ and any(v not in (0, 1) for v in values):
        raise ValueError(f"{op.type}: expected bool values (or 0/1), got {[v for v in values if v not in (0, 1)][:3]}")
    if not op.inputs:
        shape = op.args.get("shape", [])
        size = math.prod(shape)  # Python ints: a huge shape is a mismatch, not an overflow
        if size != len(values):
            raise ValueError(f"{op.type}: shape {list(shape)} holds {size} values, but `values` has {len(values)}")


def _refuse_given_item(op: OperatorDef, values: list[Any], items: tuple[type, ...]) -> None:
    bad = next(
        (v for v in values if not isinstance(v, items) or (op.type != "GivenTensorBoolFill" and isinstance(v, bool))),
        None,
    )
    if bad is not None:
        raise ValueError(f"{op.type}: expected {' or '.join(t.__name__ for t in items)} values, got {bad!r}")


def _register_given(op_type: str) -> None:
    fixed = _GIVEN_TYPES[op_type][0]
    dtype_arg = Arg(
        "dtype",
        (str, int),
        "float32" if fixed is None else "",
        "output dtype (a numpy name, Caffe2 name or TensorProto.DataType number)"
        if fixed is None
        else f"ignored, as in Caffe2: this op always fills {np.dtype(fixed).name}",
    )
    what = "float32 unless `dtype` says" if fixed is None else np.dtype(fixed).name

    @register_op(
        op_type,
        inputs=(0, 1),
        outputs=1,
        devices=("cpu", "cuda"),
        validate=_validate_given,
        args=[*_SHAPE_ARGS, Arg("values", list, Arg.REQUIRED, "the values, row-major (flattened)"), dtype_arg],
        doc=f"Fill a tensor of `shape` with the given `values` ({what}); its size must equal len(values).",
    )
    def given_tensor_fill(ctx: Any, *inputs: Any) -> np.ndarray:
        a = ctx.args
        values = a.get(_VALUES_KEY)
        if values is None:
            values = a[_VALUES_KEY] = np.asarray(a["values"], dtype=_given_dtype(op_type, a))
        shape = _shape(ctx, inputs)
        if values.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(
                f"shape {shape} holds {int(np.prod(shape, dtype=np.int64))} values, but `values` has {values.size}"
            )
        return _out(ctx, inputs, values.reshape(shape).copy())


for _t in _GIVEN_TYPES:
    _register_given(_t)

# Caffe2's NO_GRADIENT: on the path to a loss a fill cuts the gradient (its input only gives a shape).
register_no_gradient(
    "ConstantFill",
    "GaussianFill",
    "UniformFill",
    "UniformIntFill",
    "XavierFill",
    "MSRAFill",
    "RangeFill",
    "DiagonalFill",
    "LengthsRangeFill",
    *_GIVEN_TYPES,
)
