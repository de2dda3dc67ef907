"""Caffe2's ``caffe2.python.control_ops_util``: add an ``If`` or ``While`` operator whose nets
run in child workspaces (``Do`` ops over ``CreateScope`` blobs).

A blob a branch or loop body reads before writing it, or whose name is in ``lexical_scope``
(the blobs visible around the op), is *outer*: read from and written back to the enclosing
workspace. Every other blob is local to the child workspace and never appears outside.

    >>> import numpy as np
    >>> from caffe2.python import core, workspace
    >>> from caffe2.python.control_ops_util import add_if_op
    >>> then_net = core.Net("then"); _ = then_net.Add(["x", "x"], "tmp"); _ = then_net.Add(["tmp", "x"], "y")
    >>> net = core.Net("main")
    >>> for name, value in (("c", np.array(True)), ("x", np.array([2.0], np.float32)), ("y", np.zeros(1, np.float32))):
    ...     _ = workspace.FeedBlob(name, value)
    >>> add_if_op(net, "c", {"x", "y", "c"}, then_net)
    >>> _ = workspace.RunNetOnce(net)
    >>> workspace.FetchBlob("y"), workspace.HasBlob("tmp")
    (array([6.], dtype=float32), False)
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core

__all__ = ["add_if_op", "add_while_op", "get_external_blob_names"]


def get_external_blob_names(net: core.Net, lexical_scope: Any) -> tuple[set[str], set[str]]:
    """The outer blobs ``net`` reads (read before any op writes them; each must be in
    ``lexical_scope``) and those it writes (written and in ``lexical_scope``)."""
    scope = {str(b) for b in lexical_scope}
    written: set[str] = set()
    reads: set[str] = set()
    for op in net.Proto().op:
        reads |= {b for b in op.input if b not in written}
        written |= set(op.output)
    undefined = sorted(b for b in reads if b not in scope)
    if undefined:
        raise AssertionError(f"net {net.Name()!r}: input blobs {undefined} are undefined")
    return reads, {b for b in written if b in scope}


def _do_net(outer_net: core.Net, name: str, body: core.Net, reads: set[str], writes: set[str], **args: Any) -> tuple:
    """A net of one Do op running ``body`` in a child workspace; returns it, the Do's
    inputs and outputs (the workspace blob last in both)."""
    ins, outs = sorted(reads), sorted(writes)
    ordered = ins + outs
    inner = sorted(reads | writes)
    ws_blob = outer_net.NextScopedBlob(f"{outer_net.Name()}/{name}")
    do_net = core.Net(f"do_{name}")
    do_net.Do(
        ins + [ws_blob],
        outs + [ws_blob],
        net=body.Proto(),
        inner_blobs=inner,
        outer_blobs_idx=[ordered.index(b) for b in inner],
        **args,
    )
    do_net.AddExternalOutput(*(outs + [ws_blob]))
    outer_net.CreateScope([], [ws_blob])
    return do_net, ins + [ws_blob], outs + [ws_blob]


def _merge(*lists: list[Any]) -> list[Any]:
    out: list[Any] = []
    for items in lists:
        out += [b for b in items if str(b) not in {str(o) for o in out}]
    return out


def add_if_op(if_net: core.Net, cond_blob: Any, lexical_scope: Any, then_net: core.Net, else_net: Any = None) -> None:
    """Append to ``if_net`` an If op on ``cond_blob`` running ``then_net`` (or ``else_net``)."""
    then_reads, then_writes = get_external_blob_names(then_net, lexical_scope)
    do_then, ins, outs = _do_net(if_net, "workspace_if_then", then_net, then_reads, then_writes)
    args = {"then_net": do_then.Proto()}
    if else_net:
        else_reads, else_writes = get_external_blob_names(else_net, lexical_scope)
        do_else, e_ins, e_outs = _do_net(if_net, "workspace_if_else", else_net, else_reads, else_writes)
        args["else_net"] = do_else.Proto()
        ins, outs = _merge(ins, e_ins), _merge(outs, e_outs)
    if_net.If([cond_blob] + [b for b in ins if str(b) != str(cond_blob)], outs, **args)
    if_net.AddExternalOutput(*outs)


def add_while_op(
    while_net: core.Net, cond_blob: Any, lexical_scope: Any, loop_body_net: core.Net, condition_body_net: Any = None
) -> None:
    """Append to ``while_net`` a While op on ``cond_blob`` running ``loop_body_net``; a
    ``condition_body_net`` (its last write is ``cond_blob``) runs before each test."""
    reads, writes = get_external_blob_names(loop_body_net, lexical_scope)
    do_loop, ins, outs = _do_net(
        while_net, "workspace_loop_body", loop_body_net, reads | writes, writes, copy_external_blobs=True
    )
    args = {"loop_net": do_loop.Proto()}
    if condition_body_net:
        if not any(str(cond_blob) in op.output for op in condition_body_net.Proto().op):
            raise AssertionError("Condition net does not write into condition blob")
        c_reads, c_writes = get_external_blob_names(condition_body_net, set(lexical_scope) | {str(cond_blob)})
        do_cond, c_ins, c_outs = _do_net(
            while_net, "workspace_loop_cond", condition_body_net, c_reads, c_writes | {str(cond_blob)}
        )
        args["cond_net"] = do_cond.Proto()
        ins, outs = _merge(ins, c_ins), _merge(outs, c_outs)
        if str(cond_blob) not in {str(b) for b in lexical_scope}:
            while_net.ConstantFill([], str(cond_blob), dtype=core.DataType.BOOL, value=False)
    while_net.While([cond_blob] + [b for b in ins if str(b) != str(cond_blob)], outs, **args)
    while_net.AddExternalOutput(*outs)
