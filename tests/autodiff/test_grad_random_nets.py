"""Property: on random nets of shared and overwritten blobs, autodiff equals torch autograd or
refuses the net with a NetDefinitionError, never a silently wrong gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _gradcheck_helpers import autodiff_grads, torch_grads
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)

UNARY = {
    "Relu": torch.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Copy": lambda x: x * 1,
    "Scale": lambda x: x * 0.5,
    "Softmax": lambda x: torch.softmax(x, 1),
}
BINARY = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul}
LEAVES = ["x0", "x1", "x2"]


@st.composite
def programs(draw):
    """A list of (op, input names, output name); blobs are all [n, d]; outputs may overwrite."""
    names = list(LEAVES)
    prog = []
    for k in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "sum"]))
        if kind == "unary":
            op, ins = draw(st.sampled_from(sorted(UNARY))), [draw(st.sampled_from(names))]
        elif kind == "binary":
            op, ins = draw(st.sampled_from(sorted(BINARY))), [draw(st.sampled_from(names)) for _ in range(2)]
        else:
            op, ins = "Sum", draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
        allowed = op != "Copy" and (op != "Sum" or ins[0] not in ins[1:])  # the schemas' in-place rules
        in_place = allowed and draw(st.booleans()) and ins[0] not in LEAVES
        out = ins[0] if in_place else f"h{k}"
        prog.append((op, ins, out))
        if out not in names:
            names.append(out)
    return prog


def build_net(prog):
    def build(net):
        for op, ins, out in prog:
            kw = {"scale": 0.5} if op == "Scale" else {}
            net.add_op(op, ins, out, **kw)
        net.Mul([prog[-1][2], "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    return build


def torch_program(prog):
    def fn(r, **env):
        env = dict(env)
        for op, ins, out in prog:
            args = [env[i] for i in ins]
            env[out] = sum(args[1:], args[0]) if op == "Sum" else (UNARY.get(op) or BINARY[op])(*args)
        return (env[prog[-1][2]] * r).mean()

    return fn


def reachable_leaves(prog, feeds) -> list[str]:
    """The leaves torch autograd finds the loss depends on."""
    t = {k: torch.tensor(v, requires_grad=k in LEAVES) for k, v in feeds.items()}
    loss = torch_program(prog)(**t)
    grads = torch.autograd.grad(loss, [t[k] for k in LEAVES], allow_unused=True)
    return [k for k, g in zip(LEAVES, grads) if g is not None]


@settings(max_examples=60, deadline=None)
@given(prog=programs(), n=st.integers(1, 3), d=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_random_nets_match_torch_or_are_refused(prog, n, d, seed):
    rng = np.random.default_rng(seed)
    feeds = {k: rng.normal(size=(n, d)) for k in [*LEAVES, "r"]}
    wrt = reachable_leaves(prog, feeds)
    try:
        loss, ours = autodiff_grads(build_net(prog), feeds, wrt)
    except an.NetDefinitionError as e:
        assert "overwrites it" in str(e), str(e)
        return
    tloss, theirs = torch_grads(torch_program(prog), feeds, wrt)
    np.testing.assert_allclose(loss, tloss, rtol=1e-10, atol=1e-12)
    for w in wrt:
        np.testing.assert_allclose(ours[w], theirs[w], rtol=1e-8, atol=1e-12, err_msg=w)
    unreachable = [k for k in LEAVES if k not in wrt]
    if unreachable:
        with pytest.raises(an.NetDefinitionError, match="reaches"):
            autodiff_grads(build_net(prog), feeds, unreachable)
