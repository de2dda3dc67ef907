"""Caffe2's RecurrentNetwork and RecurrentNetworkGradient: a step net run over time
(caffe2/operators/rnn/recurrent_network_op.h), on asyncnet's own workspace and executor.

**The step net.** ``step_net`` is an asyncnet NetDef as JSON (the Caffe2 layer converts
Caffe2's ``NetDef`` argument to it). It is created once, in a workspace of its own kept in
the op's last output (``step_workspaces``, as Caffe2 keeps its step workspaces there), and run
once per timestep; the op's inputs are fed into that workspace under their names (the step
net's parameters and ``seq_lengths`` are inputs of the op, as ``recurrent_net`` lists them).

**State.** For each name in ``recurrent_states`` the op keeps an array ``[T + L, N, D]``
whose first ``L`` rows are the initial state (op input ``initial_recurrent_state_ids[k]``: a
``[D]`` vector repeated over the batch, ``[N, D]``, or ``[L, N, D]``).

**Links.** Before step ``t`` each link (``link_internal[k]``, ``link_external[k]``,
``link_offset[k]``, ``link_window[k]``) sets the step net's blob ``internal`` to rows
``t + offset .. t + offset + window`` of ``external`` (a recurrent state or an op input); a
linked blob the step net writes is copied back into those rows after the step; when another
link of the same step reads those rows (a window over a state the step also extends), the copy
happens right after the op that writes it. That is what Caffe2's shared-memory
``rnn_internal_apply_link`` gives.

**Aliases.** Output ``alias_dst[k]`` is ``alias_src[k]`` from row ``alias_offset[k]`` on (a
negative offset counts from the end): ``recurrent_net`` exposes each state as ``<x>_all``
(offset 1, ``[T, N, D]``) and ``<x>_last`` (offset -1, ``[1, N, D]``). The op's outputs
are found by name, as in Caffe2: each but the last is an ``alias_dst`` or a whole recurrent
state (``[T + L, N, D]``).

**Gradient.** RecurrentNetworkGradient runs ``backward_step_net`` (the step net's autodiff,
built by ``caffe2.python.recurrent.recurrent_net``) from ``t = T - 1`` down to 0 with the
forward links plus the ``backward_link_*`` ones, the forward blobs of step ``t`` it reads
restored; the gradient of output ``<x>_all`` is added into the state gradient's row ``t + 1``
before step ``t``, that of ``<x>_last`` into its last row before the first step (a whole
state's gradient row by row the same way, its row 0 after the last step); the step
gradients of the parameters (``param`` indexes the op's inputs; ``param_grads`` names them
in the backward step net) are summed over time. Its inputs are Caffe2's: the gradients of
``outputs_with_grads``, the forward op's inputs, its outputs; its outputs the gradients of
input 0, of each ``param`` and of each initial recurrent state.

``enable_rnn_executor`` and ``rnn_executor.*`` are accepted; the step net always runs on
asyncnet's executor of its net type.

    >>> import numpy as np, asyncnet as an
    >>> step = an.Net("step"); _ = step.Add(["acc_prev", "x_t"], "acc")
    >>> net = an.Net("rnn")
    >>> _ = net.RecurrentNetwork(
    ...     ["xs", "acc0"], ["acc_all", "acc_last", "scratch"], step_net=step.to_def().to_json(),
    ...     recurrent_states=["acc_states"], initial_recurrent_state_ids=[1],
    ...     link_internal=["acc_prev", "acc", "x_t"], link_external=["acc_states", "acc_states", "xs"],
    ...     link_offset=[0, 1, 0], alias_src=["acc_states", "acc_states"],
    ...     alias_dst=["acc_all", "acc_last"], alias_offset=[1, -1])
    >>> ws = an.Workspace(); ws.feed("xs", np.ones((3, 1, 2), np.float32)); ws.feed("acc0", np.zeros(2, np.float32))
    >>> ws.run_net_once(net); ws.fetch("acc_all")[:, 0, 0], ws.fetch("acc_last").shape
    (array([1., 2., 3.], dtype=float32), (1, 1, 2))
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.errors import NetDefinitionError

__all__ = ["StepWorkspaces", "recurrent_network", "recurrent_network_gradient"]


def _strs(name: str, doc: str) -> Arg:
    return Arg(name, list, [], doc, item_type=str)


def _ints(name: str, doc: str) -> Arg:
    return Arg(name, list, [], doc, item_type=int)


_ARGS = [
    Arg("step_net", str, Arg.REQUIRED, "the step net: asyncnet NetDef JSON"),
    Arg("backward_step_net", str, "", "the gradient of the step net (NetDef JSON); empty: forward only"),
    _strs("recurrent_states", "names of the [T + L, N, D] state arrays"),
    _ints("initial_recurrent_state_ids", "for each state, the index of the op input holding its initial value"),
    _strs("link_internal", "step-net blob of each link"),
    _strs("link_external", "state or op input each link reads rows of"),
    _ints("link_offset", "row offset of each link (row t + offset at step t)"),
    _ints("link_window", "rows per link (1 each when absent)"),
    _strs("alias_src", "state exposed by each aliased output"),
    _strs("alias_dst", "aliased output names, in output order"),
    _ints("alias_offset", "first row of each alias (negative: from the end)"),
    Arg("timestep", str, "timestep", "step-net blob holding t (int32, [1])"),
    _ints("param", "op inputs that are parameters of the step net (gradients summed over time)"),
    _strs("param_grads", "the backward step net's blob of each param's step gradient"),
    _strs("backward_link_internal", "backward step-net blob of each backward link"),
    _strs("backward_link_external", "state gradient or input gradient it links to"),
    _ints("backward_link_offset", "row offset of each backward link"),
    Arg("outputs_with_grads", list, [0], "outputs whose gradient the gradient op takes", item_type=int),
    _strs("recompute_blobs_on_backward", "forward blobs the backward step net recomputes (not kept per step)"),
    Arg("enable_rnn_executor", int, 0, "accepted; the step net runs on asyncnet's executor"),
]


def _extra_arg(name: str) -> Arg | None:
    """Caffe2's ``rnn_executor.num_threads`` and friends, and memonger's ``<blob>.rename``."""
    if name.startswith("rnn_executor."):
        return Arg(name, int, 0, "RNN executor hint (accepted, unused)")
    return None


@dataclass(frozen=True)
class _Link:
    internal: str
    external: str
    offset: int
    window: int


def _links(a: dict[str, Any], prefix: str, windows: bool = True) -> list[_Link]:
    internal, external, offset = a[f"{prefix}_internal"], a[f"{prefix}_external"], a[f"{prefix}_offset"]
    window = a["link_window"] if windows and a["link_window"] else [1] * len(offset)
    if not (len(internal) == len(external) == len(offset) == len(window)):
        raise ValueError(
            f"expected {prefix}_internal, {prefix}_external, {prefix}_offset (and link_window) of one length, got "
            f"{len(internal)}, {len(external)}, {len(offset)}, {len(window)}"
        )
    return [_Link(*x) for x in zip(internal, external, offset, window)]


def _validate(op: OperatorDef) -> None:
    a = {arg.name: op.args.get(arg.name, arg.default) for arg in _ARGS}
    _links(a, "link")
    _links(a, "backward_link", windows=False)
    if len(a["recurrent_states"]) != len(a["initial_recurrent_state_ids"]):
        raise ValueError(
            f"expected one initial_recurrent_state_ids entry per recurrent state, got "
            f"{len(a['initial_recurrent_state_ids'])} for {len(a['recurrent_states'])} states"
        )
    if not (len(a["alias_src"]) == len(a["alias_dst"]) == len(a["alias_offset"])):
        raise ValueError("expected alias_src, alias_dst and alias_offset of one length")
    n_in = _forward_input_count(op)
    for name in ("initial_recurrent_state_ids", "param"):
        bad = [i for i in a[name] if not 0 <= i < n_in]
        if bad:
            raise ValueError(f"{name} {bad} index no input of the {n_in} forward inputs")
    unknown = [s for s in a["alias_src"] if s not in a["recurrent_states"]]
    if unknown:
        raise ValueError(f"alias_src {unknown} are not recurrent_states {a['recurrent_states']}")
    _check_outputs(op, a)
    _net(a["step_net"])
    if a["backward_step_net"]:
        _net(a["backward_step_net"])


def _check_outputs(op: OperatorDef, a: dict[str, Any]) -> None:
    if op.type == "RecurrentNetwork":
        for name in op.outputs[:-1]:
            _output_role(a, name)
        return
    most = 1 + len(a["param"]) + len(a["recurrent_states"])
    if len(op.outputs) > most:
        raise ValueError(
            f"expected at most {most} outputs (input 0, each param, each recurrent state), got {len(op.outputs)}"
        )


def _forward_input_count(op: OperatorDef) -> int:
    if op.type == "RecurrentNetwork":
        return len(op.inputs)
    owg = op.args.get("outputs_with_grads", [0])
    return len(op.inputs) - len(owg) - len(_gradient_forward_outputs(op))


def _gradient_forward_outputs(op: OperatorDef) -> list[str]:
    """The forward op's outputs among a RecurrentNetworkGradient's inputs: the trailing aliases
    and states before its last input (step_workspaces), then that last input."""
    named = set(op.args.get("alias_dst", [])) | set(op.args.get("recurrent_states", []))
    most = len(named)
    n = 0
    while n < most and len(op.inputs) - 2 - n >= 0 and op.inputs[len(op.inputs) - 2 - n] in named:
        n += 1
    return op.inputs[len(op.inputs) - 1 - n :]


_NETS: dict[str, NetDef] = {}
_LOCK = threading.Lock()


def _net(text: str) -> NetDef:
    nd = _NETS.get(text)
    if nd is None:
        try:
            nd = NetDef.from_json(text)
        except NetDefinitionError as e:
            raise ValueError(f"expected a step net as asyncnet NetDef JSON: {e}") from None
        with _LOCK:
            nd = _NETS.setdefault(text, nd)
    return nd


class _StepNet:
    """One step net created once in a workspace of its own; ``run(feeds)`` runs it once."""

    def __init__(self, text: str):
        from asyncnet.core.workspace import Workspace

        self.text = text
        nd = _net(text)
        # "straight" runs a simple net's ops in its order with its bits, at less cost per op
        self.net_def = dataclasses.replace(nd, type="straight") if nd.type == "simple" else nd
        self.ws = Workspace()
        self.blobs = self.ws.blob_dict
        self.instance: Any = None
        self.written = {o for op in self.net_def.ops for o in op.outputs}
        self.reads = {i for op in self.net_def.ops for i in op.inputs}
        self.kept: dict[tuple[Any, ...], tuple[str, ...]] = {}  # see _kept_blobs

    def run(self, eager: dict[str, Callable[[], None]] | None = None) -> None:
        """Run the step once; with ``eager``, op by op, calling ``eager[blob]`` right after the
        op that writes ``blob`` (a linked blob whose rows another link of this step reads)."""
        if self.instance is None:
            self.instance = self.ws.create_net(self.net_def, overwrite=True)
        if not eager:
            self.instance.run()
            return
        blobs = self.blobs
        for op in self.instance.operators:
            op.run(blobs)
            for out in op.outputs:
                copy = eager.get(out)
                if copy is not None:
                    copy()


class StepWorkspaces:
    """The op's last output (Caffe2's ``step_workspaces``): the step nets, created once, and
    what the forward pass leaves for the gradient (the states and each step's blobs)."""

    def __init__(self) -> None:
        self.forward: _StepNet | None = None
        self.backward: _StepNet | None = None
        self.states: dict[str, np.ndarray] = {}
        self.saved: list[dict[str, Any]] = []
        self.steps = 0
        self.links: list[tuple[str, str, np.ndarray, int, int]] = []

    def step_blobs(self, t: int) -> dict[str, Any]:
        """The blobs step ``t`` of the last forward run saw: its linked rows and the blobs kept for
        the gradient (Caffe2's RecurrentNetworkBlobFetcher reads them from its step workspaces)."""
        if not 0 <= t < self.steps:
            raise IndexError(f"expected a step in 0..{self.steps - 1}, got {t}")
        blobs = dict(self.saved[t]) if t < len(self.saved) else {}
        for internal, _, ext, offset, window in self.links:
            blobs[internal] = ext[t + offset : t + offset + window]
        return blobs

    def step_net(self, which: str, text: str) -> _StepNet:
        net = getattr(self, which)
        if net is None or net.text != text:
            net = _StepNet(text)
            setattr(self, which, net)
        return net

    def __repr__(self) -> str:
        return f"StepWorkspaces(steps saved={len(self.saved)})"


def _host(x: Any, i: int, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"expected a numpy array in input {i} {name!r}, got {type(x).__name__}")
    return x


def _initial_state(init: np.ndarray, name: str, seq_len: int, batch: int, dtype: Any) -> np.ndarray:
    """The ``[T + L, N, D]`` state array with its first L rows set from ``init``."""
    if not 1 <= init.ndim <= 3:
        raise ValueError(f"expected the initial state {name!r} of rank 1 to 3, got shape {init.shape}")
    if init.ndim >= 2 and init.shape[-2] != batch:
        raise ValueError(f"expected the initial state {name!r} for a batch of {batch}, got shape {init.shape}")
    rows = init.shape[0] if init.ndim == 3 else 1
    state = np.empty((seq_len + rows, batch, init.shape[-1]), dtype)
    state[:rows] = init.reshape(rows, -1 if init.size else batch, init.shape[-1])
    return state


_TIMESTEPS: list[np.ndarray] = []


def _timestep(t: int) -> np.ndarray:
    """The timestep blob of step t: one read-only int32 [1] array per t, shared by every run."""
    while len(_TIMESTEPS) <= t:
        a = np.array([len(_TIMESTEPS)], np.int32)
        a.flags.writeable = False
        _TIMESTEPS.append(a)
    return _TIMESTEPS[t]


class _BoundLinks:
    """The links of one run over ``steps`` timesteps: each link's external array found and its
    rows checked for every step once, so a step only slices and copies."""

    def __init__(self, links: list[_Link], arrays: dict[str, Any], steps: int):
        self.items: list[tuple[str, str, np.ndarray, int, int]] = []
        for link in links:
            ext = arrays.get(link.external)
            if ext is None:
                raise ValueError(
                    f"link {link.internal!r} -> {link.external!r}: no state or input named {link.external!r}"
                )
            bad = _first_bad_step(link, ext.shape[0], steps)
            if bad is not None:
                start = bad + link.offset
                raise ValueError(
                    f"link {link.internal!r} reads rows {start}..{start + link.window} of {link.external!r} "
                    f"(shape {ext.shape}) at step {bad}"
                )
            self.items.append((link.internal, link.external, ext, link.offset, link.window))

    def apply(self, blobs: dict[str, Any], t: int) -> list[np.ndarray]:
        """Set each link's internal blob to its rows of the external array; the views set, by link."""
        views = []
        for internal, _, ext, offset, window in self.items:
            view = ext[t + offset : t + offset + window]
            blobs[internal] = view
            views.append(view)
        return views

    def write_back(self, blobs: dict[str, Any], views: list[np.ndarray], t: int) -> None:
        """Copy each linked blob the step rewrote into its rows (the view set by :meth:`apply`)."""
        for (internal, external, _, _, _), view in zip(self.items, views):
            _copy_into(blobs, internal, external, view, t)

    def shared_rows(self, written: set[str]) -> list[int]:
        """The links (by index) the step writes whose rows another link of the same array reads
        in that step: Caffe2 shared the memory, so the reader sees the write at once."""
        shared = []
        for k, (internal, external, _, offset, window) in enumerate(self.items):
            if internal not in written:
                continue
            for other, ext2, _, off2, win2 in self.items:
                if other != internal and ext2 == external and offset < off2 + win2 and off2 < offset + window:
                    shared.append(k)
                    break
        return shared

    def eager_copies(self, blobs: dict[str, Any], views: list[np.ndarray], shared: list[int], t: int) -> dict:
        """For each shared link, a call copying its blob into its rows (see :meth:`shared_rows`)."""
        copies = {}
        for k in shared:
            internal, external = self.items[k][0], self.items[k][1]
            copies[internal] = functools.partial(_copy_into, blobs, internal, external, views[k], t)
        return copies


def _copy_into(blobs: dict[str, Any], internal: str, external: str, view: np.ndarray, t: int) -> None:
    value = blobs.get(internal)
    if value is view:
        return
    if type(value) is np.ndarray and value.shape == view.shape:
        view[...] = value
        return
    value = np.asarray(value)
    if value.size != view.size:
        raise ValueError(
            f"step {t}: linked blob {internal!r} has shape {value.shape}, its rows of "
            f"{external!r} have shape {view.shape}"
        )
    view[...] = value.reshape(view.shape)


def _first_bad_step(link: _Link, rows: int, steps: int) -> int | None:
    """The first step in 0..steps-1 at which the link's rows fall outside ``rows``, or None."""
    if steps <= 0:
        return None
    if link.offset < 0 or link.offset + link.window > rows:
        return 0
    last = steps - 1
    if last + link.offset + link.window > rows:
        return rows - link.offset - link.window + 1
    return None


def _alias(src: np.ndarray, offset: int) -> np.ndarray:
    start = offset if offset >= 0 else src.shape[0] + offset
    if start > src.shape[0] or start < 0:
        raise ValueError(f"alias offset {offset} is outside the {src.shape[0]} rows of its state")
    return src[start:]


@register_op(
    "RecurrentNetwork",
    inputs=(1, None),
    outputs=(2, None),
    args=_ARGS,
    extra_args=_extra_arg,
    validate=_validate,
    differentiable=True,
    inputs_doc=("input sequence [T, N, ...]", "initial states, parameters and other step-net inputs (by name)"),
    outputs_doc=(
        "by name: an alias (alias_dst) or a whole recurrent state, in any order",
        "step_workspaces (kept for the gradient)",
    ),
    doc="Caffe2's RecurrentNetwork: runs step_net once per timestep on linked rows of the input sequence and "
    "the recurrent states; outputs aliases of the states.",
)
def recurrent_network(ctx: Any, *xs: Any) -> tuple[Any, ...]:
    a, op = ctx.args, ctx.op
    scratch = ctx.output(len(op.outputs) - 1)
    if not isinstance(scratch, StepWorkspaces):
        scratch = StepWorkspaces()
    seq = _host(xs[0], 0, op.inputs[0])
    if seq.ndim < 2:
        raise ValueError(f"expected an input sequence [T, N, ...], got shape {seq.shape}")
    seq_len, batch = seq.shape[0], seq.shape[1]
    step = scratch.step_net("forward", a["step_net"])
    states = {
        name: _initial_state(_host(xs[i], i, op.inputs[i]), op.inputs[i], seq_len, batch, seq.dtype)
        for name, i in zip(a["recurrent_states"], a["initial_recurrent_state_ids"])
    }
    arrays: dict[str, Any] = {**dict(zip(op.inputs, xs)), **states}
    links = _links(a, "link")
    bound = _BoundLinks(links, arrays, seq_len)
    blobs = step.blobs
    blobs.update(zip(op.inputs, xs))
    backward = bool(a["backward_step_net"])
    keep = _kept_blobs(a, step, links) if backward else ()
    saved = []
    timestep = a["timestep"]
    shared = bound.shared_rows(step.written)
    for t in range(seq_len):
        blobs[timestep] = _timestep(t)
        views = bound.apply(blobs, t)
        step.run(bound.eager_copies(blobs, views, shared, t) if shared else None)
        bound.write_back(blobs, views, t)
        if backward:
            saved.append({k: blobs[k] for k in keep if k in blobs})
    scratch.states, scratch.saved, scratch.steps, scratch.links = states, saved, seq_len, bound.items
    outs = [_forward_output(a, states, name) for name in op.outputs[:-1]]
    return (*outs, scratch)


def _output_role(a: dict[str, Any], name: str) -> tuple[str, int]:
    """What forward output ``name`` holds: ("alias", k) for ``alias_dst[k]``, ("state", k) for
    the whole array of ``recurrent_states[k]`` (Caffe2 finds the op's outputs by name)."""
    if name in a["alias_dst"]:
        return "alias", a["alias_dst"].index(name)
    if name in a["recurrent_states"]:
        return "state", a["recurrent_states"].index(name)
    raise ValueError(
        f"output {name!r} is neither an alias_dst {a['alias_dst']} nor a recurrent state {a['recurrent_states']}"
    )


def _forward_output(a: dict[str, Any], states: dict[str, np.ndarray], name: str) -> np.ndarray:
    role, k = _output_role(a, name)
    if role == "state":
        return states[a["recurrent_states"][k]]
    return _alias(states[a["alias_src"][k]], a["alias_offset"][k])


def _kept_blobs(a: dict[str, Any], step: _StepNet, links: list[_Link]) -> tuple[str, ...]:
    """The forward blobs of a step the backward step net reads: written by the step net, not
    linked (links are rebuilt) and not recomputed on the backward pass (found once per step net)."""
    key = (a["backward_step_net"], tuple(link.internal for link in links), tuple(a["recompute_blobs_on_backward"]))
    kept = step.kept.get(key)
    if kept is None:
        bwd = _net(a["backward_step_net"])
        reads = {i for op in bwd.ops for i in op.inputs}
        linked = {link.internal for link in links}
        kept = step.kept[key] = tuple(sorted((reads & step.written) - linked - set(a["recompute_blobs_on_backward"])))
    return kept


@register_op(
    "RecurrentNetworkGradient",
    inputs=(3, None),
    outputs=(1, None),
    args=_ARGS,
    extra_args=_extra_arg,
    validate=_validate,
    inputs_doc=("gradients of outputs_with_grads", "the forward op's inputs", "the forward op's outputs"),
    outputs_doc=(
        "gradient of input 0",
        "gradients of each param, then of each initial recurrent state (trailing ones may be left out)",
    ),
    doc="Gradient of RecurrentNetwork: runs backward_step_net from the last timestep to the first, summing the "
    "parameters' step gradients.",
)
def recurrent_network_gradient(ctx: Any, *xs: Any) -> Any:
    a, op = ctx.args, ctx.op
    if not a["backward_step_net"]:
        raise ValueError("the RecurrentNetwork was built forward-only: it has no backward_step_net")
    owg = a["outputs_with_grads"]
    n_in = _forward_input_count(op)
    fwd = xs[len(owg) : len(owg) + n_in]
    names = op.inputs[len(owg) : len(owg) + n_in]
    scratch = xs[-1]
    if not isinstance(scratch, StepWorkspaces) or not scratch.states and a["recurrent_states"]:
        raise ValueError(f"expected the forward op's step_workspaces in the last input, got {type(scratch).__name__}")
    seq = _host(fwd[0], 0, names[0])
    if len(scratch.saved) != seq.shape[0]:
        raise ValueError(f"the forward pass kept {len(scratch.saved)} steps for a sequence of {seq.shape[0]}")
    state_grads = {s: np.zeros_like(v) for s, v in scratch.states.items()}
    input_grad = np.zeros_like(seq)
    out_names = _gradient_forward_outputs(op)[:-1]
    step_grads, last_grads, whole_grads = _output_grads(a, out_names, xs[: len(owg)])
    for s, g in last_grads:
        state_grads[s][-1] += np.asarray(g).reshape(state_grads[s][-1].shape)
    whole_grads = [(s, np.asarray(g).reshape(state_grads[s].shape)) for s, g in whole_grads]
    step_grads += [(s, g[1:]) for s, g in whole_grads]  # row t + 1 is step t's output
    arrays: dict[str, Any] = {**dict(zip(names, fwd)), **scratch.states, names[0] + "_grad": input_grad}
    arrays.update({s + "_grad": g for s, g in state_grads.items()})
    params = [names[i] for i in a["param"]]
    totals = _run_backward(a, scratch, dict(zip(names, fwd)), arrays, state_grads, step_grads, params)
    for s, g in whole_grads:  # row 0, the initial state, after the steps wrote theirs
        state_grads[s][0] += g[0]
    inits = [
        _initial_grad(state_grads[s], fwd[i]) for s, i in zip(a["recurrent_states"], a["initial_recurrent_state_ids"])
    ]
    results = (input_grad, *totals, *inits)[: len(op.outputs)]
    return results[0] if len(results) == 1 else results


def _run_backward(
    a: dict[str, Any],
    scratch: StepWorkspaces,
    inputs: dict[str, Any],
    arrays: dict[str, Any],
    state_grads: dict[str, np.ndarray],
    step_grads: list[Any],
    params: list[str],
) -> list[np.ndarray]:
    """Run the backward step net from the last step to the first; the params' summed gradients."""
    links = _links(a, "link") + _links(a, "backward_link", windows=False)
    bstep = scratch.step_net("backward", a["backward_step_net"])
    param_grads = a["param_grads"] or [p + "_grad" for p in params]
    totals = [np.zeros_like(inputs[p]) for p in params]
    blobs = bstep.blobs
    blobs.update(inputs)
    bound = _BoundLinks(links, arrays, len(scratch.saved))
    timestep = a["timestep"]
    for t in reversed(range(len(scratch.saved))):
        blobs.update(scratch.saved[t])
        blobs[timestep] = _timestep(t)
        for s, g in step_grads:
            state_grads[s][t + 1] += g[t]
        views = bound.apply(blobs, t)
        bstep.run()
        bound.write_back(blobs, views, t)
        for k, g in enumerate(param_grads):
            if g not in blobs:
                raise ValueError(f"the backward step net wrote no {g!r} (the step gradient of param {params[k]!r})")
            totals[k] += np.asarray(blobs[g]).reshape(totals[k].shape)
    return totals


def _output_grads(
    a: dict[str, Any], out_names: list[str], grads_out: tuple[Any, ...]
) -> tuple[list[Any], list[Any], list[Any]]:
    """(state, gradient) pairs of the ``_all`` aliases, of the ``_last`` aliases and of the
    outputs that are whole states, for the forward outputs ``outputs_with_grads`` names."""
    per_step, last, whole = [], [], []
    for g, j in zip(grads_out, a["outputs_with_grads"]):
        if not 0 <= j < len(out_names):
            raise ValueError(f"outputs_with_grads {j} names no forward output (there are {len(out_names)})")
        role, k = _output_role(a, out_names[j])
        if role == "state":
            whole.append((a["recurrent_states"][k], g))
            continue
        src, off = a["alias_src"][k], a["alias_offset"][k]
        if off == 1:
            per_step.append((src, np.asarray(g)))
        elif off == -1:
            last.append((src, g))
        else:
            raise ValueError(f"a gradient for an alias at offset {off}: Caffe2 takes them at offsets 1 and -1 only")
    return per_step, last, whole


def _initial_grad(state_grad: np.ndarray, init: np.ndarray) -> np.ndarray:
    if init.ndim >= 2:
        rows = init.shape[0] if init.ndim == 3 else 1
        return state_grad[:rows].reshape(init.shape).copy()
    return state_grad[0].sum(axis=0).astype(init.dtype, copy=False)


@register_gradient("RecurrentNetwork")
def _recurrent_network_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    """Caffe2's GetRecurrentNetworkGradient: inputs the gradients of ``outputs_with_grads`` (zeros
    for one autodiff has none), all inputs, all outputs; outputs the gradients of input 0, the
    params and the initial states. Gradients reaching other outputs are ignored, as in Caffe2."""
    owg = op.args.get("outputs_with_grads", [0])
    ops: list[OperatorDef] = []
    gos = []
    for j in owg:
        g = gout[j]
        if g is None:
            g = f"#zero_{j}"
            ops.append(OperatorDef("ConstantFill", [op.outputs[j]], [g], {"value": 0.0}))
        gos.append(g)
    params = list(op.args.get("param", []))
    inits = list(op.args.get("initial_recurrent_state_ids", []))
    outs = ["#d_input", *[f"#d_param{k}" for k in range(len(params))], *[f"#d_init{k}" for k in range(len(inits))]]
    ops.append(OperatorDef("RecurrentNetworkGradient", [*gos, *op.inputs, *op.outputs], outs, dict(op.args)))
    gin: list[str | None] = [None] * len(op.inputs)
    gin[0] = outs[0]
    for k, i in enumerate(params):
        gin[i] = outs[1 + k]
    for k, i in enumerate(inits):
        gin[i] = outs[1 + len(params) + k]
    return ops, gin
