"""Caffe2's hierarchical softmax: ``HSoftmax`` (with ``HSoftmaxGradient``), ``HSoftmaxSearch``
and ``HuffmanTreeHierarchy``.

The words sit at the leaves of a tree; a node owns one row of the weights W [S, D] and bias b [S]
per child (its child nodes first, then its words), rows given to the nodes depth first from the
root. A word's path lists, at each node from the root down, the node's first row, its row count
and the row taken (Caffe2's HierarchyProto, the ``hierarchy`` argument, serialized; build it
with :mod:`caffe2.python.hsm_util`). ``HSoftmax`` gives each sample X[i] the loss
sum over its label's path of -log softmax(W_node X[i] + b_node)[taken], and the softmax
probabilities along the paths as a second output, which the gradient reads.

``HSoftmaxSearch`` walks the tree (``tree``, a serialized TreeProto with the nodes' offsets)
from the root: an entry (a child node, or a word) scores its parent's score plus its
-log softmax, and is dropped when that step exceeds ``beam`` (so is everything under it); the
outputs are each sample's entries, names and scores, in increasing score. ``HuffmanTreeHierarchy``
builds the Huffman tree of the labels' counts over ``num_classes`` classes (a TreeProto).

    >>> import numpy as np, asyncnet as an
    >>> from caffe2.python import hsm_util; from caffe2.proto import hsm_pb2
    >>> tree = hsm_pb2.TreeProto(); tree.root_node.word_ids.extend([0, 1])
    >>> h = hsm_util.create_hierarchy(tree).SerializeToString().decode("utf-8", "surrogateescape")
    >>> ws = an.Workspace(); ws.feed("x", np.zeros((1, 3), np.float32)); ws.feed("w", np.ones((2, 3), np.float32))
    >>> ws.feed("b", np.zeros(2, np.float32)); ws.feed("label", np.array([1], np.int32))
    >>> net = an.Net("hsm"); _ = net.HSoftmax(["x", "w", "b", "label"], ["loss", "p"], hierarchy=h)
    >>> ws.run_net_once(net); round(float(ws.fetch("loss")[0]), 4)  # log 2: two equal rows
    0.6931
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops._check import float_array

__all__ = ["parse_hierarchy", "parse_tree", "huffman_tree"]

Step = tuple[int, int, int]  # (first row, rows, row taken - first row)


def _raw(text: str) -> bytes:
    """An argument holding a serialized proto, back as its bytes."""
    return text.encode("utf-8", "surrogateescape")


def _varints(wt: int, v: Any) -> list[int]:
    """A repeated int field's values: one varint, or a packed run of them."""
    if wt == 0:
        return [v]
    out, pos = [], 0
    while pos < len(v):
        value, shift = 0, 0
        while True:
            byte = v[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out.append(value)
    return out


def parse_hierarchy(raw: bytes) -> dict[int, list[Step]]:
    """{word: its path} of a serialized HierarchyProto."""
    paths: dict[int, list[Step]] = {}
    for num, _, value in tp._fields(raw):
        if num != 2:
            continue
        word, steps = 0, []
        for f, _, v in tp._fields(value):
            if f == 1:
                word = v
            elif f == 2:
                node = {n: x for n, _, x in tp._fields(v)}
                steps.append((node.get(1, 0), node.get(2, 0), node.get(3, 0)))
        paths[word] = steps
    return paths


@dataclass
class Node:
    """A tree node: its children, its words, its first row and its name."""

    children: list[Node] = field(default_factory=list)
    words: list[int] = field(default_factory=list)
    offset: int = 0
    name: str = ""


def parse_tree(raw: bytes) -> Node:
    """The root of a serialized TreeProto."""
    root = Node()
    for num, _, value in tp._fields(raw):
        if num == 1:
            root = _parse_node(value)
    return root


def _parse_node(raw: bytes) -> Node:
    node = Node()
    for num, wt, value in tp._fields(raw):
        if num == 1:
            node.children.append(_parse_node(value))
        elif num == 2:
            node.words.extend(_varints(wt, value))
        elif num == 3:
            node.offset = value
        elif num == 4:
            node.name = value.decode("utf-8", "replace")
    return node


def _encode_node(node: Node) -> bytes:
    out = bytearray()
    for child in node.children:
        tp._put_bytes(out, 1, _encode_node(child))
    for word in node.words:
        tp._put_key(out, 2, 0)
        tp._put_varint(out, word)
    tp._put_key(out, 3, 0)
    tp._put_varint(out, node.offset)
    tp._put_bytes(out, 4, node.name.encode("utf-8"))
    return bytes(out)


# -- HSoftmax --------------------------------------------------------------------------------------


def _paths(ctx: Any) -> dict[int, list[Step]]:
    key = "_hsm_paths"  # parsed once, in the op instance's own args dict
    if key not in ctx.args:
        ctx.args[key] = parse_hierarchy(_raw(ctx.args["hierarchy"]))
    return ctx.args[key]


def _visits(ctx: Any, labels: np.ndarray, rows: int) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """For each node the labels' paths cross, in row order: (first row, rows, samples, rows taken)."""
    paths = _paths(ctx)
    by_node: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for i, label in enumerate(labels.tolist()):
        if label not in paths:
            raise ValueError(f"label {label} of sample {i} is not a word of the hierarchy")
        for first, length, target in paths[label]:
            if first + length > rows or not 0 <= target < length:
                raise ValueError(f"the hierarchy's node at row {first} ({length} rows) does not fit W's {rows} rows")
            samples, taken = by_node.setdefault((first, length), ([], []))
            samples.append(i)
            taken.append(target)
    return [(f, n, np.array(s), np.array(t)) for (f, n), (s, t) in sorted(by_node.items())]


def _inputs(ctx: Any, x: Any, w: Any, b: Any, labels: Any) -> tuple[np.ndarray, ...]:
    x, w, b = (float_array(ctx, np.asarray(a), i) for i, a in enumerate((x, w, b)))
    labels = np.asarray(labels)
    if x.ndim != 2 or w.ndim != 2 or w.shape[1] != x.shape[1] or b.shape != (w.shape[0],):
        raise ValueError(f"expected X [N, D], W [S, D], b [S]; got {x.shape}, {w.shape}, {b.shape}")
    if labels.shape != (x.shape[0],) or labels.dtype.kind not in "iu":
        raise ValueError(f"expected integer labels [N={x.shape[0]}], got {labels.dtype} {labels.shape}")
    return x, w, b, labels


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@register_op(
    "HSoftmax",
    inputs=4,
    outputs=2,
    args=[Arg("hierarchy", str, Arg.REQUIRED, "a serialized HierarchyProto (each word's path)")],
    inputs_doc=("X [N, D]", "W [S, D]", "b [S]", "labels [N] (int)"),
    outputs_doc=("Y [N]: each sample's loss", "the softmax probabilities along the paths (for the gradient)"),
    doc="Hierarchical softmax: each sample's -log probability of its label down the tree.",
)
def hsoftmax(ctx: Any, x: Any, w: Any, b: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    x, w, b, labels = _inputs(ctx, x, w, b, labels)
    loss = np.zeros(len(x))
    probs = []
    for first, length, samples, taken in _visits(ctx, labels, len(w)):
        rows = slice(first, first + length)
        p = _softmax(x[samples].astype(np.float64) @ w[rows].T.astype(np.float64) + b[rows])
        loss[samples] -= np.log(np.maximum(p[np.arange(len(samples)), taken], np.finfo(np.float64).tiny))
        probs.append(p.reshape(-1))
    flat = np.concatenate(probs) if probs else np.zeros(0)
    return loss.astype(x.dtype), flat.astype(x.dtype)


@register_op(
    "HSoftmaxGradient",
    inputs=6,
    outputs=3,
    args=[Arg("hierarchy", str, Arg.REQUIRED, "a serialized HierarchyProto (each word's path)")],
    inputs_doc=("X", "W", "b", "labels", "the probabilities HSoftmax output", "dY [N]"),
    outputs_doc=("dX", "dW", "db"),
    doc="Gradient of HSoftmax: at each node on a path, (softmax - one-hot of the row taken) times dY.",
)
def hsoftmax_gradient(ctx: Any, x: Any, w: Any, b: Any, labels: Any, probs: Any, dy: Any) -> tuple[np.ndarray, ...]:
    x, w, b, labels = _inputs(ctx, x, w, b, labels)
    probs, dy = np.asarray(probs, np.float64), np.asarray(dy, np.float64)
    if dy.shape != (len(x),):
        raise ValueError(f"expected dY of shape ({len(x)},), got {dy.shape}")
    dx, dw, db = np.zeros(x.shape), np.zeros(w.shape), np.zeros(b.shape)
    at = 0
    for first, length, samples, taken in _visits(ctx, labels, len(w)):
        size = len(samples) * length
        if at + size > probs.size:
            raise ValueError(f"expected the probabilities HSoftmax output for these labels, got {probs.size} values")
        dz = probs[at : at + size].reshape(len(samples), length).copy()
        at += size
        dz[np.arange(len(samples)), taken] -= 1.0
        dz *= dy[samples, None]
        rows = slice(first, first + length)
        dw[rows] += dz.T @ x[samples]
        db[rows] += dz.sum(axis=0)
        np.add.at(dx, samples, dz @ w[rows].astype(np.float64))
    if at != probs.size:
        raise ValueError(f"expected {at} probabilities (HSoftmax's for these labels), got {probs.size}")
    return dx.astype(x.dtype), dw.astype(w.dtype), db.astype(b.dtype)


@register_gradient("HSoftmax")
def _hsoftmax_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None] * 4
    inputs = [*op.inputs, op.outputs[1], gout[0]]
    gop = OperatorDef("HSoftmaxGradient", inputs, ["#dx", "#dw", "#db"], {"hierarchy": op.args["hierarchy"]})
    return [gop], ["#dx", "#dw", "#db", None]


# -- HSoftmaxSearch --------------------------------------------------------------------------------


def _entries(root: Node, x: np.ndarray, w: np.ndarray, b: np.ndarray, beam: float) -> list[tuple[str, np.ndarray]]:
    """(name, score of each sample: inf where dropped) of every child node and word, root down."""
    out: list[tuple[str, np.ndarray]] = []
    todo = [(root, np.zeros(len(x)))]
    while todo:
        node, base = todo.pop(0)
        rows = slice(node.offset, node.offset + len(node.children) + len(node.words))
        if rows.stop > len(w):
            raise ValueError(f"the tree's node {node.name!r} (rows {rows.start}..{rows.stop - 1}) is beyond W's rows")
        step = -np.log(np.maximum(_softmax(x @ w[rows].T + b[rows]), np.finfo(np.float64).tiny))
        score = np.where(step > beam, np.inf, base[:, None] + step)
        for k, child in enumerate(node.children):
            out.append((child.name, score[:, k]))
            todo.append((child, score[:, k]))
        for k, word in enumerate(node.words, start=len(node.children)):
            out.append((str(word), score[:, k]))
    return out


@register_op(
    "HSoftmaxSearch",
    inputs=3,
    outputs=2,
    args=[
        Arg("tree", str, Arg.REQUIRED, "a serialized TreeProto (with its nodes' offsets)"),
        Arg("beam", float, 0.0, "drop an entry whose step adds more than this to its parent's score"),
    ],
    inputs_doc=("X [N, D]", "W [S, D]", "b [S]"),
    outputs_doc=("names [N, K] (bytes, b'' past a sample's entries)", "scores [N, K] (increasing)"),
    doc="Beam search down the hierarchical softmax's tree: the entries kept and their -log probabilities.",
)
def hsoftmax_search(ctx: Any, x: Any, w: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    x, w, b = (float_array(ctx, np.asarray(a), i) for i, a in enumerate((x, w, b)))
    if x.ndim != 2 or w.ndim != 2 or w.shape[1] != x.shape[1] or b.shape != (w.shape[0],):
        raise ValueError(f"expected X [N, D], W [S, D], b [S]; got {x.shape}, {w.shape}, {b.shape}")
    entries = _entries(parse_tree(_raw(ctx.args["tree"])), x.astype(np.float64), w, b, ctx.args["beam"])
    scores = np.stack([s for _, s in entries], axis=1) if entries else np.zeros((len(x), 0))
    order = np.argsort(scores, axis=1, kind="stable")
    kept = np.isfinite(scores).sum(axis=1)
    width = int(kept.max()) if len(kept) else 0
    names = np.full((len(x), width), b"", dtype=object)
    out = np.zeros((len(x), width), x.dtype)
    for i in range(len(x)):
        for j, e in enumerate(order[i, : kept[i]]):
            names[i, j], out[i, j] = entries[e][0].encode("utf-8"), scores[i, e]
    return names, out


# -- HuffmanTreeHierarchy --------------------------------------------------------------------------


def huffman_tree(counts: list[int]) -> Node:
    """The Huffman tree of classes 0..len(counts)-1: the two least counted items (a tie: the
    earlier made) join under a new node, words and child nodes in the order taken; nodes get
    their first rows depth first from the root.

    >>> t = huffman_tree([1, 1, 2]); [c.words for c in t.children], t.words
    ([[0, 1]], [2])
    """
    if not counts:
        raise ValueError("expected at least one class")
    seq = itertools.count()
    heap: list[tuple[int, int, Any]] = [(c, next(seq), w) for w, c in enumerate(counts)]
    heapq.heapify(heap)
    while len(heap) > 1:
        (c1, _, a), (c2, _, b) = heapq.heappop(heap), heapq.heappop(heap)
        node = Node([n for n in (a, b) if isinstance(n, Node)], [n for n in (a, b) if not isinstance(n, Node)])
        heapq.heappush(heap, (c1 + c2, next(seq), node))
    top = heap[0][2]
    root = top if isinstance(top, Node) else Node(words=[top])
    _number(root, 0)
    return root


def _number(node: Node, first: int) -> int:
    node.offset, node.name = first, f"node_{first}"
    nxt = first + len(node.children) + len(node.words)
    for child in node.children:
        nxt = _number(child, nxt)
    return nxt


@register_op(
    "HuffmanTreeHierarchy",
    inputs=1,
    outputs=1,
    args=[Arg("num_classes", int, Arg.REQUIRED, "the classes: labels in [0, num_classes)")],
    inputs_doc=("labels (1-D int)",),
    outputs_doc=("tree: one serialized TreeProto (bytes)",),
    doc="The Huffman tree of the labels' counts, for HSoftmax (paths by caffe2.python.hsm_util.create_hierarchy).",
)
def huffman_tree_hierarchy(ctx: Any, labels: Any) -> np.ndarray:
    labels = np.asarray(labels)
    n = ctx.args["num_classes"]
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise ValueError(f"expected 1-D integer labels, got {labels.dtype} {labels.shape}")
    if n < 1 or (labels.size and (labels.min() < 0 or labels.max() >= n)):
        raise ValueError(f"expected labels in [0, num_classes={n})")
    root = huffman_tree(np.bincount(labels.astype(np.int64), minlength=n).tolist())
    out = bytearray()
    tp._put_bytes(out, 1, _encode_node(root))
    result = np.empty(1, dtype=object)
    result[0] = bytes(out)
    return result


register_no_gradient("HSoftmaxSearch", "HuffmanTreeHierarchy")
