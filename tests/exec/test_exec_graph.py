"""Dependency graph: each hazard kind, control inputs, dedupe, reduction, chains."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.exec.graph import build_graph, form_chains, graph_of_net, hazard_edges, transitive_reduction

pytestmark = pytest.mark.timeout(60)


def test_read_after_write():
    assert hazard_edges([([], ["a"], []), (["a"], ["b"], [])]) == [[], [0]]


def test_write_after_write():
    assert hazard_edges([([], ["a"], []), ([], ["a"], [])]) == [[], [0]]


def test_write_after_read():
    # op 1 reads a (written outside the net), op 2 overwrites it: 2 must wait for 1
    assert hazard_edges([([], ["z"], []), (["a"], ["b"], []), ([], ["a"], [])]) == [[], [], [1]]


def test_war_only_readers_since_last_write():
    ops = [(["a"], ["x"], []), ([], ["a"], []), (["a"], ["y"], []), ([], ["a"], [])]
    assert hazard_edges(ops) == [[], [0], [1], [1, 2]]


def test_control_input_orders_without_data():
    ops = [([], ["flag"], []), (["x"], ["y"], ["flag"])]
    assert hazard_edges(ops) == [[], [0]]


def test_control_input_is_not_a_read():
    # a later writer of the control blob does not wait for the op that used it as control input
    ops = [(["x"], ["y"], ["flag"]), ([], ["flag"], [])]
    assert hazard_edges(ops) == [[], []]


def test_inplace_op_has_no_self_edge_and_no_duplicates():
    ops = [([], ["x"], []), (["x", "x"], ["x"], [])]
    assert hazard_edges(ops) == [[], [0]]


def test_transitive_reduction_drops_implied_edges():
    # 0 -> 1 -> 2 and 0 -> 2: the direct edge is implied
    assert transitive_reduction([[], [0], [0, 1]]) == [[], [0], [1]]
    # diamond keeps both branches
    assert transitive_reduction([[], [0], [0], [0, 1, 2]]) == [[], [0], [0], [1, 2]]


def _reachable(parents):
    n = len(parents)
    reach = [set() for _ in range(n)]
    for j in range(n):
        for p in parents[j]:
            reach[j] |= {p} | reach[p]
    return reach


@given(
    st.integers(1, 14).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40))
    )
)
def test_reduction_preserves_reachability_and_is_minimal(data):
    n, pairs = data
    parents = [sorted({min(a, b) for a, b in pairs if max(a, b) == j and a != b}) for j in range(n)]
    reduced = transitive_reduction(parents)
    assert _reachable(reduced) == _reachable(parents)
    for j, ps in enumerate(reduced):  # removing any kept edge loses reachability
        for p in ps:
            trial = [list(x) for x in reduced]
            trial[j].remove(p)
            assert p not in _reachable(trial)[j]


def test_chains_linear_runs_and_breaks():
    # 0 -> 1 -> 2, then 2 fans out to 3 and 4, which join in 5
    parents = [[], [0], [1], [2], [2], [3, 4]]
    children = [[1], [2], [3, 4], [5], [5], []]
    chains, chain_of = form_chains(parents, children)
    assert chains == [[0, 1, 2], [3], [4], [5]]
    assert chain_of == [0, 0, 0, 1, 2, 3]


def test_chains_break_at_device_change():
    parents = [[], [0], [1]]
    children = [[1], [2], []]
    chains, _ = form_chains(parents, children, ["cpu", "cpu", "gpu"])
    assert chains == [[0, 1], [2]]


def test_build_graph_chain_level_edges():
    ops = [([], ["a"], []), (["a"], ["b"], []), (["a"], ["c"], []), (["b", "c"], ["d"], []), (["d"], ["e"], [])]
    g = build_graph(ops)
    assert g.edges() == [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]
    assert g.chains == [[0], [1], [2], [3, 4]]
    assert g.chain_parents == [[], [0], [0], [1, 2]]
    assert g.chain_children == [[1, 2], [3], [3], []]
    assert g.roots() == [0]


def test_linear_net_is_one_chain():
    net = an.Net("lin", type="async_scheduling")
    for _ in range(50):
        net.Scale("x", "x", scale=1.0)
    g = graph_of_net(net.to_def())
    assert g.chains == [list(range(50))]


def test_independent_ops_are_separate_roots():
    net = an.Net("wide", type="async_scheduling")
    for i in range(5):
        net.Scale("x", f"y{i}", scale=1.0)
    g = graph_of_net(net.to_def())
    assert g.roots() == [0, 1, 2, 3, 4]
    assert all(not ps for ps in g.parents)


def _bitset_reduction(parents):
    """A plain transitive reduction (one ancestor bitset per op, quadratic memory): the reference
    the executor's bounded search must match."""
    ancestors, reduced = [], []
    for ps in parents:
        covered, kept = 0, []
        for p in sorted(set(ps), reverse=True):
            if not (covered >> p) & 1:
                kept.append(p)
                covered |= ancestors[p] | (1 << p)
        ancestors.append(covered)
        reduced.append(sorted(kept))
    return reduced


_dags = st.integers(1, 40).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=120))
)


def _parents_of(n, pairs):
    return [sorted({min(a, b) for a, b in pairs if max(a, b) == j and a != b}) for j in range(n)]


@given(_dags)
def test_reduction_equals_the_bitset_reference(data):
    parents = _parents_of(*data)
    assert transitive_reduction(parents) == _bitset_reduction(parents)


@given(_dags, st.integers(0, 6))
def test_bounded_search_keeps_reachability_and_only_adds_redundant_edges(data, limit):
    parents = _parents_of(*data)
    exact = _bitset_reduction(parents)
    bounded = transitive_reduction(parents, limit=limit)
    assert _reachable(bounded) == _reachable(parents)  # no needed edge is ever dropped
    for e, b, ps in zip(exact, bounded, parents):
        assert set(e) <= set(b) <= set(ps)  # past the limit edges are kept, never invented


def test_search_limit_keeps_an_edge_it_cannot_prove_redundant():
    # 0 -> 1 -> ... -> 9 and 0 -> 10, 9 -> 10: edge 0 -> 10 is implied through 9 steps
    parents = [[]] + [[i] for i in range(9)] + [[0, 9]]
    assert transitive_reduction(parents)[10] == [9]
    assert transitive_reduction(parents, limit=3)[10] == [0, 9]


def test_reduction_rejects_a_parent_that_does_not_precede():
    with pytest.raises(ValueError, match="op 1 has parent 1"):
        transitive_reduction([[], [1]])
