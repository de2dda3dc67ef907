"""Gradients of Caffe2's control ops ``Do`` and ``If`` (nets held as ``NetDef`` arguments).

* ``Do``: a gradient ``Do`` op on the same workspace blob with ``backward`` set: it pops the
  child workspace the forward run left, whose blobs keep their forward values; its net is the backward pass of
  the forward net, from the output gradients passed in (with the outer blobs it reads), and it
  passes the gradients of the forward op's inputs back out as ``<input>_grad``.
* ``If``: a gradient ``If`` op on the same condition, whose ``then_net`` and ``else_net`` are
  the backward passes of the forward branches. Both branches write every input gradient: one a
  branch does not compute is zeros shaped like the input (the gradient through the branch not
  taken).

* ``While`` whose loop body is one ``Do`` op (NetBuilder's ``WhileNet``): every forward
  iteration left its child workspace on the ``Do``'s workspace blob, so the gradient is a
  ``While`` that runs the body's gradient ``Do`` while ``HasScope`` finds one left, last
  iteration first. A blob the loop rewrites carries its gradient from one iteration to the one
  before; the gradient of a blob it only reads is summed over the iterations.
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
        backward=1,
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


def while_gradient(op: Any, g_output: list[Any], backward: BackwardPass) -> tuple[list[Any], list[Any]]:
    """The gradient ops of a forward ``While`` op (see the module docstring)."""
    body = _loop_do(op)
    init_ops: list[Any] = []
    seeds = _own_seeds(op, g_output, init_ops)
    if not seeds:
        return [], [None] * len(op.input)
    carried = [b for b in body.output[:-1] if b in body.input[:-1]]
    step_ops, step_grads = _body_gradient(body, seeds, backward)
    unseeded = [b for b in carried if b not in seeds and step_grads.get(b)]
    for b in unseeded:
        seeds[b] = f"{b}_while_grad"
        init_ops.append(_make_op("ConstantFill", [b], [seeds[b]], value=0.0))
    if unseeded:
        step_ops, step_grads = _body_gradient(body, seeds, backward)
    if not step_ops:
        return [], [None] * len(op.input)
    loop_ops = list(step_ops)
    result: dict[str, str] = {}
    for name, g in step_grads.items():
        if g is None:
            continue
        if name in carried:
            result[name] = seeds[name]
            if g != seeds[name]:
                loop_ops.append(_make_op("Copy", [g], [seeds[name]]))
        else:
            total = result[name] = f"{name}_while_grad_sum"
            init_ops.append(_make_op("ConstantFill", [name], [total], value=0.0))
            loop_ops.append(_make_op("Add", [total, g], [total]))
    ws = body.input[-1]
    cond = f"{ws}/while_grad_has_scope"
    has_scope = _make_op("HasScope", [ws], [cond])
    written = [o for o in dict.fromkeys(o for x in loop_ops for o in x.output) if o != ws]
    reads = [b for b in _external_reads(loop_ops) if b not in (cond, ws)]
    grad_while = _make_op(
        "While",
        [cond, ws] + reads,
        written + [ws],
        loop_net=_net(f"{op.name or 'while'}_grad_loop", loop_ops),
        cond_net=_net(f"{op.name or 'while'}_grad_cond", [has_scope]),
    )
    init_ops.append(_make_op("HasScope", [ws], [cond]))
    for x in init_ops + [grad_while]:
        x.is_gradient_op = True
    return init_ops + [grad_while], [result.get(n) for n in op.input]


def _own_seeds(op: Any, g_output: list[Any], init_ops: list[Any]) -> dict[str, str]:
    """``{output: its gradient blob}``, one blob per output: the loop rewrites them in place, so
    an output gradient not named ``<output>_grad`` (one other gradient ops may still read, such
    as a gradient shared by several outputs) is copied first."""
    seeds: dict[str, str] = {}
    for out, g in zip(op.output, g_output):
        if g is None:
            continue
        g = str(g)
        if g != f"{out}_grad" or g in seeds.values():
            copy = f"{out}_while_grad"
            init_ops.append(_make_op("Copy", [g], [copy]))
            g = copy
        seeds[out] = g
    return seeds


def _loop_do(op: Any) -> Any:
    """The single ``Do`` op of a ``While``'s loop body (its iterations' child workspaces)."""
    loop = _net_arg(op, "loop_net")
    if loop is None or len(loop.op) != 1 or loop.op[0].type != "Do":
        raise ValueError("While: the gradient needs a loop_net of one Do op (NetBuilder's WhileNet)")
    body = loop.op[0]
    if any(a.name == "reuse_workspace" and a.i for a in body.arg):
        raise ValueError("While: the gradient needs the loop body's Do without reuse_workspace")
    return body


def _body_gradient(body: Any, seeds: dict[str, str], backward: BackwardPass) -> tuple[list[Any], dict[str, Any]]:
    """The loop body's gradient ``Do`` and ``{body input: its gradient blob}``."""
    g_output = [seeds.get(o) for o in body.output[:-1]] + [None]
    ops, g_input = do_gradient(body, g_output, backward)
    return ops, dict(zip(body.input[:-1], g_input[:-1]))


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
