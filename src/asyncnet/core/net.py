"""The net builder users write nets with: ``net.FC(["x", "w", "b"], "h")``.

Any registered operator type is a method of :class:`Net`; calling it appends an
:class:`OperatorDef` and returns references to its outputs::

    >>> import asyncnet as an
    >>> net = an.Net("mlp", type="async_scheduling", num_workers=2)
    >>> h = net.FC(["x", "w", "b"], "h")
    >>> r = net.Relu(h, h)
    >>> [op.type for op in net.to_def().ops]
    ['FC', 'Relu']

Outputs may be names, a list of names, or a count (names are generated, unique in the net).
Op types, argument names and arities are checked as each op is added. ``dir(net)`` lists the
op methods and each carries its operator's schema as its doc and signature::

    >>> "FC" in dir(net)
    True
    >>> print(net.FC.__doc__.splitlines()[0])
    FC  (3 -> 1; devices: cpu, cuda; differentiable)
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from asyncnet.core.defs import DeviceOption, NetDef, OperatorDef
from asyncnet.core.registry import OpSchema, get_schema, registered_ops, validate_op

__all__ = ["Net", "BlobRef", "describe_schema"]


class BlobRef(str):
    """A blob name returned by the builder (a ``str``, so it goes wherever a name does)."""

    __slots__ = ()


BlobsArg = str | Sequence[str] | None


def _names(blobs: BlobsArg) -> list[str]:
    if blobs is None:
        return []
    if isinstance(blobs, str):
        return [str(blobs)]
    return [str(b) for b in blobs]


def _arg(value: Any) -> Any:
    if isinstance(value, np.ndarray):  # flattened, as Caffe2's utils.MakeArgument does
        return [_arg(v) for v in value.ravel().tolist()]
    if isinstance(value, (list, tuple)):
        return [_arg(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


class Net:
    """Builds a :class:`NetDef`. ``type`` is "simple" (default) or "async_scheduling".

    ``Net(net_def)`` continues an existing :class:`NetDef` (a copy; its fields are the net's)::

        >>> import asyncnet as an
        >>> more = an.Net(an.NetDef("n", ops=[an.OperatorDef("Relu", ["x"], ["y"])]))
        >>> _ = more.Sigmoid("y", "z"); [op.type for op in more.ops]
        ['Relu', 'Sigmoid']
    """

    def __init__(
        self,
        name: str | NetDef,
        type: str = "simple",
        num_workers: int | None = None,
        device_option: DeviceOption | None = None,
        own_pool: bool = False,
        intra_op_threads: int | None = None,
    ):
        self._auto = 0
        if isinstance(name, NetDef):
            given = {
                k: v
                for k, v in (
                    ("type", type != "simple"),
                    ("num_workers", num_workers is not None),
                    ("device_option", device_option is not None),
                    ("own_pool", own_pool),
                    ("intra_op_threads", intra_op_threads is not None),
                )
                if v
            }
            if given:
                raise TypeError(f"Net(net_def) takes its fields from the NetDef; got {sorted(given)} as well")
            self._def = dataclasses.replace(
                name,
                ops=list(name.ops),
                external_inputs=list(name.external_inputs),
                external_outputs=list(name.external_outputs),
            )
            self._auto = len(name.ops)
            return
        if not isinstance(name, str):
            raise TypeError(f"Net takes a name (str) or a NetDef, got {name.__class__.__name__}")
        self._def = NetDef(
            name,
            type=type,
            num_workers=num_workers,
            device_option=device_option,
            own_pool=own_pool,
            intra_op_threads=intra_op_threads,
        )

    @property
    def name(self) -> str:
        return self._def.name

    @property
    def ops(self) -> list[OperatorDef]:
        """The ops added so far (the live list)."""
        return self._def.ops

    def to_def(self) -> NetDef:
        """A copy of the definition built so far."""
        return NetDef.from_dict(self._def.to_dict())

    def snapshot(self) -> NetDef:
        """The definition built so far, for a workspace to instantiate (it validates each op
        once itself). The op list is copied, the ops are shared: ops are values the builder
        never edits once added, and a million-op net would otherwise be held twice. Use
        :meth:`to_def` for an independent copy (it goes through the strict JSON parser)."""
        d = self._def
        return dataclasses.replace(
            d, ops=list(d.ops), external_inputs=list(d.external_inputs), external_outputs=list(d.external_outputs)
        )

    def to_json(self, indent: int | None = 2) -> str:
        return self._def.to_json(indent)

    def add_external_inputs(self, *names: str) -> None:
        self._def.external_inputs.extend(names)

    def add_external_outputs(self, *names: str) -> None:
        self._def.external_outputs.extend(names)

    def add_op(
        self,
        op_type: str,
        inputs: BlobsArg = None,
        outputs: BlobsArg | int = None,
        *,
        name: str = "",
        device_option: DeviceOption | None = None,
        control_inputs: BlobsArg = None,
        **args: Any,
    ) -> BlobRef | tuple[BlobRef, ...] | None:
        """Append one op; returns its output reference, a tuple of them, or None.

        A known argument (or ``engine``) given as None is left out, as Caffe2's CreateOperator does
        (``engine=None`` is no engine); an unknown one is still refused, whatever its value.
        """
        schema = get_schema(op_type)
        args = {k: v for k, v in args.items() if v is not None or (k not in schema.args and k != "engine")}
        if outputs is None:
            outputs = schema.min_outputs
        if isinstance(outputs, int) and not isinstance(outputs, bool):
            outputs = [self._fresh(op_type) for _ in range(outputs)]
        op = OperatorDef(
            op_type,
            _names(inputs),
            _names(outputs),
            {k: _arg(v) for k, v in args.items()},
            name,
            device_option,
            _names(control_inputs),
        )
        validate_op(op, len(self._def.ops), self._def.device_option)
        self._def.ops.append(op)
        refs = tuple(BlobRef(o) for o in op.outputs)
        if not refs:
            return None
        return refs[0] if len(refs) == 1 else refs

    def _fresh(self, op_type: str) -> str:
        self._auto += 1
        return f"{self.name}/{op_type}_{self._auto}"

    def __getattr__(self, op_type: str) -> Callable[..., Any]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        schema = get_schema(op_type)  # unknown types fail here, with near names

        def add(inputs: BlobsArg = None, outputs: BlobsArg | int = None, **kwargs: Any) -> Any:
            return self.add_op(op_type, inputs, outputs, **kwargs)

        add.__name__ = op_type
        add.__qualname__ = f"Net.{op_type}"
        add.__doc__, add.__signature__ = _method_doc(schema)  # type: ignore[attr-defined]
        return add

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(registered_ops()))

    def __repr__(self) -> str:
        return f"Net({self.name!r}, type={self._def.type!r}, ops={len(self._def.ops)})"


def describe_schema(schema: OpSchema) -> str:
    """A multi-line description of one operator schema (``asyncnet ops TYPE`` prints it)."""
    lines = [
        f"{schema.type}  ({schema.arity_text()}; devices: {', '.join(schema.devices)}"
        f"{'; differentiable' if schema.differentiable else ''})",
        f"  {schema.doc}",
    ]
    lines += [f"  input {i}: {d}" for i, d in enumerate(schema.inputs_doc)]
    lines += [f"  output {i}: {d}" for i, d in enumerate(schema.outputs_doc)]
    for a in schema.args.values():
        default = "required" if a.required else f"default {a.default!r}"
        choices = f", one of {list(a.choices)}" if a.choices else ""
        lines.append(f"  arg {a.name}: {_type_text(a.type)} ({default}{choices}) {a.doc}".rstrip())
    return "\n".join(lines)


def _type_text(t: type | tuple[type, ...]) -> str:
    return " | ".join(x.__name__ for x in t) if isinstance(t, tuple) else t.__name__


_DOCS: dict[int, tuple[OpSchema, str, inspect.Signature]] = {}


def _method_doc(schema: OpSchema) -> tuple[str, inspect.Signature]:
    """The doc and signature of ``net.<Type>``: what ``help(net.FC)`` shows (cached per schema)."""
    cached = _DOCS.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = _DOCS[id(schema)] = (schema, *_build_method_doc(schema))
    return cached[1], cached[2]


def _build_method_doc(schema: OpSchema) -> tuple[str, inspect.Signature]:
    tail = (
        "\n\nAppends the op to the net and returns its output blob reference(s). ``outputs`` may be\n"
        "names or a count of names to generate; ``name``, ``device_option`` and ``control_inputs``\n"
        "are OperatorDef fields; the other keywords are the op's args."
    )
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("inputs", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        inspect.Parameter("outputs", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        inspect.Parameter("name", kw, default=""),
        inspect.Parameter("device_option", kw, default=None),
        inspect.Parameter("control_inputs", kw, default=None),
    ]
    params += [
        inspect.Parameter(a.name, kw, default=inspect.Parameter.empty if a.required else a.default)
        for a in schema.args.values()
        if a.name not in ("name", "device_option", "control_inputs")
    ]
    return describe_schema(schema) + tail, inspect.Signature(params)
