"""Plain-data definitions of devices, operators and nets, with strict JSON in and out.

These are values, not behaviour: a :class:`NetDef` is what a :class:`~asyncnet.Net` builder
produces and what a workspace instantiates. Loading JSON never uses pickle or eval; every
malformed field raises :class:`~asyncnet.NetDefinitionError` naming its path::

    >>> from asyncnet import NetDef, OperatorDef
    >>> nd = NetDef("n", ops=[OperatorDef("Relu", ["x"], ["y"])])
    >>> NetDef.from_json(nd.to_json()) == nd
    True
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from asyncnet.errors import NetDefinitionError

__all__ = ["DeviceOption", "OperatorDef", "NetDef", "ArgValue", "NET_TYPES"]

ArgValue = Any  # int | float | str | bool | list of those
NET_TYPES = ("simple", "async_simple", "straight", "dag", "async_dag", "async_scheduling", "async_polling", "parallel")
DEVICE_TYPES = ("cpu", "cuda")
MAX_JSON_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class DeviceOption:
    """Where an op or net runs: ``DeviceOption("cuda", 1)``; ``numa_node_id`` picks a CPU pool;
    ``random_seed`` (Caffe2's) seeds the random fills of the ops it applies to."""

    device_type: str = "cpu"
    device_id: int = 0
    numa_node_id: int = 0
    random_seed: int | None = None

    def __post_init__(self) -> None:
        _check_device(self.device_type, self.device_id, self.numa_node_id, "device_option")
        s = self.random_seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**32):
            raise NetDefinitionError(f"expected an int in [0, 2**32) or null, got {s!r}", "device_option.random_seed")

    def to_dict(self) -> dict[str, Any]:
        d = {"device_type": self.device_type, "device_id": self.device_id, "numa_node_id": self.numa_node_id}
        if self.random_seed is not None:
            d["random_seed"] = self.random_seed
        return d

    @classmethod
    def from_dict(cls, d: Any, path: str = "device_option") -> DeviceOption:
        d = _expect(d, dict, path)
        _no_extra(d, {"device_type", "device_id", "numa_node_id", "random_seed"}, path)
        dtype = _expect(d.get("device_type", "cpu"), str, f"{path}.device_type")
        did = _int(d.get("device_id", 0), f"{path}.device_id")
        numa = _int(d.get("numa_node_id", 0), f"{path}.numa_node_id")
        seed = d.get("random_seed")
        _check_device(dtype, did, numa, path)
        if seed is not None:
            seed = _int(seed, f"{path}.random_seed")
            if not 0 <= seed < 2**32:
                raise NetDefinitionError(f"expected an int in [0, 2**32), got {seed}", f"{path}.random_seed")
        return cls(dtype, did, numa, seed)

    def __str__(self) -> str:
        return f"{self.device_type}:{self.device_id}" if self.device_type != "cpu" else f"cpu(numa {self.numa_node_id})"


def _check_device(device_type: Any, device_id: Any, numa: Any, path: str) -> None:
    if device_type not in DEVICE_TYPES:
        raise NetDefinitionError(
            f"expected device_type one of {DEVICE_TYPES}, got {device_type!r}", f"{path}.device_type"
        )
    for name, v in (("device_id", device_id), ("numa_node_id", numa)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise NetDefinitionError(f"expected a non-negative int, got {v!r}", f"{path}.{name}")


@dataclass
class OperatorDef:
    """One operator: ``OperatorDef("FC", ["x", "w", "b"], ["h"], args={"axis": 1})``."""

    type: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    args: dict[str, ArgValue] = field(default_factory=dict)
    name: str = ""
    device_option: DeviceOption | None = None
    control_inputs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type, "inputs": list(self.inputs), "outputs": list(self.outputs)}
        if self.args:
            d["args"] = {k: _arg_to_json(v) for k, v in self.args.items()}
        if self.name:
            d["name"] = self.name
        if self.device_option is not None:
            d["device_option"] = self.device_option.to_dict()
        if self.control_inputs:
            d["control_inputs"] = list(self.control_inputs)
        return d

    @classmethod
    def from_dict(cls, d: Any, path: str = "op") -> OperatorDef:
        d = _expect(d, dict, path)
        _no_extra(d, {"type", "inputs", "outputs", "args", "name", "device_option", "control_inputs"}, path)
        if "type" not in d:
            raise NetDefinitionError("missing required field 'type'", path)
        op_type = _name(d["type"], f"{path}.type")
        args = _expect(d.get("args", {}), dict, f"{path}.args")
        dev = d.get("device_option")
        return cls(
            type=op_type,
            inputs=_names(d.get("inputs", []), f"{path}.inputs"),
            outputs=_names(d.get("outputs", []), f"{path}.outputs"),
            args={_name(k, f"{path}.args"): _arg_value(v, f"{path}.args.{k}") for k, v in args.items()},
            name=_expect(d.get("name", ""), str, f"{path}.name"),
            device_option=None if dev is None else DeviceOption.from_dict(dev, f"{path}.device_option"),
            control_inputs=_names(d.get("control_inputs", []), f"{path}.control_inputs"),
        )


@dataclass
class NetDef:
    """A named list of operators plus how to run them (``type``, ``num_workers``, device)."""

    name: str
    ops: list[OperatorDef] = field(default_factory=list)
    type: str = "simple"
    num_workers: int | None = None
    external_inputs: list[str] = field(default_factory=list)
    external_outputs: list[str] = field(default_factory=list)
    device_option: DeviceOption | None = None
    own_pool: bool = False
    intra_op_threads: int | None = None

    def __post_init__(self) -> None:
        if self.type not in NET_TYPES:
            raise NetDefinitionError(f"expected net type one of {NET_TYPES}, got {self.type!r}", "type")
        if self.num_workers is not None and (
            isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 1
        ):
            raise NetDefinitionError(f"expected a positive int or null, got {self.num_workers!r}", "num_workers")
        t = self.intra_op_threads
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise NetDefinitionError(f"expected a positive int or null, got {t!r}", "intra_op_threads")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "type": self.type, "ops": [op.to_dict() for op in self.ops]}
        if self.num_workers is not None:
            d["num_workers"] = self.num_workers
        if self.external_inputs:
            d["external_inputs"] = list(self.external_inputs)
        if self.external_outputs:
            d["external_outputs"] = list(self.external_outputs)
        if self.device_option is not None:
            d["device_option"] = self.device_option.to_dict()
        if self.own_pool:
            d["own_pool"] = True
        if self.intra_op_threads is not None:
            d["intra_op_threads"] = self.intra_op_threads
        return d

    def to_json(self, indent: int | None = 2) -> str:
        """Serialize to JSON text (round-trips through :meth:`from_json`)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> NetDef:
        d = _expect(d, dict, "net")
        _no_extra(
            d,
            {
                "name",
                "type",
                "ops",
                "num_workers",
                "external_inputs",
                "external_outputs",
                "device_option",
                "own_pool",
                "intra_op_threads",
            },
            "net",
        )
        if "name" not in d:
            raise NetDefinitionError("missing required field 'name'", "name")
        ops = _expect(d.get("ops", []), list, "ops")
        nw = d.get("num_workers")
        iot = d.get("intra_op_threads")
        dev = d.get("device_option")
        return cls(
            name=_expect(d["name"], str, "name"),  # any str: "" too, as Caffe2's and the builder's
            ops=[OperatorDef.from_dict(op, f"ops[{i}]") for i, op in enumerate(ops)],
            type=_expect(d.get("type", "simple"), str, "type"),
            num_workers=None if nw is None else _int(nw, "num_workers"),
            external_inputs=_names(d.get("external_inputs", []), "external_inputs"),
            external_outputs=_names(d.get("external_outputs", []), "external_outputs"),
            device_option=None if dev is None else DeviceOption.from_dict(dev, "device_option"),
            own_pool=_expect(d.get("own_pool", False), bool, "own_pool"),
            intra_op_threads=None if iot is None else _int(iot, "intra_op_threads"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> NetDef:
        """Parse and validate JSON text; any defect raises :class:`NetDefinitionError`."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise NetDefinitionError(f"expected UTF-8 JSON text: {e}") from None
        if not isinstance(text, str):
            raise NetDefinitionError(f"expected JSON text, got {type(text).__name__}")
        if len(text) > MAX_JSON_BYTES:
            raise NetDefinitionError(f"JSON document too large ({len(text)} characters, limit {MAX_JSON_BYTES})")
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            raise NetDefinitionError("JSON nested too deeply") from None
        except NetDefinitionError:
            raise
        except ValueError as e:
            raise NetDefinitionError(f"invalid JSON: {e}") from None
        return cls.from_dict(data)


def _reject_constant(name: str) -> Any:
    raise NetDefinitionError(f"invalid JSON: {name} is not allowed")


def _expect(v: Any, typ: type, path: str) -> Any:
    if not isinstance(v, typ) or (typ is not bool and isinstance(v, bool)):
        raise NetDefinitionError(f"expected {_type_name(typ)}, got {_describe(v)}", path)
    return v


def _int(v: Any, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise NetDefinitionError(f"expected an integer, got {_describe(v)}", path)
    return v


def _name(v: Any, path: str) -> str:
    if not isinstance(v, str) or not v:
        raise NetDefinitionError(f"expected a non-empty string, got {_describe(v)}", path)
    return v


def _names(v: Any, path: str) -> list[str]:
    v = _expect(v, list, path)
    return [_name(x, f"{path}[{i}]") for i, x in enumerate(v)]


def _no_extra(d: Mapping[str, Any], allowed: set[str], path: str) -> None:
    extra = sorted(str(k) for k in d if k not in allowed)
    if extra:
        raise NetDefinitionError(f"unknown field(s) {extra}; expected some of {sorted(allowed)}", path)


def _arg_value(v: Any, path: str) -> ArgValue:
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise NetDefinitionError(f"expected a finite number, got {v!r}", path)
        return v
    if isinstance(v, list):
        if any(isinstance(x, list) for x in v):
            raise NetDefinitionError("nested lists are not allowed in arguments", path)
        return [_arg_value(x, f"{path}[{i}]") for i, x in enumerate(v)]
    raise NetDefinitionError(f"expected a number, string, bool or list of those, got {_describe(v)}", path)


def _arg_to_json(v: ArgValue) -> Any:
    if isinstance(v, tuple):
        return list(v)
    return v


def _type_name(typ: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}.get(
        typ, typ.__name__
    )


def _describe(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:40] + '...' if len(text) > 40 else text}"
