"""The operator registry: schemas (arity, in-place rules, typed args, devices, docs) and kernels.

An operator is a plain function ``fn(ctx, *inputs)`` registered with its schema::

    from asyncnet.core.registry import register_op, Arg

    @register_op("Scale", inputs=1, outputs=1, allow_inplace={0: 0},
                 args=[Arg("scale", float, 1.0, "multiplier")], doc="y = scale * x")
    def scale(ctx, x):
        return x * ctx.args["scale"]

Schemas are checked once, when a net is created (:func:`validate_op`), so a running net never
meets a malformed op. Gradients are registered beside the op with :func:`register_gradient`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncnet.core.bound import is_bound
from asyncnet.core.defs import DeviceOption, OperatorDef
from asyncnet.errors import NetDefinitionError, near_names

__all__ = [
    "Arg",
    "OpSchema",
    "OpContext",
    "register_op",
    "register_gradient",
    "register_no_gradient",
    "get_schema",
    "registered_ops",
    "validate_op",
]

_MISSING = object()


@dataclass(frozen=True)
class Arg:
    """A typed operator argument. ``Arg("axis", int, 1, "flatten from this axis")``.

    ``default=Arg.REQUIRED`` makes it mandatory; ``choices`` restricts values; ``type`` may be a
    tuple such as ``(int, float)``, or ``list`` for list-valued args (``item_type`` checks items).
    """

    REQUIRED = _MISSING
    name: str
    type: type | tuple[type, ...]
    default: Any = None
    doc: str = ""
    choices: Sequence[Any] | None = None
    item_type: type | tuple[type, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def coerce(self, value: Any, path: str) -> Any:
        """Check ``value`` against the arg's type (ints are accepted for floats)."""
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if isinstance(value, int) and not isinstance(value, bool) and int not in types:
            if float in types:
                value = float(value)
            elif bool in types and value in (0, 1):
                value = bool(value)
        if isinstance(value, bool) and bool not in types:
            raise NetDefinitionError(f"expected {_names_of(types)}, got bool {value!r}", path)
        if not isinstance(value, types):
            raise NetDefinitionError(f"expected {_names_of(types)}, got {type(value).__name__} {value!r}", path)
        if isinstance(value, list) and self.item_type is not None:
            items = self.item_type if isinstance(self.item_type, tuple) else (self.item_type,)
            for i, v in enumerate(value):
                if not isinstance(v, items) or (isinstance(v, bool) and bool not in items):
                    raise NetDefinitionError(f"expected {_names_of(items)} items, got {v!r}", f"{path}[{i}]")
            if float in items:
                value = [float(v) for v in value]
        if self.choices is not None and value not in self.choices:
            raise NetDefinitionError(f"expected one of {list(self.choices)}, got {value!r}", path)
        return value


def _names_of(types: Iterable[type]) -> str:
    return " or ".join(t.__name__ for t in types)


InplaceRule = Mapping[int, int] | Callable[[int, int], bool] | None


@dataclass
class OpSchema:
    """Everything the registry knows about one operator type."""

    type: str
    fn: Callable[..., Any]
    min_inputs: int
    max_inputs: int | None
    min_outputs: int
    max_outputs: int | None
    allow_inplace: InplaceRule = None
    enforce_inplace: InplaceRule = None
    args: dict[str, Arg] = field(default_factory=dict)
    devices: tuple[str, ...] = ("cpu",)
    differentiable: bool = False
    doc: str = ""
    gradient: Callable[..., Any] | None = None
    inputs_doc: Sequence[str] = ()
    outputs_doc: Sequence[str] = ()
    validate: Callable[[OperatorDef], None] | None = None
    specialize: Callable[..., Callable[..., Any] | None] | None = None
    extra_args: Callable[[str], Arg | None] | None = None

    def arity_text(self) -> str:
        return f"{_range_text(self.min_inputs, self.max_inputs)} -> {_range_text(self.min_outputs, self.max_outputs)}"


def _range_text(lo: int, hi: int | None) -> str:
    if hi == lo:
        return str(lo)
    return f"{lo}+" if hi is None else f"{lo}..{hi}"


def _inplace_allowed(rule: InplaceRule, i: int, o: int) -> bool:
    if rule is None:
        return False
    if callable(rule):
        return bool(rule(i, o))
    return rule.get(i) == o


def _enforced_pairs(rule: InplaceRule, n_in: int, n_out: int) -> list[tuple[int, int]]:
    if rule is None:
        return []
    if callable(rule):
        return [(i, o) for i in range(n_in) for o in range(n_out) if rule(i, o)]
    return [(i, o) for i, o in rule.items() if i < n_in and o < n_out]


_REGISTRY: dict[str, OpSchema] = {}


def _arity(spec: int | tuple[int, int | None]) -> tuple[int, int | None]:
    if isinstance(spec, int):
        return spec, spec
    lo, hi = spec
    return lo, hi


def register_op(
    op_type: str,
    *,
    inputs: int | tuple[int, int | None] = 1,
    outputs: int | tuple[int, int | None] = 1,
    allow_inplace: InplaceRule = None,
    enforce_inplace: InplaceRule = None,
    args: Sequence[Arg] = (),
    devices: Sequence[str] = ("cpu",),
    differentiable: bool = False,
    doc: str = "",
    inputs_doc: Sequence[str] = (),
    outputs_doc: Sequence[str] = (),
    validate: Callable[[OperatorDef], None] | None = None,
    specialize: Callable[..., Callable[..., Any] | None] | None = None,
    extra_args: Callable[[str], Arg | None] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``fn(ctx, *inputs)`` as operator ``op_type`` with its schema.

    ``validate(op_def)`` checks rules the other fields cannot express (such as "as many outputs
    as inputs"); it raises ValueError, which becomes a :class:`NetDefinitionError` at net creation.

    ``specialize(ctx, *inputs)`` returns a kernel ``fast(ctx, *inputs)`` for inputs like these,
    or None: ``fast`` must give ``fn``'s result for every input of the same type, dtype and
    shape (what ``fn`` checks beyond those, such as a value's range, ``fast`` checks itself),
    its outputs' type, dtype and shape must follow from its inputs', and when it raises it must
    not have written anything (but for the FloatingPointError of ``np.errstate(...="raise")``,
    which numpy raises after the writes, as ``fn`` would). The straight executor
    (:mod:`asyncnet.exec.straight`) then checks a net's inputs once per run instead of every
    kernel checking its own.

    ``extra_args(name)`` gives the :class:`Arg` of a name outside ``args`` that the op still
    takes (a family such as Caffe2's ``sub_policy_0_gamma``), or None; such args are typed and
    passed to the kernel only when given.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if op_type in _REGISTRY:
            raise ValueError(f"operator {op_type!r} is already registered")
        lo_i, hi_i = _arity(inputs)
        lo_o, hi_o = _arity(outputs)
        _REGISTRY[op_type] = OpSchema(
            type=op_type,
            fn=fn,
            min_inputs=lo_i,
            max_inputs=hi_i,
            min_outputs=lo_o,
            max_outputs=hi_o,
            allow_inplace=allow_inplace,
            enforce_inplace=enforce_inplace,
            args={a.name: a for a in args},
            devices=tuple(devices),
            differentiable=differentiable,
            doc=doc or (fn.__doc__ or "").strip(),
            inputs_doc=tuple(inputs_doc),
            outputs_doc=tuple(outputs_doc),
            validate=validate,
            specialize=specialize,
            extra_args=extra_args,
        )
        return fn

    return deco


def register_gradient(op_type: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator attaching a gradient maker to an already registered operator."""

    def deco(maker: Callable[..., Any]) -> Callable[..., Any]:
        schema = get_schema(op_type)
        schema.gradient = maker
        schema.differentiable = True
        return maker

    return deco


def _no_gradient_maker(op: OperatorDef, output_grads: list[Any]) -> tuple[list[OperatorDef], list[None]]:
    return [], [None] * len(op.inputs)


def register_no_gradient(*op_types: str) -> None:
    """Caffe2's ``NO_GRADIENT``: the gradient stops at these ops (no backward op, no input gradient).

    Unlike an op with no gradient registered at all (an error when it lies on the path to the
    loss, as Caffe2's "gradient maker is not implemented"), a fill or ``StopGradient`` on that
    path just cuts it: autodiff gives its inputs no gradient.
    """
    for op_type in op_types:
        get_schema(op_type).gradient = _no_gradient_maker


def get_schema(op_type: str) -> OpSchema:
    """The schema of ``op_type``; unknown types raise :class:`NetDefinitionError` with near names."""
    try:
        return _REGISTRY[op_type]
    except KeyError:
        near = near_names(op_type, _REGISTRY)
        hint = f" Did you mean {', '.join(repr(n) for n in near)}?" if near else ""
        raise NetDefinitionError(f"unknown operator type {op_type!r}.{hint}") from None


def registered_ops() -> dict[str, OpSchema]:
    """A snapshot of every registered schema, by type name."""
    return dict(sorted(_REGISTRY.items()))


def validate_op(op: OperatorDef, index: int, net_device: DeviceOption | None = None) -> tuple[OpSchema, dict[str, Any]]:
    """Check ``op`` against its schema; return the schema and the typed args with defaults filled.

    Every failure is a :class:`NetDefinitionError` naming ``ops[index]``, the type and the rule.
    """
    try:
        schema = get_schema(op.type)
    except NetDefinitionError as e:
        raise NetDefinitionError(str(e), f"ops[{index}].type") from None
    n_in, n_out = len(op.inputs), len(op.outputs)
    lo, hi = schema.min_inputs, schema.max_inputs
    if n_in < lo or (hi is not None and n_in > hi):
        raise NetDefinitionError(f"expected {_range_text(lo, hi)} inputs, got {n_in}", _where(op, index))
    lo, hi = schema.min_outputs, schema.max_outputs
    if n_out < lo or (hi is not None and n_out > hi):
        raise NetDefinitionError(f"expected {_range_text(lo, hi)} outputs, got {n_out}", _where(op, index))
    _check_inplace(op, schema, index)
    args = _typed_args(op, schema, index)  # first: an op's own validator may rely on the declared arg types
    if schema.validate is not None:
        try:
            schema.validate(op)
        except (ValueError, TypeError, OverflowError) as e:
            raise NetDefinitionError(str(e), _where(op, index)) from None
    device = op.device_option or net_device
    device_type = _DEFAULT_DEVICE_TYPE if device is None else device.device_type
    if device_type not in schema.devices:
        raise NetDefinitionError(
            f"device {device_type!r} not supported; the op runs on {list(schema.devices)}", _where(op, index)
        )
    return schema, args


_DEFAULT_DEVICE_TYPE = DeviceOption().device_type


def _where(op: OperatorDef, index: int) -> str:
    """``ops[i] (Type 'name')``: built only for an error (a million-op net validates each op)."""
    return f"ops[{index}] ({op.type}{' ' + repr(op.name) if op.name else ''})"


def _check_inplace(op: OperatorDef, schema: OpSchema, index: int) -> None:
    ins, outs = op.inputs, op.outputs
    enforce = schema.enforce_inplace
    if enforce is not None:
        for i, o in _enforced_pairs(enforce, len(ins), len(outs)):
            if ins[i] != outs[o]:
                raise NetDefinitionError(
                    f"input {i} {ins[i]!r} and output {o} {outs[o]!r} must be the same blob (in-place enforced)",
                    _where(op, index),
                )
    for o, out in enumerate(outs):
        if out not in ins:  # the common case, one C-level scan: no pair to check
            continue
        for i, inp in enumerate(ins):
            if inp == out and not (_inplace_allowed(schema.allow_inplace, i, o) or _inplace_allowed(enforce, i, o)):
                raise NetDefinitionError(f"output {o} {out!r} may not overwrite input {i} in place", _where(op, index))
    if len(outs) > 1 and len(set(outs)) != len(outs):
        raise NetDefinitionError(f"outputs must be distinct blobs, got {outs}", _where(op, index))


ENGINE = "engine"  # Caffe2's OperatorDef.engine ("", "CUDNN", ...): taken on every op, a str, and ignored


def _typed_args(op: OperatorDef, schema: OpSchema, index: int) -> dict[str, Any]:
    unknown = [k for k in op.args if k not in schema.args and k != ENGINE]
    extra = {k: spec for k in unknown if schema.extra_args is not None and (spec := schema.extra_args(k)) is not None}
    unknown = [k for k in unknown if k not in extra]
    if unknown:
        k = unknown[0]
        near = near_names(k, schema.args)
        hint = f"; did you mean {near[0]!r}?" if near else f"; it takes {sorted(schema.args) or 'no arguments'}"
        raise NetDefinitionError(f"unknown argument {k!r}{hint}", _where(op, index))
    if ENGINE in op.args and ENGINE not in schema.args and not isinstance(op.args[ENGINE], str):
        raise NetDefinitionError(
            f"expected a str engine (Caffe2's engine name, ignored), got {op.args[ENGINE]!r}", _where(op, index)
        )
    typed: dict[str, Any] = {}
    for name, spec in schema.args.items():
        if name in op.args:
            value = op.args[name]
            if type(value) is spec.type and spec.choices is None and spec.item_type is None:
                typed[name] = value  # what coerce returns for a value of exactly the arg's type
            else:
                typed[name] = spec.coerce(value, f"{_where(op, index)}.args.{name}")
        elif spec.required:
            raise NetDefinitionError(f"missing required argument {name!r}", _where(op, index))
        else:
            typed[name] = spec.default
    for name, spec in extra.items():
        typed[name] = spec.coerce(op.args[name], f"{_where(op, index)}.args.{name}")
    return typed


_NEVER = threading.Event()  # the cancel flag of an op not (yet) in a net: never set


class OpContext:
    """What a kernel sees besides its inputs: typed args, its def, index, device, output lookup,
    and whether its net's run was cancelled (:meth:`cancelled`, :meth:`wait_cancelled`)."""

    __slots__ = ("args", "op", "index", "device", "_blobs", "cancel_flag", "__weakref__")

    def __init__(
        self, op: OperatorDef, index: int, args: dict[str, Any], device: DeviceOption, blobs: Mapping[str, Any]
    ):
        self.op = op
        self.index = index
        self.args = args
        self.device = device
        self._blobs = blobs
        self.cancel_flag: threading.Event = _NEVER  # the net's, set by its constructor

    def cancelled(self) -> bool:
        """Whether the run of this op's net was cancelled or failed elsewhere (Caffe2's
        ``OperatorBase::Cancel``): an op that blocks or loops should check it and return."""
        return self.cancel_flag.is_set()

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s, waking early when the run is cancelled; True if it was."""
        return self.cancel_flag.wait(timeout)

    def output(self, i: int) -> Any:
        """The current value of output blob ``i``, or None if it does not exist yet."""
        return self._blobs.get(self.op.outputs[i])

    def bound_output(self, i: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """Output blob ``i``'s current array when it is bound (a gradient bucket's view, see
        :mod:`asyncnet.core.bound`), C-contiguous, of this ``shape`` and ``dtype``: the kernel
        writes its result into it (``out=``). Else None: the kernel returns a fresh array."""
        a = self._blobs.get(self.op.outputs[i])
        if is_bound(a) and a.shape == shape and a.dtype == dtype and a.flags.c_contiguous:
            return a
        return None
