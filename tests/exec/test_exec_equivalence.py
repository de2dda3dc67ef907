"""Property: async_scheduling gives bit-identical blobs to simple on random DAG nets."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.core.registry import validate_op
from asyncnet.errors import NetDefinitionError

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("no_leaked_threads"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

UNARY = [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Scale", {"scale": 0.5}), ("Copy", {})]
BINARY = [("Add", {}), ("Sub", {}), ("Mul", {}), ("MatMul", {}), ("Div", {})]


@st.composite
def random_nets(draw):
    n_init = 3
    blobs = [f"b{i}" for i in range(n_init)]
    ops = []
    for j in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["unary", "binary", "sum", "barrier"]))
        if kind == "unary":
            t, args = draw(st.sampled_from(UNARY))
            ins = [draw(st.sampled_from(blobs))]
        elif kind == "binary":
            t, args = draw(st.sampled_from(BINARY))
            ins = draw(st.lists(st.sampled_from(blobs), min_size=2, max_size=2))
        elif kind == "sum":
            t, args = "Sum", {}
            ins = draw(st.lists(st.sampled_from(blobs), min_size=1, max_size=4))
        else:
            t, args = "AsyncNetBarrier", {}
            ins = draw(st.lists(st.sampled_from(blobs), min_size=1, max_size=3, unique=True))
        if t == "AsyncNetBarrier":
            outs = list(ins)
        elif draw(st.booleans()):  # overwrite an existing blob (WAW / WAR hazards) when allowed
            outs = [draw(st.sampled_from(blobs))]
        else:
            outs = [f"t{j}"]
        op = an.OperatorDef(t, ins, outs, dict(args))
        try:
            validate_op(op, j)
        except NetDefinitionError:
            op = an.OperatorDef(t, ins, [f"t{j}"], dict(args))
        if draw(st.integers(0, 9)) == 0 and blobs:  # occasionally a pure ordering control input
            op.control_inputs = [draw(st.sampled_from(blobs))]
        ops.append(op)
        blobs.extend(o for o in op.outputs if o not in blobs)
    return ops


def _run(ops, net_type, inits, mode, iters):
    with an.Workspace() as ws:
        for k, v in inits.items():
            ws.feed(k, v.copy())
        ws.create_net(an.NetDef("r", ops=ops, type=net_type, num_workers=2))
        for _ in range(iters):
            if mode == "run":
                ws.run_net("r")
            elif mode == "timeout":
                ws.run_net("r", timeout=30)
            else:
                ws.run_net_async("r").wait(30)
        return {k: ws.fetch(k) for k in ws.blobs()}


@settings(max_examples=100, deadline=None)
@given(random_nets(), st.sampled_from(["run", "timeout", "async"]), st.integers(0, 2**31 - 1))
def test_async_equals_simple_bit_for_bit(ops, mode, seed):
    rng = np.random.default_rng(seed)
    inits = {f"b{i}": rng.standard_normal((3, 3)) for i in range(3)}
    with np.errstate(all="ignore"):
        ref = _run(ops, "simple", inits, "run", 3)
        for _ in range(3):
            got = _run(ops, "async_scheduling", inits, mode, 3)
            assert ref.keys() == got.keys()
            for k in ref:
                assert ref[k].dtype == got[k].dtype and ref[k].tobytes() == got[k].tobytes(), k


@settings(max_examples=30, deadline=None)
@given(random_nets(), st.integers(0, 29), st.integers(0, 2**31 - 1))
def test_a_failing_op_is_reported_like_simple_and_the_net_recovers(ops, where, seed):
    where = min(where, len(ops))
    bad = an.OperatorDef(
        "ExecTestWork", [ops[where - 1].outputs[0]] if where else [], ["failed_out"], {"fail": True}, name="bad"
    )
    ops = ops[:where] + [bad] + ops[where:]
    rng = np.random.default_rng(seed)
    inits = {f"b{i}": rng.standard_normal((3, 3)) for i in range(3)}
    with np.errstate(all="ignore"), an.Workspace() as ws:
        for k, v in inits.items():
            ws.feed(k, v)
        ws.create_net(an.NetDef("r", ops=ops, type="async_scheduling", num_workers=2))
        for _ in range(3):
            with pytest.raises(an.OperatorError) as ei:
                ws.run_net("r", timeout=30)
            assert ei.value.op_index == where and ei.value.op_name == "bad"
        assert not ws.has("failed_out")
