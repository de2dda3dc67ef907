"""The dependency graph of a net, from blob hazards, and its chains.

Walking the ops in order, op ``j`` depends on op ``i < j`` when

- read-after-write: ``j`` reads (an input or a control input of ``j``) a blob ``i`` last wrote;
- write-after-write: ``j`` writes a blob whose previous writer is ``i``;
- write-after-read: ``j`` writes a blob ``i`` read since that blob's last write.

Control inputs only order (they are not registered as reads for write-after-read). Duplicate
and self edges are dropped, then every edge implied by a longer path (transitive reduction).
Every edge goes from a lower to a higher op index, so op order is a topological order.

A *chain* is a maximal linear run of ops where each op after the first has exactly one parent,
that parent has exactly one child, and both run on the same device. A chain runs start to end
on one thread with no scheduling in between::

    >>> g = build_graph([(["x"], ["y"], []), (["y"], ["z"], []), (["x"], ["w"], [])])
    >>> g.parents, g.chains
    ([[], [0], []], [[0, 1], [2]])
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = [
    "Graph",
    "SEARCH_LIMIT",
    "hazard_edges",
    "transitive_reduction",
    "form_chains",
    "build_graph",
    "graph_of_net",
]

OpIO = tuple[Sequence[str], Sequence[str], Sequence[str]]  # (inputs, outputs, control_inputs)


@dataclass
class Graph:
    """Op-level and chain-level adjacency, as plain lists of ints (op and chain indices)."""

    parents: list[list[int]]
    children: list[list[int]]
    chains: list[list[int]]
    chain_of: list[int]
    chain_parents: list[list[int]]
    chain_children: list[list[int]]

    @property
    def num_ops(self) -> int:
        return len(self.parents)

    def edges(self) -> list[tuple[int, int]]:
        """Every op edge ``(parent, child)``, sorted."""
        return [(p, c) for c, ps in enumerate(self.parents) for p in ps]

    def roots(self) -> list[int]:
        """Chains with no parent chain (they start a run)."""
        return [c for c, ps in enumerate(self.chain_parents) if not ps]


def hazard_edges(ops: Sequence[OpIO]) -> list[list[int]]:
    """Parents of each op from RAW, WAW and WAR hazards plus control inputs (deduplicated, sorted).

    >>> hazard_edges([([], ["a"], []), (["a"], ["b"], []), ([], ["a"], [])])
    [[], [0], [0, 1]]
    """
    last_writer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    parents: list[list[int]] = []
    for j, (inputs, outputs, control) in enumerate(ops):
        deps: set[int] = set()
        for blob in inputs:
            w = last_writer.get(blob)
            if w is not None:
                deps.add(w)
            readers.setdefault(blob, []).append(j)
        for blob in control:
            w = last_writer.get(blob)
            if w is not None:
                deps.add(w)
        for blob in outputs:
            w = last_writer.get(blob)
            if w is not None:
                deps.add(w)
            deps.update(readers.get(blob, ()))
            last_writer[blob] = j
            readers[blob] = []
        deps.discard(j)
        parents.append(sorted(deps))
    return parents


SEARCH_LIMIT = 4096
"""Most ops one reduction search visits (see :func:`transitive_reduction`)."""


def transitive_reduction(parents: Sequence[Sequence[int]], limit: int = SEARCH_LIMIT) -> list[list[int]]:
    """Drop every edge implied by a longer path; ``parents[j]`` must only hold indices < j.

    Only an op with several parents can have a redundant edge: parent ``p`` of ``j`` is
    redundant when it is an ancestor of another parent of ``j``. One backward search from
    ``j``'s parents over the already reduced graph (same reachability) finds those ancestors;
    it never goes below the lowest parent (ancestors only have lower indices) and visits at
    most ``limit`` ops. Past the limit the parents not yet found redundant are all kept: a
    redundant edge only repeats an order already implied, so the graph stays correct, just
    less sparse. Memory is linear in ops + edges; time is at most ``limit`` visits per op with
    several parents.

    >>> transitive_reduction([[], [0], [0, 1]])
    [[], [0], [1]]
    """
    reduced: list[list[int]] = []
    for j, ps in enumerate(parents):
        if len(ps) > 1:
            ps = sorted(set(ps))
        for p in ps:
            if p >= j or p < 0:
                raise ValueError(f"op {j} has parent {p}; parents must precede their children")
        reduced.append(_drop_implied(reduced, ps, limit) if len(ps) > 1 else ps if type(ps) is list else list(ps))
    return reduced


def _drop_implied(reduced: list[list[int]], ps: list[int], limit: int) -> list[int]:
    """The parents in sorted ``ps`` that are not ancestors of another parent (bounded search)."""
    floor = ps[0]
    stack = [a for p in ps[1:] for a in reduced[p] if a >= floor]
    if not stack:
        return ps  # the parents' parents all precede the lowest parent: nothing is implied
    targets = set(ps)
    found: set[int] = set()
    seen: set[int] = set()
    while stack:
        a = stack.pop()
        if a in seen:
            continue
        if len(seen) >= limit:
            break
        seen.add(a)
        if a in targets:
            found.add(a)
            if len(found) == len(ps) - 1:
                break  # every parent but the highest is redundant
        stack.extend(x for x in reduced[a] if x >= floor and x not in seen)
    return [p for p in ps if p not in found] if found else ps


def children_of(parents: Sequence[Sequence[int]]) -> list[list[int]]:
    """Invert a parents list."""
    children: list[list[int]] = [[] for _ in parents]
    for c, ps in enumerate(parents):
        for p in ps:
            children[p].append(c)
    return children


def form_chains(
    parents: Sequence[Sequence[int]], children: Sequence[Sequence[int]], devices: Sequence[Hashable] | None = None
) -> tuple[list[list[int]], list[int]]:
    """Group ops into chains; returns ``(chains, chain_of)``.

    >>> form_chains([[], [0], [1]], [[1], [2], []])
    ([[0, 1, 2]], [0, 0, 0])
    """
    chains: list[list[int]] = []
    chain_of: list[int] = []
    for j, ps in enumerate(parents):
        if len(ps) == 1:
            p = ps[0]
            if len(children[p]) == 1 and (devices is None or devices[p] == devices[j]):
                c = chain_of[p]
                chains[c].append(j)
                chain_of.append(c)
                continue
        chain_of.append(len(chains))
        chains.append([j])
    return chains, chain_of


def build_graph(ops: Sequence[OpIO], devices: Sequence[Hashable] | None = None) -> Graph:
    """The reduced dependency graph and chains of ``ops`` (``(inputs, outputs, control_inputs)``)."""
    parents = transitive_reduction(hazard_edges(ops))
    children = children_of(parents)
    chains, chain_of = form_chains(parents, children, devices)
    chain_parents = [sorted({chain_of[p] for p in parents[ch[0]]}) for ch in chains]
    chain_children = [sorted({chain_of[c] for c in children[ch[-1]]}) for ch in chains]
    return Graph(parents, children, chains, chain_of, chain_parents, chain_children)


def graph_of_net(net_def: object) -> Graph:
    """The graph of a :class:`~asyncnet.NetDef`; chains never cross pools (see :func:`~asyncnet.exec.pools.device_key`)."""
    from asyncnet.core.defs import DeviceOption
    from asyncnet.exec.pools import device_key

    net_dev = getattr(net_def, "device_option", None)
    ops = net_def.ops  # type: ignore[attr-defined]
    devices = [device_key(op.device_option or net_dev or DeviceOption()) for op in ops]
    return build_graph([(op.inputs, op.outputs, op.control_inputs) for op in ops], devices)
