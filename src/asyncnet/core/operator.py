"""An instantiated operator: a validated :class:`OperatorDef` bound to its kernel.

Executors call :meth:`Operator.run` with the workspace's blob dict; it is the hot path of
every net, so it does only the work that must happen per run: gather inputs, call the
kernel, store outputs, and turn any failure into an :class:`~asyncnet.OperatorError`.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from asyncnet.core.defs import DeviceOption, NetDef, OperatorDef
from asyncnet.core.registry import OpContext, OpSchema, validate_op
from asyncnet.errors import BlobNotFoundError, NetDefinitionError, OperatorError

__all__ = ["Operator", "build_operators", "check_declared_blobs"]


class Operator:
    """One runnable op of a net. ``op.run(blobs)`` reads inputs and writes outputs in ``blobs``."""

    __slots__ = (
        "index",
        "definition",
        "schema",
        "type",
        "name",
        "inputs",
        "outputs",
        "device",
        "fn",
        "ctx",
        "net_name",
        "_store",
    )

    def __init__(
        self,
        definition: OperatorDef,
        index: int,
        schema: OpSchema,
        args: dict[str, Any],
        device: DeviceOption,
        blobs: MutableMapping[str, Any],
        net_name: str = "",
        inputs: tuple[str, ...] | None = None,
        outputs: tuple[str, ...] | None = None,
    ):
        self.index = index
        self.definition = definition
        self.schema = schema
        self.type = definition.type
        self.name = definition.name
        self.inputs = tuple(definition.inputs) if inputs is None else inputs
        self.outputs = tuple(definition.outputs) if outputs is None else outputs
        self.device = device
        self.fn = schema.fn
        self.ctx = OpContext(definition, index, args, device, blobs)
        self.net_name = net_name
        self._store = _store_none if not self.outputs else (_store_one if len(self.outputs) == 1 else _store_many)

    def run(self, blobs: MutableMapping[str, Any]) -> None:
        """Run the kernel once against ``blobs``; failures raise :class:`OperatorError`."""
        try:
            args = [blobs[n] for n in self.inputs]
        except KeyError:
            missing = next(n for n in self.inputs if n not in blobs)
            raise self.error(f"input blob {missing!r} does not exist") from BlobNotFoundError(missing, list(blobs))
        try:
            result = self.fn(self.ctx, *args)
        except Exception as exc:
            raise self.error(_reason(exc)) from exc
        self._store(self, blobs, result)

    def error(self, message: str) -> OperatorError:
        """An :class:`OperatorError` that names this op."""
        return OperatorError(
            message,
            op_index=self.index,
            op_type=self.type,
            op_name=self.name or None,
            inputs=self.inputs,
            net_name=self.net_name or None,
        )

    def __repr__(self) -> str:
        return f"Operator(#{self.index} {self.type} {list(self.inputs)} -> {list(self.outputs)})"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OperatorError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _store_none(op: Operator, blobs: MutableMapping[str, Any], result: Any) -> None:
    if result is not None:
        raise op.error(f"the kernel returned {type(result).__name__} but the op has no outputs")


def _store_one(op: Operator, blobs: MutableMapping[str, Any], result: Any) -> None:
    if result is None:
        raise op.error("the kernel returned None for its one output")
    blobs[op.outputs[0]] = result


def _store_many(op: Operator, blobs: MutableMapping[str, Any], result: Any) -> None:
    if not isinstance(result, (tuple, list)) or len(result) != len(op.outputs):
        got = len(result) if isinstance(result, (tuple, list)) else type(result).__name__
        raise op.error(f"the kernel returned {got} values for {len(op.outputs)} outputs")
    for name, value in zip(op.outputs, result):
        blobs[name] = value


def build_operators(net_def: NetDef, blobs: MutableMapping[str, Any]) -> list[Operator]:
    """Validate every op of ``net_def`` and bind it to its kernel (errors name the op index).

    Equal name tuples and equal typed-argument dicts are shared between ops (kernels only
    read them): a net of a million ops repeats few of either, and each costs ~200 bytes.
    """
    check_declared_blobs(net_def)
    net_device = net_def.device_option or _CPU
    shared: dict[Any, Any] = {}
    ops = []
    for i, op_def in enumerate(net_def.ops):
        schema, args = validate_op(op_def, i, net_device)
        ins, outs = tuple(op_def.inputs), tuple(op_def.outputs)
        ops.append(
            Operator(
                op_def,
                i,
                schema,
                _share(shared, op_def.type, args),
                op_def.device_option or net_device,
                blobs,
                net_def.name,
                shared.setdefault(ins, ins),
                shared.setdefault(outs, outs),
            )
        )
    return ops


def check_declared_blobs(net_def: NetDef) -> None:
    """Caffe2's NetBase checks of a net that declares its blobs (``net.cc``): when it lists
    external inputs, every op input must be one of them or an output of an earlier op; every
    declared external output must be an external input or the output of some op."""
    declared = net_def.external_inputs
    if not declared and not net_def.external_outputs:
        return
    known = set(declared)
    for i, op in enumerate(net_def.ops):
        if declared:
            unknown = next((n for n in op.inputs if n not in known), None)
            if unknown is not None:
                raise NetDefinitionError(
                    f"{op.type}: the source of input {unknown!r} is unknown: it is neither a declared "
                    f"external input of net {net_def.name!r} nor an output of an earlier op "
                    "(Caffe2 refuses it too)",
                    f"ops[{i}].inputs",
                )
        known.update(op.outputs)
    missing = [n for n in net_def.external_outputs if n not in known]
    if missing:
        raise NetDefinitionError(
            f"blob {missing[0]!r} is declared as an output of net {net_def.name!r} but no op "
            "produces it (Caffe2 refuses it too)",
            "external_outputs",
        )


def _share(shared: dict[Any, Any], op_type: str, args: dict[str, Any]) -> dict[str, Any]:
    """The first dict seen for ``op_type`` with the same scalar values of the same types
    (1, 1.0 and True are equal keys, so the type is part of the key); ``args`` itself when a
    value is not a scalar."""
    key: list[Any] = [op_type]
    for k, v in args.items():
        if type(v) not in _SCALARS:
            return args
        key += (k, type(v), v)
    return shared.setdefault(tuple(key), args)


_SCALARS = frozenset({int, float, str, bool, type(None)})


_CPU = DeviceOption()
