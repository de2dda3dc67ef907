"""brew.cond and brew.loop: If / While ops built from other models' nets."""

import numpy as np
import pytest

from caffe2.python import brew, workspace
from caffe2.python.model_helper import ModelHelper

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("flag", "want"), [(True, 1), (False, 2)])
def test_cond_runs_the_branch_the_condition_picks(flag: bool, want: int) -> None:
    workspace.ResetWorkspace()
    for name, value in (("c", flag), ("one", 1), ("two", 2)):
        workspace.FeedBlob(name, np.array(value))
    then_m, else_m, m = ModelHelper(name="t"), ModelHelper(name="e"), ModelHelper(name="m")
    then_m.net.Copy("one", "out")
    else_m.net.Copy("two", "out")
    brew.cond(m, "c", ["one", "two", "out"], then_m, else_m)
    workspace.RunNetOnce(m.net)
    assert int(workspace.FetchBlob("out")) == want


def test_loop_runs_until_the_condition_model_says_stop() -> None:
    workspace.ResetWorkspace()
    for name, value in (("c", True), ("one", 1), ("three", 3), ("n", 0), ("acc", 0)):
        workspace.FeedBlob(name, np.array(value))
    body, check, m = ModelHelper(name="body"), ModelHelper(name="check"), ModelHelper(name="m")
    body.net.Add(["acc", "three"], "acc")
    check.net.Add(["n", "one"], "n")
    check.net.Copy(check.net.LT(["n", "three"]), "c")
    brew.loop(m, "c", ["c", "one", "three", "n", "acc"], body, check)
    workspace.RunNetOnce(m.net)
    assert int(workspace.FetchBlob("acc")) == 6
