"""A created net keeps its definition, and validation's fast paths refuse what they refused."""

import pytest

import asyncnet as an

pytestmark = pytest.mark.timeout(240)


def test_a_created_net_is_not_changed_by_ops_added_later():
    import numpy as np

    net = an.Net("grow")
    net.Scale("x", "x", scale=2.0)
    ws = an.Workspace()
    ws.feed("x", np.ones(2, np.float32))
    ws.create_net(net)
    net.Scale("x", "x", scale=5.0)
    ws.run_net("grow")
    np.testing.assert_array_equal(ws.fetch("x"), [2.0, 2.0])


def test_snapshot_keeps_every_field_of_the_definition():
    import dataclasses

    net = an.Net("fields", type="async_scheduling", num_workers=3, own_pool=True)
    net.Relu("x", "y")
    net.add_external_inputs("x")
    snap, full = net.snapshot(), net.to_def()
    for f in dataclasses.fields(full):
        assert getattr(snap, f.name) == getattr(full, f.name), f.name
    net.add_external_inputs("z")
    assert snap.external_inputs == ["x"]


@pytest.mark.parametrize(
    "op,message",
    [
        (an.OperatorDef("Sum", ["a", "b"], ["b"]), r"ops\[0\] \(Sum\).*output 0 'b' may not overwrite input 1"),
        (an.OperatorDef("FCGradient", ["x", "w", "dy"], ["d", "d", "e"]), "outputs must be distinct"),
        (an.OperatorDef("AllreduceStart", ["s", "g"], ["h", "w"]), "must be the same blob"),
        (
            an.OperatorDef("Scale", ["x"], ["y"], args={"scale": True}, name="s"),
            r"ops\[0\] \(Scale 's'\)\.args\.scale.*got bool",
        ),
        (an.OperatorDef("Scale", ["x"], ["y"], args={"scale": "2"}), "expected float"),
        (an.OperatorDef("Scale", ["x"], ["y"], args={"scael": 2.0}), "did you mean 'scale'"),
        (
            an.OperatorDef("ResizeLike", ["x", "l"], ["y"], device_option=an.DeviceOption("cuda")),
            r"ops\[0\] \(ResizeLike\).*device .cuda.",
        ),
    ],
)
def test_validation_fast_paths_still_refuse_what_they_refused(op, message):
    """create_net validates a million ops: the common case skips work, never a rule."""
    from asyncnet.core.registry import validate_op

    with pytest.raises(an.NetDefinitionError, match=message):
        validate_op(op, 0)


def test_validation_fast_paths_give_the_typed_args():
    from asyncnet.core.registry import validate_op

    _, args = validate_op(an.OperatorDef("Scale", ["x"], ["x"], args={"scale": 2}), 0)  # int for a float arg
    assert args == {"scale": 2.0} and type(args["scale"]) is float
    _, args = validate_op(an.OperatorDef("Scale", ["x"], ["y"], args={"scale": 0.5}), 0)
    assert args["scale"] == 0.5
