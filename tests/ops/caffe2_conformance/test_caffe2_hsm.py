"""Hierarchical softmax (HSoftmax, its gradient, HSoftmaxSearch, HuffmanTreeHierarchy) and
caffe2.python.hsm_util: losses and gradients against torch's log_softmax along each path, the
search against a brute force over the tree, the Huffman tree against its optimal cost."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from caffe2.proto import hsm_pb2
from caffe2.python import hsm_util

pytestmark = pytest.mark.timeout(120)


def _tree():
    """root: [inner: [words 0, 1, 2], words 3, 4]; rows: root 0..2, inner 3..5."""
    inner = hsm_util.create_node_with_words([0, 1, 2], "inner")
    root = hsm_util.create_node_with_nodes([inner], "root")
    root.word_ids.extend([3, 4])
    tree = hsm_pb2.TreeProto()
    tree.root_node.CopyFrom(root)
    hierarchy = hsm_util.create_hierarchy(tree)
    return tree, hierarchy


def _arg(message):
    return message.SerializeToString().decode("utf-8", "surrogateescape")


def _run(op, feeds, outs, **args):
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_operator_once(an.OperatorDef(op, list(feeds), outs, args))
    return [ws.fetch(o) for o in outs], ws


def test_the_hierarchy_numbers_rows_depth_first():
    tree, h = _tree()
    assert h.size == 6 and tree.root_node.children[0].offset == 3
    paths = {p.word_id: [(n.index, n.length, n.target) for n in p.path_nodes] for p in h.paths}
    assert paths == {0: [(0, 3, 0), (3, 3, 0)], 1: [(0, 3, 0), (3, 3, 1)], 2: [(0, 3, 0), (3, 3, 2)],
                     3: [(0, 3, 1)], 4: [(0, 3, 2)]}  # fmt: skip


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 6))
def test_loss_and_gradients_match_torch_log_softmax_down_each_path(seed, n):
    _, h = _tree()
    paths = {p.word_id: [(m.index, m.length, m.target) for m in p.path_nodes] for p in h.paths}
    rng = np.random.default_rng(seed)
    x, w, b = rng.standard_normal((n, 4)), rng.standard_normal((6, 4)), rng.standard_normal(6)
    labels = rng.integers(0, 5, n).astype(np.int32)
    dy = rng.standard_normal(n)
    (loss, probs), ws = _run("HSoftmax", {"x": x, "w": w, "b": b, "l": labels}, ["y", "p"], hierarchy=_arg(h))
    t = {k: torch.tensor(v, requires_grad=True) for k, v in {"x": x, "w": w, "b": b}.items()}
    ref = []
    for i, label in enumerate(labels):
        total = 0
        for first, length, target in paths[int(label)]:
            z = t["w"][first : first + length] @ t["x"][i] + t["b"][first : first + length]
            total = total - torch.log_softmax(z, 0)[target]
        ref.append(total)
    ref = torch.stack(ref)
    np.testing.assert_allclose(loss, ref.detach().numpy(), rtol=1e-10)
    (ref * torch.from_numpy(dy)).sum().backward()
    ws.feed("dy", dy)
    grad = an.OperatorDef(
        "HSoftmaxGradient", ["x", "w", "b", "l", "p", "dy"], ["dx", "dw", "db"], {"hierarchy": _arg(h)}
    )
    ws.run_operator_once(grad)
    for name, k in (("dx", "x"), ("dw", "w"), ("db", "b")):
        np.testing.assert_allclose(ws.fetch(name), t[k].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_a_label_outside_the_hierarchy_is_refused():
    _, h = _tree()
    feeds = {"x": np.zeros((1, 2)), "w": np.zeros((6, 2)), "b": np.zeros(6), "l": np.array([9], np.int32)}
    with pytest.raises(an.OperatorError, match="label 9 of sample 0 is not a word"):
        _run("HSoftmax", feeds, ["y", "p"], hierarchy=_arg(h))


@pytest.mark.parametrize("beam", [0.5, 1.5, 100.0])
def test_search_keeps_the_entries_within_the_beam_in_score_order(beam):
    tree, _ = _tree()
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((3, 4)), rng.standard_normal((6, 4)), rng.standard_normal(6)
    (names, scores), _ = _run("HSoftmaxSearch", {"x": x, "w": w, "b": b}, ["n", "s"], tree=_arg(tree), beam=beam)

    def steps(i, first, length):
        z = w[first : first + length] @ x[i] + b[first : first + length]
        return -(z - np.log(np.exp(z).sum()))

    for i in range(3):
        root, inner = steps(i, 0, 3), steps(i, 3, 3)
        want = {}
        if root[0] <= beam:
            want["inner"] = root[0]
            want.update({str(k): root[0] + inner[k] for k in range(3) if inner[k] <= beam})
        want.update({str(3 + k): root[1 + k] for k in range(2) if root[1 + k] <= beam})
        got = {n.decode(): s for n, s in zip(names[i], scores[i]) if n}
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-10)
        kept = scores[i][: len(got)]
        assert (np.diff(kept) >= 0).all()


def _path_lengths(tree):
    h = hsm_util.create_hierarchy(tree)
    return {p.word_id: len(p.path_nodes) for p in h.paths}


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(0, 20), min_size=2, max_size=9))
def test_huffman_tree_has_the_optimal_cost(counts):
    labels = np.repeat(np.arange(len(counts)), counts).astype(np.int64)
    (out,), _ = _run("HuffmanTreeHierarchy", {"l": labels}, ["t"], num_classes=len(counts))
    tree = hsm_pb2.TreeProto.FromString(out[0])
    depth = _path_lengths(tree)
    assert sorted(depth) == list(range(len(counts)))
    heap, optimal = list(counts), 0  # the optimal cost: the sum of every merge
    heapq.heapify(heap)
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        optimal += merged
        heapq.heappush(heap, merged)
    assert sum(counts[k] * d for k, d in depth.items()) == optimal


def test_huffman_tree_of_six_classes_worked_by_hand():
    """Counts 1..6: (0, 1) join first, then with 2; (3, 4) join; 5 joins the (0, 1, 2) node; the
    root holds the (3, 4) node first (it weighs 9 < 12)."""
    labels = np.repeat(np.arange(6), np.arange(1, 7)).astype(np.int64)
    (out,), _ = _run("HuffmanTreeHierarchy", {"l": labels}, ["t"], num_classes=6)
    h = hsm_util.create_hierarchy(hsm_pb2.TreeProto.FromString(out[0]))
    got = {p.word_id: [(n.index, n.target) for n in p.path_nodes] for p in h.paths}
    assert got == {0: [(0, 1), (4, 0), (6, 0), (8, 0)], 1: [(0, 1), (4, 0), (6, 0), (8, 1)],
                   2: [(0, 1), (4, 0), (6, 1)], 3: [(0, 0), (2, 0)], 4: [(0, 0), (2, 1)],
                   5: [(0, 1), (4, 1)]}  # fmt: skip


def test_a_binary_proto_argument_survives_the_caffe2_conversion():
    from caffe2.convert import op_to_asyncnet
    from caffe2.python import core

    tree, h = _tree()
    raw = h.SerializeToString()
    op = core.CreateOperator("HSoftmax", ["x", "w", "b", "l"], ["y", "p"], hierarchy=raw)
    converted = op_to_asyncnet(op)
    assert converted.args["hierarchy"].encode("utf-8", "surrogateescape") == raw
    back = an.NetDef.from_json(an.NetDef("n", ops=[converted]).to_json()).ops[0]
    assert back.args["hierarchy"] == converted.args["hierarchy"]


def test_module_examples_run():
    import doctest

    from asyncnet.ops import caffe2_hsm

    result = doctest.testmod(caffe2_hsm, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
