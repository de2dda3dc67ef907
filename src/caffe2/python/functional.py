"""Caffe2's ``caffe2.python.functional``: run one operator on numpy arrays, as a function.

``Functional.<OpType>(*inputs, **args)`` feeds the inputs to a scratch workspace as
``input_0``, ``input_1``, ..., runs the operator once and returns its outputs as a named tuple
(``output_0``, ...) that can also be indexed by name. The number of outputs is the operator's
fixed count, else ``num_output=`` (required when the operator takes any number of outputs)::

    >>> import numpy as np
    >>> from caffe2.python.functional import Functional
    >>> out = Functional.Relu(np.array([-1.0, 2.0], dtype=np.float32))
    >>> out["output_0"].tolist()
    [0.0, 2.0]
    >>> a, sizes = Functional.Concat(np.ones((1, 2)), np.zeros((2, 2)), axis=0)
    >>> a.shape, sizes.tolist()
    ((3, 2), [1, 2])
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from caffe2.python import core, workspace

_INF = 2**31 - 1


class OpSchema:
    """Caffe2's ``OpSchema`` view of an asyncnet operator's input and output counts."""

    inf = _INF

    def __init__(self, op_type: str) -> None:
        from asyncnet.core.registry import get_schema

        schema = get_schema(op_type)
        self.min_input = schema.min_inputs
        self.max_input = _INF if schema.max_inputs is None else schema.max_inputs
        self.min_output = schema.min_outputs
        self.max_output = _INF if schema.max_outputs is None else schema.max_outputs

    @staticmethod
    def get(op_type: str) -> OpSchema:
        return OpSchema(op_type)

    def num_inputs_allowed(self, n: int) -> bool:
        return self.min_input <= n <= self.max_input

    def num_outputs_allowed(self, n: int) -> bool:
        return self.min_output <= n <= self.max_output

    def num_inputs_outputs_allowed(self, n_in: int, n_out: int) -> bool:
        return self.num_inputs_allowed(n_in) and self.num_outputs_allowed(n_out)

    def CalculateOutput(self, num_input: int) -> int:
        """The fixed number of outputs, or -1 when it varies."""
        return self.min_output if self.min_output == self.max_output else -1


def namedtupledict(typename: str, field_names: list[str], *args: Any, **kwargs: Any) -> type:
    """A named tuple type whose items can also be read by field name (``t["output_0"]``);
    names that are not identifiers are renamed for attribute access, as ``rename=True`` does."""
    kwargs.setdefault("rename", True)
    base = namedtuple(typename, field_names, *args, **kwargs)
    position = {str(name): k for k, name in enumerate(field_names)}

    def by_name_or_index(self: Any, key: Any) -> Any:
        return tuple.__getitem__(self, position[key] if isinstance(key, str) else key)

    return type(typename, (base,), {"__slots__": (), "__getitem__": by_name_or_index})


def _names(prefix: str, num: int, max_num: int) -> list[str]:
    return [f"{prefix}{k}" for k in range(min(num, max_num))]


def _output_names(schema: OpSchema, op_type: str, num_input: int, args: dict[str, Any]) -> list[str]:
    if "num_output" in args:
        num_output = args.pop("num_output")
        if not schema.num_inputs_outputs_allowed(num_input, num_output):
            raise ValueError(
                f"Functional C2: {op_type} takes {schema.min_output} to {schema.max_output} outputs, "
                f"num_output={num_output}"
            )
        return _names("output_", num_output, schema.max_output)
    calculated = schema.CalculateOutput(num_input)
    if calculated != -1:
        return _names("output_", calculated, schema.max_output)
    if schema.max_output == OpSchema.inf:
        raise ValueError(f"Functional C2: {op_type} takes any number of outputs; pass num_output explicitly")
    return _names("output_", schema.max_output, schema.max_output)


def _run(op_type: str, inputs: tuple[Any, ...], args: dict[str, Any]) -> Any:
    schema = OpSchema.get(op_type)
    input_names = _names("input_", len(inputs), schema.max_input)
    if not schema.num_inputs_allowed(len(inputs)):
        raise ValueError(
            f"Functional C2: {op_type} takes {schema.min_input} to {schema.max_input} inputs, got {len(inputs)}"
        )
    output_names = _output_names(schema, op_type, len(input_names), args)
    ws = workspace.C.Workspace()
    for name, value in zip(input_names, inputs):
        ws.create_blob(name).feed(value)
    op = core.CreateOperator(op_type, input_names, output_names, **args)
    ws._run_operator(op.SerializeToString())
    values = [ws.fetch_blob(x) for x in output_names]
    return namedtupledict("output", output_names)(*values)


class _Functional:
    def __getattribute__(self, op_type: str) -> Any:
        def op_func(*inputs: Any, **args: Any) -> Any:
            return _run(op_type, inputs, dict(args))

        return op_func


Functional = _Functional()
