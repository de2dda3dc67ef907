"""Caffe2's ``memonger``: rewrite a net so that blobs whose lifetimes do not overlap share one
name, and so one buffer; the rewritten net computes the same values with fewer blobs.

How it works here (one model for every entry point):

* **Order.** Ops run in a sequence (the net's own order, or a topological order of its
  dependency graph for :func:`optimize_interference`).
* **Live range.** A blob defined inside the net lives from the position of its first writer to
  the position of its last reader or writer in that order (:class:`LiveRange`). Blobs read before
  any op writes them (inputs, parameters) and the blobs a caller names as static never move.
* **Sharing.** Two blobs may share when one's range ends strictly before the other's begins (a
  blob an op reads is never the name of another of that op's outputs). A group of sharing blobs
  takes the name of its earliest member, so nothing new appears in the net.
* **Packing.** :func:`compute_assignments_greedy` puts each range, in order, into the free group
  whose largest blob is closest in size to it (a new group when none is free);
  :func:`compute_assignments_dp` searches every packing of small sets for the least memory
  (the sum over groups of the largest blob) and packs greedily above that size.

Renaming keeps the results: the executors order ops by the blobs they read and write, so a
reused name only adds ordering between ops that no longer overlap in time.

    >>> from caffe2.python import core, memonger
    >>> net = core.Net("chain")
    >>> _ = net.Relu("x", "a"); _ = net.Relu("a", "b"); _ = net.Relu("b", "c"); _ = net.Relu("c", "y")
    >>> opt = memonger.optimize_inference_fast(net.Proto(), ["x", "y"])
    >>> [(list(op.input), list(op.output)) for op in opt.op]
    [(['x'], ['a']), (['a'], ['b']), (['b'], ['a']), (['a'], ['y'])]
"""

from __future__ import annotations

import copy
import enum
import itertools
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from caffe2.proto import caffe2_pb2

__all__ = [
    "AssignmentAlgorithm",
    "InterferenceGraph",
    "LiveRange",
    "Optimization",
    "Statistics",
    "collect_blob_sizes",
    "compute_assignments",
    "compute_assignments_dp",
    "compute_assignments_greedy",
    "compute_interference_graph",
    "compute_statistics",
    "get_memory_usage",
    "optimize_inference_for_dag",
    "optimize_inference_fast",
    "optimize_interference",
    "release_blobs_when_used",
    "share_grad_blobs",
    "topological_sort_traversal",
    "topological_sort_traversal_longest_path",
    "verify_graph_equality",
]

LiveRange = namedtuple("LiveRange", ["defined", "used", "size"])
LiveRange.__doc__ = "Where a blob is first written (``defined``), last touched (``used``), and its size."
Optimization = namedtuple("Optimization", ["net", "assignments", "blob_assignments"])
Optimization.__doc__ = "The rewritten net, the groups of (blob, LiveRange), and each blob's new name."
Statistics = namedtuple("Statistics", ["baseline_nbytes", "optimized_nbytes"])
Statistics.__doc__ = "Memory of the blobs apart (each its own size) and shared (each group its largest)."

_DP_LIMIT = 10  # compute_assignments_dp searches exhaustively up to this many ranges
_NET_ARGS = ("step_net", "backward_step_net", "then_net", "else_net", "loop_net", "cond_net", "net")


class AssignmentAlgorithm(enum.Enum):
    """How :func:`compute_assignments` packs live ranges into shared blobs."""

    GREEDY = 0
    DYNAMIC_PROGRAMMING = 1


# -- the dependency graph and its orders --------------------------------------------------------


class InterferenceGraph:
    """A directed acyclic graph over op indices: ``i -> j`` when op ``j`` (after ``i``) reads or
    writes a blob op ``i`` writes, or writes a blob op ``i`` reads. ``op(i)`` is the op itself."""

    def __init__(self, ops: Sequence[Any]):
        self.ops = list(ops)
        self._succ: dict[int, list[int]] = {i: [] for i in range(len(self.ops))}
        self._pred: dict[int, list[int]] = {i: [] for i in range(len(self.ops))}

    def add_edge(self, i: int, j: int) -> None:
        if j not in self._succ[i]:
            self._succ[i].append(j)
            self._pred[j].append(i)

    def nodes(self) -> list[int]:
        return list(self._succ)

    def edges(self) -> list[tuple[int, int]]:
        return [(i, j) for i in self._succ for j in self._succ[i]]

    def successors(self, i: int) -> list[int]:
        return list(self._succ[i])

    def predecessors(self, i: int) -> list[int]:
        return list(self._pred[i])

    def op(self, i: int) -> Any:
        return self.ops[i]

    def __len__(self) -> int:
        return len(self.ops)


def compute_interference_graph(ops: Sequence[Any]) -> InterferenceGraph:
    """The :class:`InterferenceGraph` of ``ops`` (OperatorDef protos, in net order).

    >>> from caffe2.python import core
    >>> net = core.Net("n"); _ = net.Copy("b", "b"); _ = net.Copy("b", "b")
    >>> compute_interference_graph(net.Proto().op).edges()
    [(0, 1)]
    """
    g = InterferenceGraph(ops)
    for j, later in enumerate(ops):
        reads, writes = set(later.input), set(later.output)
        for i in range(j):
            earlier = ops[i]
            if set(earlier.output) & (reads | writes) or set(earlier.input) & writes:
                g.add_edge(i, j)
    return g


def topological_sort_traversal(g: InterferenceGraph) -> list[int]:
    """A topological order: the reverse of the depth-first post-order that starts from each node
    in index order and visits successors in index order."""
    seen: set[int] = set()
    post: list[int] = []
    for root in g.nodes():
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(sorted(g.successors(root))))]
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c not in seen), None)
            if child is None:
                stack.pop()
                post.append(node)
            else:
                seen.add(child)
                stack.append((child, iter(sorted(g.successors(child)))))
    return post[::-1]


def _depths(g: InterferenceGraph) -> dict[int, int]:
    """The number of nodes on the longest path from a source to each node."""
    depth: dict[int, int] = {}
    for node in topological_sort_traversal(g):
        depth[node] = 1 + max((depth[p] for p in g.predecessors(node)), default=0)
    return depth


def topological_sort_traversal_longest_path(g: InterferenceGraph) -> list[int]:
    """A topological order that finishes the longest chain of ops first: a post-order walk back
    from the sinks (deepest first) that visits each node's predecessors deepest first.

    >>> from caffe2.python import core
    >>> net = core.Net("n"); _ = net.Relu("s", "t"); _ = net.Relu("a", "b"); _ = net.Relu("b", "c")
    >>> topological_sort_traversal_longest_path(compute_interference_graph(net.Proto().op))
    [1, 2, 0]
    """
    depth = _depths(g)

    def deepest_first(nodes: Iterable[int]) -> list[int]:
        return sorted(nodes, key=lambda n: (-depth[n], n))

    sinks = deepest_first(n for n in g.nodes() if not g.successors(n))
    done: set[int] = set()
    order: list[int] = []
    for sink in sinks:
        stack = [(sink, iter(deepest_first(g.predecessors(sink))))]
        while stack:
            node, preds = stack[-1]
            pred = next((p for p in preds if p not in done), None)
            if pred is None:
                stack.pop()
                if node not in done:
                    done.add(node)
                    order.append(node)
            else:
                stack.append((pred, iter(deepest_first(g.predecessors(pred)))))
    return order


# -- live ranges and their packing ------------------------------------------------------------


def _live_ranges(
    ops: Sequence[Any], candidates: Callable[[str], bool], sizes: dict[str, int] | None
) -> dict[str, LiveRange]:
    """The live range of each blob first written by an op of ``ops`` that ``candidates`` accepts."""
    ranges: dict[str, LiveRange] = {}
    seen: set[str] = set()
    for pos, op in enumerate(ops):
        for name in op.input:
            if name in ranges:
                ranges[name] = ranges[name]._replace(used=pos)
            seen.add(name)
        for name in op.output:
            if name in ranges:
                ranges[name] = ranges[name]._replace(used=pos)
            elif name not in seen and candidates(name):
                ranges[name] = LiveRange(pos, pos, (sizes or {}).get(name, 1))
            seen.add(name)
    return ranges


def _fits(group: list[tuple[str, LiveRange]], r: LiveRange) -> bool:
    return all(other.used < r.defined or r.used < other.defined for _, other in group)


def get_memory_usage(assignments: Sequence[Sequence[tuple[str, LiveRange]]]) -> int:
    """The memory of ``assignments``: the sum over groups of their largest blob."""
    return sum(max(r.size for _, r in group) for group in assignments if group)


def compute_assignments_greedy(
    ranges_sorted: Sequence[tuple[str, LiveRange]], init_assignments: Sequence[Any] | None = None
) -> list[list[tuple[str, LiveRange]]]:
    """Groups of (blob, LiveRange) whose ranges do not overlap: each range, in order, joins the
    free group whose largest blob is nearest its size, else opens a group.

    >>> R = LiveRange
    >>> [[n for n, _ in g] for g in compute_assignments_greedy([("a", R(0, 1, 4)), ("b", R(2, 3, 4))])]
    [['a', 'b']]
    """
    groups = [list(g) for g in (init_assignments or [])]
    for name, r in ranges_sorted:
        free = [g for g in groups if _fits(g, r)]
        if free:
            best = min(free, key=lambda g: (abs(max(x.size for _, x in g) - r.size), groups.index(g)))
            best.append((name, r))
        else:
            groups.append([(name, r)])
    return groups


def _search(items: Sequence[tuple[str, LiveRange]], groups: list[list[tuple[str, LiveRange]]], best: list[Any]) -> None:
    """Branch and bound over the placements of ``items`` into ``groups``; ``best`` = [cost, groups]."""
    cost = get_memory_usage(groups)
    if cost >= best[0]:
        return
    if not items:
        best[0], best[1] = cost, [list(g) for g in groups]
        return
    (name, r), rest = items[0], items[1:]
    for g in groups:
        if _fits(g, r):
            g.append((name, r))
            _search(rest, groups, best)
            g.pop()
    groups.append([(name, r)])
    _search(rest, groups, best)
    groups.pop()


def compute_assignments_dp(
    ranges_sorted: Sequence[tuple[str, LiveRange]], init_assignment: Sequence[Any] | None, counter: Any = None
) -> list[list[tuple[str, LiveRange]]]:
    """Groups of (blob, LiveRange) of least memory (:func:`get_memory_usage`): an exhaustive
    search up to ten ranges, the greedy packing above (``counter`` is accepted and unused).

    >>> R = LiveRange
    >>> best = compute_assignments_dp([("a", R(1, 2, 10)), ("b", R(4, 6, 1)), ("c", R(5, 6, 10))], [])
    >>> get_memory_usage(best)
    11
    """
    init = [list(g) for g in (init_assignment or [])]
    if len(ranges_sorted) > _DP_LIMIT:
        return compute_assignments_greedy(ranges_sorted, init)
    greedy = compute_assignments_greedy(ranges_sorted, init)
    best: list[Any] = [get_memory_usage(greedy) + 1, greedy]
    _search(list(ranges_sorted), init, best)
    return best[1]


def compute_assignments(
    ranges: Sequence[tuple[str, LiveRange]], static_blobs: Iterable[str], algo: AssignmentAlgorithm
) -> list[list[tuple[str, LiveRange]]]:
    """Pack the (blob, LiveRange) pairs not in ``static_blobs``, sorted by definition, with ``algo``."""
    static = set(static_blobs)
    ranges_sorted = sorted((x for x in ranges if x[0] not in static), key=lambda x: (x[1].defined, x[1].used, x[0]))
    if algo == AssignmentAlgorithm.DYNAMIC_PROGRAMMING:
        return compute_assignments_dp(ranges_sorted, None)
    return compute_assignments_greedy(ranges_sorted, None)


def compute_statistics(assignments: Sequence[Sequence[tuple[str, LiveRange]]]) -> Statistics:
    """Memory before (every blob its own) and after (:func:`get_memory_usage`) sharing."""
    baseline = sum(r.size for group in assignments for _, r in group)
    return Statistics(baseline_nbytes=baseline, optimized_nbytes=get_memory_usage(assignments))


def collect_blob_sizes(net: Any) -> dict[str, int]:
    """The bytes of each blob of ``net`` (a NetDef or ``core.Net``) in the current workspace."""
    from caffe2.python import workspace

    proto = net.Proto() if hasattr(net, "Proto") else net
    sizes: dict[str, int] = {}
    for op in proto.op:
        for name in list(op.input) + list(op.output):
            if name not in sizes and workspace.HasBlob(name):
                value = workspace.FetchBlob(name)
                sizes[name] = int(getattr(value, "nbytes", 0))
    return sizes


# -- renaming --------------------------------------------------------------------------------


def _pinned(ops: Sequence[Any]) -> set[str]:
    """Blobs that ops holding nets or blob names in arguments refer to (never renamed)."""
    names: set[str] = set()
    for op in ops:
        if not any(a.name in _NET_ARGS or a.HasField("n") or len(a.nets) for a in op.arg):
            continue
        names.update(op.input, op.output)
        for a in op.arg:
            names.update(s.decode() if isinstance(s, bytes) else s for s in a.strings)
            if a.HasField("s"):
                names.add(a.s.decode() if isinstance(a.s, bytes) else a.s)
    return names


def _rename(proto: Any, mapping: dict[str, str], order: Sequence[int] | None = None) -> Any:
    """A copy of NetDef ``proto`` with its ops in ``order`` and blob names mapped."""
    out = copy.deepcopy(proto)
    ops = [copy.deepcopy(proto.op[i]) for i in (order if order is not None else range(len(proto.op)))]
    del out.op[:]
    for op in ops:
        op.input[:] = [mapping.get(n, n) for n in op.input]
        op.output[:] = [mapping.get(n, n) for n in op.output]
        out.op.add().CopyFrom(op)
    return out


def _mapping(groups: Sequence[Sequence[tuple[str, LiveRange]]]) -> dict[str, str]:
    """Each blob of a group to the name of the group's earliest member."""
    mapping: dict[str, str] = {}
    for group in groups:
        head = min(group, key=lambda x: (x[1].defined, x[0]))[0]
        for name, _ in group:
            mapping[name] = head
    return mapping


def _never_read(ops: Sequence[Any]) -> set[str]:
    reads = {n for op in ops for n in op.input}
    return {n for op in ops for n in op.output if n not in reads}


def _share(
    proto: Any,
    candidates: Callable[[str], bool],
    sizes: dict[str, int] | None = None,
    order: Sequence[int] | None = None,
    algo: AssignmentAlgorithm = AssignmentAlgorithm.GREEDY,
) -> Optimization:
    ops = [proto.op[i] for i in order] if order is not None else list(proto.op)
    pinned = _pinned(ops) | set(proto.external_input) | set(proto.external_output)
    ranges = _live_ranges(ops, lambda n: n not in pinned and candidates(n), sizes)
    groups = compute_assignments(list(ranges.items()), (), algo)
    mapping = _mapping(groups)
    return Optimization(_rename(proto, mapping, order), groups, mapping)


def optimize_interference(
    net: Any,
    static_blobs: Iterable[str],
    ordering_function: Callable[[InterferenceGraph], list[int]] = topological_sort_traversal,
    blob_sizes: dict[str, int] | None = None,
    algo: AssignmentAlgorithm = AssignmentAlgorithm.GREEDY,
) -> Optimization:
    """Share the blobs of NetDef ``net`` other than ``static_blobs`` whose live ranges do not
    overlap, with the ops in ``ordering_function``'s order; sizes from ``blob_sizes`` (else 1)."""
    static = {str(b) for b in static_blobs}
    order = ordering_function(compute_interference_graph(net.op))
    return _share(net, lambda n: n not in static, blob_sizes, order, algo)


def optimize_inference_fast(net: Any, static_blobs: Iterable[str]) -> Any:
    """:func:`optimize_interference` in the net's own order: the rewritten NetDef."""
    static = {str(b) for b in static_blobs}
    return _share(net, lambda n: n not in static).net


def _net_proto(net: Any) -> Any:
    return net.Proto() if hasattr(net, "Proto") else net


def _in_scope(name: str, namescope: str) -> bool:
    scope = namescope.rstrip("/")
    return not scope or name.startswith(scope + "/")


def share_grad_blobs(
    net: Any,
    losses: Iterable[Any],
    param_grads: Iterable[Any],
    namescope: str,
    dont_share_blobs: Iterable[Any] | None = None,
    share_activations: bool = False,
    blob_shapes: dict[str, Any] | None = None,
) -> Any:
    """A NetDef where the gradient blobs of ``namescope`` (and with ``share_activations`` its
    forward activations) share names when their lifetimes allow; the losses, their gradients,
    ``param_grads``, ``dont_share_blobs`` and the net's inputs keep theirs (``blob_shapes`` is
    accepted and unused)."""
    proto = _net_proto(net)
    loss_names = {str(b) for b in losses}
    keep = loss_names | {n + "_grad" for n in loss_names}
    keep |= {str(b) for b in param_grads} | {str(b) for b in (dont_share_blobs or ())}
    grad_outputs = {n for op in proto.op if op.is_gradient_op for n in op.output}
    forward_outputs = {n for op in proto.op if not op.is_gradient_op for n in op.output}
    if not grad_outputs:  # protos without the flag: names of Caffe2's gradient convention
        grad_outputs = {n for n in forward_outputs if "_grad" in n}
        forward_outputs -= grad_outputs
    shared = grad_outputs | (forward_outputs if share_activations else set())

    def candidate(name: str) -> bool:
        return name in shared and name not in keep and _in_scope(name, namescope)

    return _share(proto, candidate).net


def optimize_inference_for_dag(net: Any, input_blobs: Iterable[Any], namescope: str = "") -> Any:
    """A NetDef of the inference net ``net`` where activations of ``namescope`` share names when
    their lifetimes allow; ``input_blobs`` and the blobs no op reads (the results) keep theirs."""
    proto = _net_proto(net)
    keep = {str(b) for b in input_blobs} | _never_read(proto.op)
    return _share(proto, lambda n: n not in keep and _in_scope(n, namescope)).net


# -- checks and frees ------------------------------------------------------------------------


def _canonical(proto: Any) -> list[tuple[Any, ...]]:
    """Each op as (type, arguments, device, where each input's value came from, #outputs): from
    op k's output slot s, or from outside the net (any blob: parameters are not compared)."""
    writer: dict[str, tuple[str, int, int]] = {}
    rows = []
    for k, op in enumerate(proto.op):
        sources = [writer.get(name, ("in", -1, 0)) for name in op.input]
        args = sorted(a.SerializeToString() for a in op.arg)
        rows.append((op.type, tuple(args), op.device_option.SerializeToString(), tuple(sources), len(op.output)))
        for s, name in enumerate(op.output):
            writer[name] = ("op", k, s)
    return rows


def verify_graph_equality(net_a: Any, net_b: Any) -> bool:
    """Whether two NetDefs compute the same thing: ops of the same types and arguments, each
    reading the values of the same producers (names may differ).

    >>> from caffe2.python import core
    >>> a = core.Net("a"); _ = a.Relu("x", "h"); _ = a.Relu("h", "y")
    >>> b = core.Net("b"); _ = b.Relu("x", "t"); _ = b.Relu("t", "y")
    >>> verify_graph_equality(a.Proto(), b.Proto())
    True
    """
    return _canonical(_net_proto(net_a)) == _canonical(_net_proto(net_b))


def release_blobs_when_used(netproto: Any, dont_free_blobs: Iterable[str], selector_fun: Any = None) -> Any:
    """A copy of NetDef ``netproto`` with a ``Free`` op after the last use of each blob the net
    makes, except the blobs no op reads (results), blobs of ``Alias`` ops, external inputs and
    outputs, and ``dont_free_blobs``; ``selector_fun(op)``, when given, picks the ops whose
    outputs may be freed."""
    proto = _net_proto(netproto)
    ops = list(proto.op)
    keep = set(dont_free_blobs) | set(proto.external_input) | set(proto.external_output) | _never_read(ops)
    for op in ops:
        if op.type == "Alias":
            keep.update(op.input, op.output)
    made: set[str] = set()
    for op in ops:
        if selector_fun is None or selector_fun(op):
            made.update(op.output)
    last: dict[str, int] = {}
    for pos, op in enumerate(ops):
        for name in itertools.chain(op.input, op.output):
            last[name] = pos
    frees: dict[int, list[str]] = {}
    for name in sorted(made - keep):
        frees.setdefault(last[name], []).append(name)
    out = copy.deepcopy(proto)
    del out.op[:]
    for pos, op in enumerate(ops):
        out.op.add().CopyFrom(op)
        for name in frees.get(pos, ()):
            free = caffe2_pb2.OperatorDef(type="Free", input=[name], output=[name])
            free.device_option.CopyFrom(op.device_option)
            out.op.add().CopyFrom(free)
    return out
