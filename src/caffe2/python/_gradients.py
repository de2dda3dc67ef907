"""Caffe2's ``core.GradientRegistry``: one op's gradient, and the backward pass of a list of ops.

An op's gradient comes from the Python maker registered for its type with
``GradientRegistry.RegisterGradient`` if there is one, else from asyncnet's gradient maker
of the op, its blobs named as Caffe2 named them (``<input>_grad`` for an input's gradient).
``GetBackwardPass`` chains them over a list of ops (:mod:`caffe2.python._grad_ir`), summing
the gradients of a blob read by several ops with Caffe2's names.

    >>> from caffe2.python import core
    >>> @core.GradientRegistry.RegisterGradient("DocTwice")
    ... def _twice_grad(op, g_output):
    ...     return core.CreateOperator("Scale", g_output[0], op.input[0] + "_grad", scale=2.0), [op.input[0] + "_grad"]
    >>> ops, grads = core.GradientRegistry.GetBackwardPass([core.CreateOperator("DocTwice", "x", "y")], {"y": "dy"})
    >>> [(o.type, list(o.input), list(o.output)) for o in ops], grads
    ([('Scale', ['dy'], ['x_grad'])], {'y': BlobReference("dy"), 'x': BlobReference("x_grad")})
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from asyncnet.core.registry import get_schema, register_op
from asyncnet.errors import NetDefinitionError
from asyncnet.ops.sparse import GradientSlice as _AnSlice
from caffe2.convert import drop_unknown_args, op_from_asyncnet, op_to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python._grad_ir import backward_pass


def _slice(g: Any) -> Any:
    from caffe2.python.core import BlobReference, GradientSlice

    if isinstance(g, _AnSlice):
        return GradientSlice(BlobReference(g.indices), BlobReference(g.values))
    return None if g is None else BlobReference(g)


def _copy_device(ops: list[Any], device_option: Any) -> list[Any]:
    if device_option is not None and device_option.ByteSize():
        for op in ops:
            op.device_option.CopyFrom(device_option)
    return ops


def _call_maker(maker: Any, probe: Any, grads: list[str | None]) -> tuple[list[Any], list[Any]]:
    """The maker's answer for ``grads``. Caffe2's makers ignored the gradients of outputs they
    do not differentiate (a split's sizes, a batch norm's saved statistics); asyncnet's refuse
    them, so when that happens each given output gradient is tried alone, in order."""
    try:
        return maker(probe, grads)
    except (NetDefinitionError, ValueError) as first:
        given = [k for k, g in enumerate(grads) if g is not None]
        if len(given) < 2:
            raise
        for k in given:
            try:
                return maker(probe, [g if i == k else None for i, g in enumerate(grads)])
            except (NetDefinitionError, ValueError):
                continue
        raise first


def _probe_output(op: Any, k: int) -> str:
    """The probe's name of output ``k``: the input's probe name when it writes an input in place
    (a maker refuses what it cannot differentiate in place), else its own."""
    name = op.outputs[k]
    return f"@in{op.inputs.index(name)}" if name in op.inputs else f"@out{k}"


def _check_arity(op: Any) -> None:
    schema = get_schema(op.type)
    for what, n, lo, hi in (
        ("inputs", len(op.input), schema.min_inputs, schema.max_inputs),
        ("outputs", len(op.output), schema.min_outputs, schema.max_outputs),
    ):
        if n < lo or (hi is not None and n > hi):
            bound = f"{lo}" if hi == lo else f"{lo} to {'any' if hi is None else hi}"
            raise NetDefinitionError(
                f"{op.type}{list(op.input)}->{list(op.output)} does not match its operator schema: "
                f"expected {bound} {what}, got {n}"
            )


def _dense_outputs(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """``SparseToDense`` ops turning the sparse output gradients of ``op`` into dense
    ``<output>_grad`` blobs (asyncnet's makers take dense gradients), and the dense names."""
    ops, dense = [], []
    for out, g in zip(op.output, g_output):
        if isinstance(g, tuple) and len(g) == 2:
            name = f"{out}_grad"
            ops.append(caffe2_pb2.OperatorDef(type="SparseToDense", input=[str(g[0]), str(g[1]), out], output=[name]))
            g = name
        dense.append(g)
    return ops, dense


def gradient_for_op(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """The backward ops of one ``caffe2_pb2.OperatorDef`` given its output gradient names
    (``None`` for an output without gradient), and each input's gradient reference (or None),
    from asyncnet's gradient maker of the op (or Caffe2's own rule for ``Add``, ``Sub``,
    ``Sum`` and ``ZeroGradient``). The ops are marked ``is_gradient_op``, as Caffe2's were."""
    if op.type in _CAFFE2_RULES:
        ops, g_in = _CAFFE2_RULES[op.type](op, list(g_output))
    else:
        ops, g_in = _asyncnet_gradient(op, list(g_output))
    for g in ops:
        g.name = g.name  # a set name, as every op Caffe2 created had
        g.is_gradient_op = True
    return ops, g_in


# Ops whose Caffe2 gradient needed the gradient of every output (asyncnet's take a missing one as zeros).
_NEEDS_ALL_OUTPUT_GRADIENTS = frozenset({"LSTMUnit"})


def _asyncnet_gradient(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    _check_arity(op)
    if op.type in _NEEDS_ALL_OUTPUT_GRADIENTS:
        missing = [o for o, g in zip(op.output, g_output) if g is None]
        if missing:
            raise NetDefinitionError(
                f"the gradient of {op.type} needs the gradients of all its outputs; none reaches {missing} "
                "(add ZeroGradient on an output the loss does not use)"
            )
    an_op = drop_unknown_args(op_to_asyncnet(op), "op")
    maker = get_schema(an_op.type).gradient
    if maker is None:
        raise NetDefinitionError(f"no gradient is registered for {an_op.type}")
    densify, g_output = _dense_outputs(op, g_output)
    grads = [None if g is None else str(g) for g in g_output]
    probe = replace(
        an_op,
        inputs=[f"@in{k}" for k in range(len(an_op.inputs))],
        outputs=[_probe_output(an_op, k) for k in range(len(an_op.outputs))],
        args=dict(an_op.args),
    )
    gops, gin = _call_maker(maker, probe, grads)
    rename = {f"@in{k}": n for k, n in enumerate(an_op.inputs)}
    rename.update({f"@out{k}": n for k, n in enumerate(an_op.outputs)})
    created = [n for g in gops for n in g.outputs]
    for name, gi in zip(an_op.inputs, gin):
        parts = (("indices", gi.indices), ("values", gi.values)) if isinstance(gi, _AnSlice) else (("", gi),)
        for part, n in parts:
            if n is not None and n in created and n not in rename:
                rename[n] = f"{name}_grad" + (f"_{part}" if part else "")
    for k, n in enumerate(created):
        rename.setdefault(n, f"{an_op.outputs[0]}_grad_autogen_{k}")
    out_ops = []
    for g in gops:
        g = replace(g, inputs=[rename.get(n, n) for n in g.inputs], outputs=[rename.get(n, n) for n in g.outputs])
        if g.type == "Copy" and g.inputs == g.outputs:
            continue  # an in-place op's gradient passed through as is (Caffe2 emitted no op)
        out_ops.append(op_from_asyncnet(g))
    g_input = []
    for gi in gin:
        if isinstance(gi, _AnSlice):
            gi = _AnSlice(rename.get(gi.indices, gi.indices), rename.get(gi.values, gi.values))
        elif gi is not None:
            gi = rename.get(gi, gi)
        g_input.append(_slice(gi))
    out_ops = densify + out_ops
    return _copy_device(out_ops, op.device_option if op.HasField("device_option") else None), g_input


def _grad_op(op: Any, op_type: str, inputs: list[str], outputs: list[str]) -> Any:
    g = caffe2_pb2.OperatorDef(type=op_type, name="", input=inputs, output=outputs)
    if op.HasField("device_option"):
        g.device_option.CopyFrom(op.device_option)
    return g


def _broadcasts(op: Any) -> bool:
    return any(a.name == "broadcast" and a.i for a in op.arg)


def _add_rule(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """``A + B`` without ``broadcast``: both gradients are the output's, passed through unchanged
    (Caffe2's legacy rule: the inputs have the output's shape). With ``broadcast``, asyncnet's
    maker reduces the gradient to each input's shape."""
    (gy,) = g_output
    if gy is None:
        return [], [None, None]
    if _broadcasts(op):
        return _asyncnet_gradient(op, g_output)
    return [], [_slice(str(gy)), _slice(str(gy))]


def _sub_rule(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """``A - B`` without ``broadcast``: A's gradient is the output's, B's its negation. With
    ``broadcast``, asyncnet's maker (reduced to each input's shape)."""
    (gy,) = g_output
    if gy is None:
        return [], [None, None]
    if _broadcasts(op):
        return _asyncnet_gradient(op, g_output)
    gb = f"{op.input[1]}_grad"
    return [_grad_op(op, "Negative", [str(gy)], [gb])], [_slice(str(gy)), _slice(gb)]


def _sum_rule(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """``Sum``: every input's gradient is the output's gradient blob itself."""
    gy = g_output[0] if g_output else None
    return [], [None if gy is None else _slice(str(gy)) for _ in op.input]


def _zero_gradient_rule(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """``ZeroGradient(X)``: X's gradient is zeros shaped like X."""
    g = _grad_op(op, "ConstantFill", [op.input[0]], [f"{op.input[0]}_grad"])
    g.arg.add(name="value", f=0.0)
    return [g], [_slice(g.output[0])]


@register_op(
    "ZeroGradient",
    inputs=1,
    outputs=0,
    inputs_doc=("X: a blob no loss depends on",),
    doc="Nothing when run; in a backward pass, X's gradient is zeros shaped like X (Caffe2's ZeroGradient).",
)
def _zero_gradient_op(ctx: Any, x: Any) -> None:
    return None


_CAFFE2_RULES = {"Add": _add_rule, "Sub": _sub_rule, "Sum": _sum_rule, "ZeroGradient": _zero_gradient_rule}


def _as_list(ops: Any) -> list[Any]:
    if ops is None:
        return []
    return list(ops) if isinstance(ops, (list, tuple)) else [ops]


class GradientRegistry:
    """Caffe2's gradient registry: Python gradient makers by op type, over asyncnet's makers."""

    gradient_registry_: dict[str, Any] = {}

    @classmethod
    def RegisterGradient(cls, op_type: str) -> Any:
        """A decorator registering ``maker(op, g_output) -> (gradient ops, input gradients)``
        as the gradient of ``op_type``; it takes precedence over asyncnet's maker."""

        def register(maker: Any) -> Any:
            cls.gradient_registry_[op_type] = maker
            return maker

        return register

    @classmethod
    def GetGradientForOp(cls, op: caffe2_pb2.OperatorDef, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
        """``(gradient ops, input gradients)`` of ``op`` given its output gradient names."""
        maker = cls.gradient_registry_.get(op.type)
        if maker is not None:
            ops, g_in = maker(op, list(g_output))
            return _as_list(ops), list(g_in)
        try:
            return gradient_for_op(op, list(g_output))
        except (NetDefinitionError, ValueError, KeyError) as e:
            raise NetDefinitionError(f"cannot make the gradient of {op.type}: {e}\nOp:\n{op}") from e

    @classmethod
    def GetBackwardPass(
        cls, operators: list[Any], ys: Any, ys_generate_gradient: bool = False
    ) -> tuple[list[Any], dict[str, Any]]:
        """``(gradient ops, {blob: gradient})`` of the ops from ``ys``: a list of blobs (seeded
        with ones) or a dict {blob: gradient blob, or None for ones}."""
        ops, grads = backward_pass(list(operators), ys, cls.GetGradientForOp)
        return ops, {k: _ref(g) for k, g in grads.items()}


def _ref(g: Any) -> Any:
    from caffe2.python.core import BlobReference, GradientSlice

    if isinstance(g, tuple) and len(g) == 2:
        return GradientSlice(BlobReference(str(g[0])), BlobReference(str(g[1])))
    return BlobReference(str(g))
