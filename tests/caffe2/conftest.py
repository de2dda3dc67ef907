"""Each test starts in a fresh default workspace, as Caffe2's TestCase.setUp did (ResetWorkspace)."""

import pytest

pytest.importorskip("google.protobuf")


@pytest.fixture(autouse=True)
def _fresh_workspace():
    from caffe2.python import workspace

    workspace.SwitchWorkspace("default")
    workspace.ResetWorkspace()
    yield
    workspace.SwitchWorkspace("default")
    workspace.ResetWorkspace(".")
