"""Caffe2's ``TT``: a fully connected layer whose weight matrix is given in tensor-train form.

Inputs X [batch, prod(inp_sizes)], b [prod(out_sizes)] and the cores, one vector: core k
(k = d..1, the last core first) holds G_k [r_k, inp_k, out_k, r_{k+1}] laid out as
[inp_k, r_{k+1}, r_k, out_k] (``caffe2.python.tt_core.matrix_to_tt`` writes this layout). The
weight M [prod(inp_sizes), prod(out_sizes)] has M[(i_1..i_d), (o_1..o_d)] = G_1[:, i_1, o_1, :]
... G_d[:, i_d, o_d, :] (a 1 x 1 product, r_1 = r_{d+1} = 1); Y = X M + b. The kernel builds M
once per call, then multiplies.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[1.0, 2.0]], np.float32)); ws.feed("b", np.zeros(3, np.float32))
    >>> ws.feed("cores", np.arange(6, dtype=np.float32))  # one core: M = [[0, 1, 2], [3, 4, 5]]
    >>> net = an.Net("tt"); _ = net.TT(["x", "b", "cores"], "y", inp_sizes=[2], out_sizes=[3], tt_ranks=[1, 1])
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[ 6.,  9., 12.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops._check import float_array

__all__ = ["tt_matrix"]


def _core_sizes(inp: list[int], out: list[int], ranks: list[int]) -> list[int]:
    return [inp[k] * out[k] * ranks[k] * ranks[k + 1] for k in range(len(inp))]


def tt_matrix(cores: np.ndarray, inp: list[int], out: list[int], ranks: list[int]) -> np.ndarray:
    """The weight matrix [prod(inp), prod(out)] of TT ``cores`` (see the module's docstring)."""
    d = len(inp)
    sizes = _core_sizes(inp, out, ranks)
    if cores.size != sum(sizes):
        raise ValueError(f"expected {sum(sizes)} core values for these sizes and ranks, got {cores.size}")
    flat = cores.reshape(-1).astype(np.float64)
    starts = np.cumsum([0] + [sizes[k] for k in reversed(range(d))])  # the last core first
    full = np.ones((1, 1, 1))  # the product so far: [prod(i_1..i_k), prod(o_1..o_k), r_k+1]
    for k in range(d):
        at = starts[d - 1 - k]
        g = flat[at : at + sizes[k]].reshape(inp[k], ranks[k + 1], ranks[k], out[k]).transpose(2, 0, 3, 1)
        # [I, O, r_k] x [r_k, i_k, o_k, r_k+1] -> [I, i_k, O, o_k, r_k+1]
        step = np.tensordot(full, g, axes=([2], [0])).transpose(0, 2, 1, 3, 4)
        full = step.reshape(full.shape[0] * inp[k], full.shape[1] * out[k], ranks[k + 1])
    return full[:, :, 0]


def _sizes(ctx: Any) -> tuple[list[int], list[int], list[int]]:
    inp, out, ranks = (list(ctx.args[k]) for k in ("inp_sizes", "out_sizes", "tt_ranks"))
    if not inp or len(out) != len(inp) or len(ranks) != len(inp) + 1:
        raise ValueError(
            f"expected d inp_sizes, d out_sizes and d + 1 tt_ranks, got {len(inp)}, {len(out)} and {len(ranks)}"
        )
    if ranks[0] != 1 or ranks[-1] != 1 or min(inp + out + ranks) < 1:
        raise ValueError(f"expected positive sizes and ranks starting and ending with 1, got tt_ranks {ranks}")
    return inp, out, ranks


@register_op(
    "TT",
    inputs=3,
    outputs=1,
    args=[
        Arg("inp_sizes", list, [], "the factors of the input size", item_type=int),
        Arg("out_sizes", list, [], "the factors of the output size", item_type=int),
        Arg("tt_ranks", list, [], "the d + 1 ranks (the first and last 1)", item_type=int),
    ],
    inputs_doc=("X [batch, prod(inp_sizes)]", "b [prod(out_sizes)]", "cores (1-D)"),
    outputs_doc=("Y [batch, prod(out_sizes)]",),
    doc="A fully connected layer with its weights in tensor-train form: Y = X M(cores) + b.",
)
def tt(ctx: Any, x: Any, b: Any, cores: Any) -> np.ndarray:
    x, b, cores = (float_array(ctx, np.asarray(a), i) for i, a in enumerate((x, b, cores)))
    inp, out, ranks = _sizes(ctx)
    n_in, n_out = int(np.prod(inp)), int(np.prod(out))
    if x.ndim != 2 or x.shape[1] != n_in or b.shape != (n_out,):
        raise ValueError(f"expected X [batch, {n_in}] and b [{n_out}], got {x.shape} and {b.shape}")
    return (x.astype(np.float64) @ tt_matrix(cores, inp, out, ranks) + b).astype(x.dtype)


register_no_gradient("TT")
