"""Caffe2's ``core.GradientRegistry`` on asyncnet's registered gradient makers.

``GetGradientForOp`` asks one op's maker for its backward ops, with Caffe2's blob names
(``<input>_grad`` for an input's gradient); ``GetBackwardPass`` runs asyncnet's autodiff over
a list of ops from given output gradients.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.core.registry import get_schema
from asyncnet.errors import NetDefinitionError
from asyncnet.ops.sparse import GradientSlice as _AnSlice
from caffe2.convert import drop_unknown_args, op_from_asyncnet, op_to_asyncnet
from caffe2.proto import caffe2_pb2


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


def gradient_for_op(op: Any, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
    """The backward ops of one ``caffe2_pb2.OperatorDef`` given its output gradient names
    (``None`` for an output without gradient), and each input's gradient reference (or None).
    ``Sum`` has no gradient ops: every input's gradient is the output's gradient blob itself."""
    if op.type == "Sum" and g_output and g_output[0] is not None:
        return [], [_slice(str(g_output[0])) for _ in op.input]
    an_op = drop_unknown_args(op_to_asyncnet(op), "op")
    maker = get_schema(an_op.type).gradient
    if maker is None:
        raise NetDefinitionError(f"no gradient is registered for {an_op.type}")
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
    return _copy_device(out_ops, op.device_option if op.HasField("device_option") else None), g_input


def backward_pass(operators: list[Any], ys: dict[Any, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The backward ops of ``operators`` from the output gradients ``ys`` ({output: gradient
    blob}, a None gradient is seeded with ones), and {blob: gradient reference}."""
    if len(ys) != 1:
        raise NotImplementedError(f"GetBackwardPass takes one output gradient here, got {len(ys)}")
    ((y, gy),) = ys.items()
    net = an.Net("backward_pass")
    for i, pb in enumerate(operators):
        op = drop_unknown_args(op_to_asyncnet(pb, f"ops[{i}]"), f"ops[{i}]")
        net.add_op(op.type, op.inputs, op.outputs, name=op.name, **op.args)
    start = len(net.ops)
    grads = add_gradient_ops(net, str(y))
    bwd = list(net.ops[start:])
    seed = bwd[0].outputs[0]
    if gy is not None:
        bwd = bwd[1:]
        rename = {seed: str(gy)}
        bwd = [
            replace(o, inputs=[rename.get(n, n) for n in o.inputs], outputs=[rename.get(n, n) for n in o.outputs])
            for o in bwd
        ]
        grads = {k: (rename.get(v, v) if isinstance(v, str) else v) for k, v in grads.items()}
        grads[str(y)] = str(gy)
    else:
        grads[str(y)] = seed
    return [op_from_asyncnet(o) for o in bwd], {k: _slice(v) for k, v in grads.items()}


class GradientRegistry:
    """Caffe2's gradient registry, backed by asyncnet's registered gradient makers."""

    @classmethod
    def GetGradientForOp(cls, op: caffe2_pb2.OperatorDef, g_output: list[Any]) -> tuple[list[Any], list[Any]]:
        """``(gradient ops, input gradients)`` of ``op`` given its output gradient names."""
        return gradient_for_op(op, list(g_output))

    @classmethod
    def GetBackwardPass(
        cls, operators: list[Any], ys: dict[Any, Any], ys_generate_gradient: bool = False
    ) -> tuple[list[Any], dict[str, Any]]:
        """``(gradient ops, {blob: gradient})`` of the ops from the output gradients ``ys``."""
        return backward_pass(list(operators), dict(ys))
