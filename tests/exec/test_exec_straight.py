"""The straight-line executor (net type "straight") is the simple net, compiled: same bits, same
errors, same busy and profiling behaviour."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_exec_equivalence import random_nets

import asyncnet as an
from asyncnet.core.registry import register_op, registered_ops
from asyncnet.exec.trace import profile

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("no_leaked_threads"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

if "StraightTestReturns" not in registered_ops():

    @register_op(
        "StraightTestReturns",
        inputs=(0, None),
        outputs=(0, None),
        allow_inplace=lambda i, o: True,
        doc="test op: returns ctx.args['what'] evaluated ('none', 'one', 'pair', 'triple')",
    )
    def _returns(ctx, *xs):
        return {"none": None, "one": np.zeros(1), "pair": (np.zeros(1), np.ones(1)), "triple": [np.zeros(1)] * 3}[
            ctx.op.name
        ]


def _blobs(ops, net_type, inits, iters=3):
    with an.Workspace() as ws:
        for k, v in inits.items():
            ws.feed(k, v.copy())
        ws.create_net(an.NetDef("r", ops=ops, type=net_type))
        for _ in range(iters):
            ws.run_net("r")
        return {k: ws.fetch(k) for k in ws.blobs()}


@settings(max_examples=100, deadline=None)
@given(random_nets(), st.integers(0, 2**31 - 1))
def test_straight_equals_simple_bit_for_bit(ops, seed):
    rng = np.random.default_rng(seed)
    inits = {f"b{i}": rng.standard_normal((3, 3)) for i in range(3)}
    with np.errstate(all="ignore"):
        ref, got = _blobs(ops, "simple", inits), _blobs(ops, "straight", inits)
    assert ref.keys() == got.keys()
    for k in ref:
        assert ref[k].dtype == got[k].dtype and ref[k].tobytes() == got[k].tobytes(), k


def _failure(net_type, ops, feeds):
    with an.Workspace() as ws:
        for k, v in feeds.items():
            ws.feed(k, v)
        ws.create_net(an.NetDef("r", ops=ops, type=net_type))
        with pytest.raises(an.OperatorError) as ei:
            ws.run_net("r")
        after = sorted(ws.blobs())
        ws.run_net_async("r").exception()  # the net is not left busy
    e = ei.value
    return str(e), e.op_index, type(e.__cause__).__name__, str(e.__cause__), after


CASES = {
    "kernel raises": [
        an.OperatorDef("Relu", ["x"], ["y"]),
        an.OperatorDef("ExecTestWork", ["y"], ["z"], {"fail": True}, name="bad"),
    ],
    "missing input": [an.OperatorDef("Relu", ["x"], ["y"]), an.OperatorDef("Add", ["y", "nope"], ["z"])],
    "None for an output": [an.OperatorDef("StraightTestReturns", ["x"], ["y"], name="none")],
    "an output for none": [an.OperatorDef("StraightTestReturns", ["x"], [], name="one")],
    "two values for three": [an.OperatorDef("StraightTestReturns", ["x"], ["a", "b", "c"], name="pair")],
    "three values for two": [an.OperatorDef("StraightTestReturns", ["x"], ["a", "b"], name="triple")],
    "wrong dtype": [an.OperatorDef("Relu", ["x"], ["y"]), an.OperatorDef("Add", ["y", "i"], ["z"])],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failure_is_reported_as_the_simple_net_reports_it(case):
    feeds = {"x": np.array([-1.0, 2.0]), "i": np.array([1, 2])}
    assert _failure("straight", CASES[case], feeds) == _failure("simple", CASES[case], feeds)


def test_an_empty_net_runs():
    with an.Workspace() as ws:
        ws.run_net_once(an.Net("empty", type="straight"))


def test_odd_blob_names_are_safe_in_the_compiled_code_and_profiling_times_every_op():
    names = ["a'b", 'c"d', "e\\nf", "g)h; import os", "ü"]
    with an.Workspace() as ws:
        ws.feed(names[0], np.arange(3.0))
        net = an.Net("odd", type="straight")
        for src, dst in zip(names, names[1:]):
            net.Scale(src, dst, scale=2.0)
        ws.create_net(net)
        ws.run_net("odd")
        assert ws.fetch(names[-1]).tolist() == [0.0, 16.0, 32.0]
        with profile(ws.net("odd")) as timeline:
            ws.run_net("odd")
        assert [e.op_index for e in timeline.events] == [0, 1, 2, 3]  # (OpEvent.op_index)
        assert ws.fetch(names[-1]).tolist() == [0.0, 16.0, 32.0]  # the recorded path ran the same ops


def test_chunks_of_compiled_code_run_in_order_and_name_the_failing_op(monkeypatch):
    from asyncnet.exec import straight

    monkeypatch.setattr(straight, "CHUNK", 4)  # 11 ops: chunks of 4, 4 and 3
    ops = [an.OperatorDef("Scale", [f"x{i}"], [f"x{i + 1}"], {"scale": 2.0}) for i in range(10)]
    feeds = {"x0": np.array([1.0])}
    assert _blobs(ops, "straight", feeds, iters=1)["x10"].tolist() == [1024.0]
    bad = ops[:6] + [an.OperatorDef("ExecTestWork", ["x6"], ["y"], {"fail": True}, name="bad")] + ops[6:]
    assert _failure("straight", bad, feeds) == _failure("simple", bad, feeds)
    assert _failure("straight", bad, feeds)[1] == 6
