"""Gradients of Caffe2's control ops ``Do`` and ``If`` (nets held as ``NetDef`` arguments).

* ``Do``: a gradient ``Do`` op on the same workspace blob with ``reuse_workspace`` set, so the
  blobs the forward net left in the child workspace are there; its net is the backward pass of
  the forward net, from the output gradients passed in (with the outer blobs it reads), and it
  passes the gradients of the forward op's inputs back out as ``<input>_grad``.
* ``If``: a gradient ``If`` op on the same condition, whose ``then_net`` and ``else_net`` are
  the backward passes of the forward branches. Both branches write every input gradient: one a
  branch does not compute is zeros shaped like the input (the gradient through the branch not
  taken).

``While`` has no gradient here (Caffe2's needs a stack of forward workspaces).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caffe2.proto import caffe2_pb2

BackwardPass = Callable[[list[Any], dict[str, Any]], tuple[list[Any], dict[str, Any]]]


def _net_arg(op: Any, name: str) -> Any:
    for arg in op.arg:
        if arg.name == name and arg.HasField("n"):
            return arg.n
    return None


def _args(op: Any, name: str) -> list[Any]:
    for arg in op.arg:
        if arg.name == name:
            return list(arg.strings or arg.ints)
    return []


def _dense(grads: dict[str, Any], where: str) -> dict[str, str]:
    sparse = [k for k, g in grads.items() if isinstance(g, tuple)]
    if sparse:
        raise NotImplementedError(f"{where}: sparse gradients of {sparse} cannot leave a control op's net")
    return {str(k): str(g) for k, g in grads.items()}


def _make_op(op_type: str, inputs: list[str], outputs: list[str], **kw: Any) -> Any:
    op = caffe2_pb2.OperatorDef(type=op_type, name="", input=inputs, output=outputs)
    for key, value in kw.items():
        arg = op.arg.add(name=key)
        if isinstance(value, caffe2_pb2.NetDef):
            arg.n.CopyFrom(value)
        elif isinstance(value, float):
            arg.f = value
        elif isinstance(value, int):
            arg.i = value
        elif value and isinstance(value[0], str):
            arg.strings.extend(v.encode("utf-8") for v in value)
        else:
            arg.ints.extend(value)
    return op


def _net(name: str, ops: list[Any]) -> Any:
    net = caffe2_pb2.NetDef(name=name)
    net.op.extend(ops)
    return net


def do_gradient(op: Any, g_output: list[Any], backward: BackwardPass) -> tuple[list[Any], list[Any]]:
    """The gradient ``Do`` op of a forward ``Do`` op (see the module docstring)."""
    net = _net_arg(op, "net")
    if net is None:
        raise ValueError("Do: the gradient needs the forward net argument 'net'")
    outer = list(op.input[:-1]) + list(op.output[:-1])
    inner_of: dict[str, str] = {}
    for inner, k in zip(_args(op, "inner_blobs"), _args(op, "outer_blobs_idx")):
        inner = inner.decode("utf-8") if isinstance(inner, bytes) else inner
        inner_of.setdefault(outer[int(k)], inner)
    seeds = {}
    links: list[tuple[str, str]] = [(inner_of[b], b) for b in dict.fromkeys(outer) if b in inner_of]
    for out, g in zip(op.output[:-1], g_output[:-1]):
        if g is not None and out in inner_of:
            seed = f"{inner_of[out]}_grad_from_outer"
            seeds[inner_of[out]] = seed
            links.append((seed, str(g)))
    if not seeds:
        return [], [None] * len(op.input)
    inner_ops, inner_grads = backward(list(net.op), seeds)
    inner_grads = _dense(inner_grads, "Do")
    out_links: list[tuple[str, str]] = []
    g_input: list[Any] = []
    for k, name in enumerate(op.input[:-1]):
        g = inner_grads.get(inner_of.get(name, ""))
        if g is None or name in op.input[:k]:
            g_input.append(None)
            continue
        passed = f"{inner_of[name]}_grad_to_outer"
        inner_ops.append(_make_op("Copy", [g], [passed]))
        out_links.append((passed, f"{name}_grad"))
        g_input.append(f"{name}_grad")
    g_input.append(None)  # the workspace blob
    if not out_links:
        return [], [None] * len(op.input)
    ws = op.input[-1]
    read = set(_external_reads(inner_ops))
    links = [(inner, outer_name) for inner, outer_name in links if inner in read]
    inputs = [outer_name for _, outer_name in links] + [ws]
    outputs = [outer_name for _, outer_name in out_links] + [ws]
    grad_do = _make_op(
        "Do",
        inputs,
        outputs,
        net=_net(f"{net.name}_grad", inner_ops),
        inner_blobs=[i for i, _ in links] + [i for i, _ in out_links],
        outer_blobs_idx=list(range(len(links))) + [len(links) + k for k in range(len(out_links))],
        reuse_workspace=1,
    )
    grad_do.is_gradient_op = True
    return [grad_do], g_input


def if_gradient(op: Any, g_output: list[Any], backward: BackwardPass) -> tuple[list[Any], list[Any]]:
    """The gradient ``If`` op of a forward ``If`` op (see the module docstring)."""
    ys = {out: str(g) for out, g in zip(op.output, g_output) if g is not None}
    if not ys:
        return [], [None] * len(op.input)
    branches = []
    for name in ("then_net", "else_net"):
        net = _net_arg(op, name)
        ops, grads = backward(list(net.op), dict(ys)) if net is not None else ([], {})
        branches.append((name, net, ops, _dense(grads, f"If {name}")))
    canonical: dict[str, str] = {}
    for name in op.input[1:]:
        for _, _, _, grads in branches:
            if name in grads and name not in canonical:
                canonical[name] = grads[name]
    if not canonical:
        return [], [None] * len(op.input)
    args: dict[str, Any] = {}
    for arg_name, net, ops, grads in branches:
        for blob, g in canonical.items():
            if blob not in grads:
                ops.append(_make_op("ConstantFill", [blob], [g], value=0.0))
            elif grads[blob] != g:
                ops.append(_make_op("Copy", [grads[blob]], [g]))
        if net is not None or ops:
            args[arg_name] = _net(f"{net.name if net is not None else 'else'}_grad", ops)
    reads = dict.fromkeys(b for _, _, ops, _ in branches for b in _external_reads(ops))
    inputs = [op.input[0]] + [b for b in reads if b != op.input[0]]
    grad_if = _make_op("If", inputs, list(dict.fromkeys(canonical.values())), **args)
    grad_if.is_gradient_op = True
    return [grad_if], [canonical.get(name) if k else None for k, name in enumerate(op.input)]


def _external_reads(ops: list[Any]) -> list[str]:
    """The blobs the ops read before writing them (in order of first read)."""
    written: set[str] = set()
    reads: dict[str, None] = {}
    for o in ops:
        for b in o.input:
            if b not in written:
                reads.setdefault(b)
        written.update(o.output)
    return list(reads)
