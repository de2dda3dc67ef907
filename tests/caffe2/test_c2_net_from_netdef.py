"""``an.Net(net_def)``: a NetDef continues as a builder (it used to be taken as a net name)."""

import numpy as np
import pytest

import asyncnet as an

pytestmark = pytest.mark.timeout(30)


def test_net_from_netdef_runs_and_extends():
    nd = an.NetDef(
        "from_def", ops=[an.OperatorDef("Scale", ["x"], ["y"], {"scale": 3.0})], type="dag", external_inputs=["x"]
    )
    net = an.Net(nd)
    assert net.name == "from_def" and len(net.ops) == 1
    net.Relu("y", "z")
    assert len(nd.ops) == 1  # the NetDef given is not changed
    ws = an.Workspace()
    ws.feed("x", np.array([-1.0, 2.0]))
    ws.create_net(net)
    ws.run_net("from_def")
    np.testing.assert_array_equal(ws.fetch("z"), [0.0, 6.0])
    assert net.to_def().type == "dag"


def test_net_refuses_other_things_clearly():
    with pytest.raises(TypeError, match="name \\(str\\) or a NetDef, got dict"):
        an.Net({"name": "n"})
    with pytest.raises(TypeError, match="takes its fields from the NetDef"):
        an.Net(an.NetDef("n"), type="dag")
