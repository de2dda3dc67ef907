"""Caffe2's ``TT`` operator: a fully connected layer whose weight matrix is stored as a tensor
train. ``Y = X @ M + b``, ``M`` of shape [prod(inp_sizes), prod(out_sizes)], with entry
``M[(i_1..i_d), (o_1..o_d)] = G_1[:, i_1, o_1, :] @ ... @ G_d[:, i_d, o_d, :]`` (core ``G_k`` of
shape [r_k, inp_k, out_k, r_{k+1}], r_1 = r_{d+1} = 1). The input indices and the output indices
are each read row-major (i_1 slowest).

**The cores input** is one vector: the cores from the last to the first, core ``k`` stored with
its axes in the order (inp_k, r_{k+1}, r_k, out_k), as ``caffe2.python.tt_core.matrix_to_tt``
writes them.

No gradient is registered (Caffe2 had none either): a TT layer on the path to a loss is an
error when the backward net is built.

**The product** contracts X with one core at a time and never forms ``M``: after core ``k`` the
running tensor has axes (batch, the inputs not yet used, the outputs made so far, r_{k+1}).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.ones((1, 4), np.float32)); ws.feed("b", np.zeros(4, np.float32))
    >>> ws.feed("cores", np.ones(8, np.float32))  # two 2x2 cores of rank 1: M is all ones
    >>> net = an.Net("tt"); _ = net.TT(["x", "b", "cores"], "y", inp_sizes=[2, 2], out_sizes=[2, 2], tt_ranks=[1, 1, 1])
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[4., 4., 4., 4.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import float_array

__all__: list[str] = []  # the op is reached through the registry

_ARGS = [
    Arg("inp_sizes", list, Arg.REQUIRED, "the factors of the input size", item_type=int),
    Arg("out_sizes", list, Arg.REQUIRED, "the factors of the output size", item_type=int),
    Arg("tt_ranks", list, Arg.REQUIRED, "the d + 1 ranks, first and last 1", item_type=int),
]


def _host(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _check_sizes(inp: list[int], out: list[int], ranks: list[int]) -> None:
    d = len(inp)
    if d == 0 or len(out) != d or len(ranks) != d + 1:
        raise ValueError(
            f"expected d inp_sizes, d out_sizes and d + 1 tt_ranks, got {len(inp)}, {len(out)}, {len(ranks)}"
        )
    if ranks[0] != 1 or ranks[-1] != 1 or min(inp + out + ranks) < 1:
        raise ValueError(f"expected positive sizes and tt_ranks starting and ending with 1, got tt_ranks {ranks}")


def _split_cores(flat: np.ndarray, inp: list[int], out: list[int], ranks: list[int]) -> list[np.ndarray]:
    """The cores in order 1..d, each as [r_k, inp_k, out_k, r_{k+1}], from the stored vector."""
    d = len(inp)
    stored = [(inp[k], ranks[k + 1], ranks[k], out[k]) for k in reversed(range(d))]
    need = sum(int(np.prod(s)) for s in stored)
    if flat.size != need:
        raise ValueError(f"expected {need} core values for these sizes and ranks, got {flat.size}")
    cores, start = [], 0
    for shape in stored:
        size = int(np.prod(shape))
        cores.append(flat[start : start + size].reshape(shape).transpose(2, 0, 3, 1))
        start += size
    return cores[::-1]


def _contract(x: np.ndarray, cores: list[np.ndarray], inp: list[int], out: list[int]) -> np.ndarray:
    batch = x.shape[0]
    t = x.reshape(batch, -1, 1, 1)  # (batch, inputs left, outputs made, rank)
    made = 1
    for k, core in enumerate(cores):
        left = t.shape[1] // inp[k]
        t = t.reshape(batch, inp[k], left, made, core.shape[0])
        t = np.einsum("bilmr,rios->blmos", t, core, optimize=True)
        made *= out[k]
        t = t.reshape(batch, left, made, core.shape[3])
    return t.reshape(batch, made)


@register_op(
    "TT",
    inputs=3,
    outputs=1,
    args=_ARGS,
    inputs_doc=("X (N x prod(inp_sizes))", "b (prod(out_sizes))", "cores (the tensor-train cores, one vector)"),
    outputs_doc=("Y (N x prod(out_sizes))",),
    doc="Y = X @ M + b, M the matrix of the tensor-train cores (see the module docs for the layout).",
)
def tt(ctx: Any, x: Any, b: Any, cores: Any) -> np.ndarray:
    inp, out, ranks = (list(ctx.args[k]) for k in ("inp_sizes", "out_sizes", "tt_ranks"))
    _check_sizes(inp, out, ranks)
    x, b, flat = (_host(float_array(ctx, v, i)) for i, v in enumerate((x, b, cores)))
    n_in, n_out = int(np.prod(inp)), int(np.prod(out))
    if x.ndim != 2 or x.shape[1] != n_in:
        raise ValueError(f"expected X of shape [N, {n_in}] (the product of inp_sizes), got {x.shape}")
    if b.size != n_out:
        raise ValueError(f"expected b of {n_out} values (the product of out_sizes), got shape {b.shape}")
    y = _contract(x, _split_cores(flat.reshape(-1), inp, out, ranks), inp, out) + b.reshape(-1)
    return y.astype(x.dtype, copy=False)
