"""Caffe2's ``hsm_util``: build the tree of a hierarchical softmax and the paths of its words.

A node's rows in the weight matrix are one per child node, then one per word; rows are given to
the nodes in depth-first order from the root (row 0). :func:`create_hierarchy` gives each word
its path: at each node on the way, the node's first row (``index``), its number of rows
(``length``) and the row taken (``target``); it also writes each node's first row into the
tree (``offset``), as Caffe2 did.

    >>> from caffe2.python import hsm_util
    >>> leaves = hsm_util.create_node_with_words([7, 8], "leaves")
    >>> root = hsm_util.create_node_with_nodes([leaves], "root"); root.word_ids.append(9)
    >>> from caffe2.proto import hsm_pb2
    >>> tree = hsm_pb2.TreeProto(); tree.root_node.CopyFrom(root)
    >>> h = hsm_util.create_hierarchy(tree)
    >>> h.size, [(p.word_id, [(n.index, n.length, n.target) for n in p.path_nodes]) for p in h.paths]
    (4, [(7, [(0, 2, 0), (2, 2, 0)]), (8, [(0, 2, 0), (2, 2, 1)]), (9, [(0, 2, 1)])])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from caffe2.proto import hsm_pb2

__all__ = ["create_node_with_words", "create_node_with_nodes", "create_hierarchy"]


def create_node_with_words(words: Iterable[int], name: str = "node") -> Any:
    """A NodeProto named ``name`` whose leaves are ``words``."""
    return hsm_pb2.NodeProto(name=name, word_ids=list(words))


def create_node_with_nodes(nodes: Iterable[Any], name: str = "node") -> Any:
    """A NodeProto named ``name`` whose children are copies of ``nodes``."""
    node = hsm_pb2.NodeProto(name=name)
    for child in nodes:
        node.children.add().CopyFrom(child)
    return node


def create_hierarchy(tree_proto: Any) -> Any:
    """The HierarchyProto (rows used, each word's path) of a TreeProto; sets the nodes' offsets."""
    hierarchy = hsm_pb2.HierarchyProto()
    _walk(tree_proto.root_node, [], hierarchy, 0)
    return hierarchy


def _walk(node: Any, trail: list[tuple[int, int, int]], hierarchy: Any, first_row: int) -> int:
    """Number ``node``'s rows from ``first_row``, record its words' paths, recurse into its
    children; the next free row."""
    rows = len(node.children) + len(node.word_ids)
    node.offset = first_row
    next_row = first_row + rows
    hierarchy.size = max(hierarchy.size, next_row)
    for target, child in enumerate(node.children):
        next_row = _walk(child, [*trail, (first_row, rows, target)], hierarchy, next_row)
    for k, word in enumerate(node.word_ids):
        path = hierarchy.paths.add(word_id=word)
        for index, length, target in [*trail, (first_row, rows, len(node.children) + k)]:
            path.path_nodes.add(index=index, length=length, target=target)
    return next_row
