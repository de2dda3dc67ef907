"""Caffe2's ``recurrent.recurrent_net``: one ``RecurrentNetwork`` op stepping a cell net over time.

It emits the op with Caffe2's arguments (links, aliases, recurrent states, parameters, the
backward step net): asyncnet's RecurrentNetwork runs the cell net once per timestep on
asyncnet's executor, and its gradient runs the backward step net built here by asyncnet's
autodiff of the cell net (what Caffe2's ``GradientRegistry.GetBackwardPass`` gave).

Blob names follow Caffe2: a recurrent state ``<scope>/<cell input>_states`` ``[T + 1, N, D]``,
outputs ``<cell output>_all`` ``[T, N, D]`` and ``<cell output>_last`` ``[1, N, D]`` per state,
and ``<scope>/step_workspaces`` (not returned).

    >>> import numpy as np
    >>> from caffe2.python import core, recurrent, workspace
    >>> cell = core.Net("cell")
    >>> x_t, acc_prev = cell.AddExternalInputs("x_t", "acc_prev")
    >>> acc = cell.Add([acc_prev, x_t], "acc"); cell.AddExternalOutputs(acc)
    >>> net = core.Net("running_sum")
    >>> all_, last = recurrent.recurrent_net(net, cell, [(x_t, "xs")], [(acc_prev, "acc0")], {acc_prev: acc},
    ...                                      scope="sum", forward_only=True)
    >>> _ = workspace.FeedBlob("xs", np.ones((3, 1, 2), np.float32))
    >>> _ = workspace.FeedBlob("acc0", np.zeros((1, 1, 2), np.float32))
    >>> _ = workspace.RunNetOnce(net); str(all_), workspace.FetchBlob(all_)[:, 0, 0]
    ('acc_all', array([1., 2., 3.], dtype=float32))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asyncnet.autodiff import backward_ops
from asyncnet.ops.sparse import GradientSlice
from caffe2 import convert
from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

__all__ = ["recurrent_net", "retrieve_step_blobs", "set_rnn_executor_config"]


def recurrent_net(
    net: Any,
    cell_net: Any,
    inputs: Any,
    initial_cell_inputs: Any,
    links: Any,
    timestep: Any = None,
    scope: Any = None,
    outputs_with_grads: Any = (0,),
    recompute_blobs_on_backward: Any = None,
    forward_only: bool = False,
) -> tuple[Any, ...]:
    """Add a RecurrentNetwork op to ``net`` running ``cell_net`` over ``inputs`` (one
    ``(cell input, [T, N, ...] blob)`` pair), its states starting from ``initial_cell_inputs``
    (``(cell input, blob)`` pairs) and carried by ``links`` ({cell input at t + 1: cell output
    at t}); returns ``(<state>_all, <state>_last)`` for each state, in order."""
    if len(inputs) != 1:
        raise ValueError(f"recurrent_net takes one input sequence, got {len(inputs)}")
    op_name = net.NextName("recurrent")
    prefix = str(op_name if scope is None else scope)

    def s(name: str) -> str:
        return f"{prefix}/{name}"

    cell = cell_net.Proto()
    input_t, input_blob = str(inputs[0][0]), _outer_name(inputs[0][1])
    initial_cell_inputs = [(c, _outer_name(b)) for c, b in initial_cell_inputs]
    known = {input_t, input_blob, *(str(x[1]) for x in initial_cell_inputs), *(str(x[0]) for x in initial_cell_inputs)}
    if timestep is not None:
        known.add(str(timestep))
    references = [core.BlobReference(b) for b in cell.external_input if b not in known]
    backward = mapping = None
    if not forward_only:
        state_outputs = {str(links[k]) for k in links}
        backward, mapping = _backward_step_net(cell, state_outputs, recompute_blobs_on_backward)
    all_inputs = [input_blob, *(str(x[1]) for x in initial_cell_inputs), *map(str, references)]
    forward_links: list[tuple[str, str, int]] = []
    backward_links: list[tuple[str, str, int]] = []
    aliases: list[tuple[str, str, int]] = []
    outputs: list[str] = []
    states = []
    for cell_input, _ in initial_cell_inputs:
        cell_input = str(cell_input)
        state = s(cell_input + "_states")
        cell_output = str(links[cell_input]) if cell_input in links else str(links[core.BlobReference(cell_input)])
        forward_links += [(cell_input, state, 0), (cell_output, state, 1)]
        aliases += [(state, cell_output + "_all", 1), (state, cell_output + "_last", -1)]
        outputs += [cell_output + "_all", cell_output + "_last"]
        states.append(state)
        if backward is not None:
            backward_links.append((cell_output + "_grad", state + "_grad", 1))
            backward.external_input.append(cell_output + "_grad")
            written = {o for op in backward.op for o in op.output}
            grad = cell_input + "_grad" if cell_input + "_grad" in written else mapping.get(cell_input)
            if grad is not None:
                backward_links.append((grad, state + "_grad", 0))
    forward_links.append((input_t, input_blob, 0))
    args: dict[str, Any] = {}
    if backward is not None:
        if input_t in mapping:
            backward_links.append((mapping[input_t], input_blob + "_grad", 0))
        backward.external_input.extend(cell.external_input)
        backward.external_input.extend(cell.external_output)
        _accumulate_into_external_inputs(backward)
        params = [str(r) for r in references if str(r) in mapping]
        args = {
            "param": [all_inputs.index(p) for p in params],
            "param_grads": [mapping[p] for p in params],
            "outputs_with_grads": list(outputs_with_grads),
            "recompute_blobs_on_backward": sorted(str(b) for b in recompute_blobs_on_backward or ()),
            **_triple("backward_link", backward_links),
        }
        if len(backward.op):
            args["backward_step_net"] = backward
    cell.type = "simple"
    results = net.RecurrentNetwork(
        [core.BlobReference(b) for b in all_inputs],  # names as they are: a string would take the name scope again
        [*map(core.BlobReference, outputs), s("step_workspaces")],  # the aliases' names as they are
        alias_src=[a[0] for a in aliases],
        alias_dst=[a[1] for a in aliases],
        alias_offset=[a[2] for a in aliases],
        recurrent_states=states,
        initial_recurrent_state_ids=[all_inputs.index(str(x[1])) for x in initial_cell_inputs],
        **_triple("link", forward_links),
        enable_rnn_executor=1,
        step_net=cell,
        timestep="timestep" if timestep is None else str(timestep),
        **args,
    )
    return tuple(results[:-1])


def _outer_name(blob: Any) -> str:
    """An outer-net blob as the op takes it: a string under the current name scope (as every
    string input of a Caffe2 op), a BlobReference as it is."""
    return str(core.ScopedBlobReference(blob)) if isinstance(blob, str) else str(blob)


def _triple(prefix: str, links: list[tuple[str, str, int]]) -> dict[str, list[Any]]:
    return {
        f"{prefix}_internal": [x[0] for x in links],
        f"{prefix}_external": [x[1] for x in links],
        f"{prefix}_offset": [x[2] for x in links],
    }


def _backward_step_net(
    cell: Any, state_outputs: set[str], recompute: Iterable[Any] | None
) -> tuple[Any, dict[str, str]]:
    """The backward step net (Caffe2's ``RecurrentBackwardStep``) and {cell blob: its gradient}.

    The gradients that come from outside a step are those of the outputs linked to the next
    step's states (``<output>_grad``, rows of the state gradients); another external output of
    the cell (an LSTM's hidden state that an attention cell copies) gets its gradient from the
    step's own ops only."""
    fwd = [convert.drop_unknown_args(convert.op_to_asyncnet(op, f"step_net.op[{i}]")) for i, op in enumerate(cell.op)]
    seeds = {o: o + "_grad" for o in cell.external_output if o in state_outputs}
    ops, grads = backward_ops(fwd, seeds)
    sparse = [b for b, g in grads.items() if isinstance(g, GradientSlice)]
    if sparse:
        raise NotImplementedError(f"recurrent_net: sparse gradients of {sparse} inside a step net are not supported")
    backward = caffe2_pb2.NetDef(name="RecurrentBackwardStep", type="simple")
    recompute = {str(b) for b in recompute or ()}
    if recompute:
        for op in cell.op:
            if not recompute.isdisjoint(op.output):
                if not set(op.output) <= recompute:
                    raise ValueError(
                        f"recompute_blobs_on_backward: op {op.type} also writes {sorted(set(op.output) - recompute)}"
                    )
                backward.op.add().CopyFrom(op)
    backward.op.extend(convert.op_from_asyncnet(op) for op in ops)
    undefined = _undefined_blobs(backward)
    written = {o for op in cell.op for o in op.output}
    backward.external_input.extend(sorted(b for b in written if b in undefined and b not in set(cell.external_output)))
    return backward, {k: str(v) for k, v in grads.items()}


def _undefined_blobs(net: Any) -> set[str]:
    """Blobs some op of ``net`` reads before any op writes them."""
    written: set[str] = set()
    undefined: set[str] = set()
    for op in net.op:
        undefined.update(b for b in op.input if b not in written)
        written.update(op.output)
    return undefined


def _accumulate_into_external_inputs(backward: Any) -> None:
    """An op writing a blob the backward step net also takes from outside (not in place) adds
    to it instead of overwriting it (``X_accum`` then ``Sum([X, X_accum], X)``), as Caffe2 does."""
    ops = list(backward.op)
    del backward.op[:]
    external = set(backward.external_input)
    for op in ops:
        new = backward.op.add()
        new.CopyFrom(op)
        for j, out in enumerate(op.output):
            if out in external and out not in op.input:
                new.output[j] = out + "_accum"
                backward.op.add().CopyFrom(core.CreateOperator("Sum", [out, out + "_accum"], [out]))


def set_rnn_executor_config(rnn_op: Any, num_threads: int | None = None, max_cuda_streams: int | None = None) -> None:
    """Caffe2's RNN executor hints as ``rnn_executor.*`` arguments of ``rnn_op`` (accepted, unused)."""
    if rnn_op.type not in ("RecurrentNetwork", "RecurrentNetworkGradient"):
        raise ValueError(f"expected a RecurrentNetwork or RecurrentNetworkGradient op, got {rnn_op.type}")
    for key, value in (("num_threads", num_threads), ("max_cuda_streams", max_cuda_streams)):
        if value is not None:
            rnn_op.arg.add(name="rnn_executor." + key, i=value)


def retrieve_step_blobs(net: Any, prefix: str = "rnn") -> list[bytes]:
    """Copy each step's blobs of every RecurrentNetwork op of ``net`` into the current workspace
    as ``<prefix>_<blob><step>`` and return their names as bytes, as Caffe2's
    RecurrentNetworkBlobFetcher does.

    Example: after a 2-step run, ``retrieve_step_blobs(net, "x")`` holds ``b"x_input_t0"``.
    """
    import numpy as np

    names: list[bytes] = []
    for op in net.Proto().op:
        if op.type != "RecurrentNetwork":
            continue
        scratch = workspace.FetchBlob(op.output[-1])
        for t in range(scratch.steps):
            for blob, value in scratch.step_blobs(t).items():
                name = f"{prefix}_{blob}{t}"
                workspace.FeedBlob(name, np.asarray(value))
                names.append(name.encode())
    return names
