"""Caffe2's operator tests set ``engine=`` ("", "CUDNN", "EIGEN", ...) on many ops; asyncnet takes it on
every op and ignores it (one implementation per op), so those tests port without edits."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("engine", ["", "CUDNN", "EIGEN"])
def test_engine_is_taken_and_ignored_on_any_op(engine: str) -> None:
    ws, net = an.Workspace(), an.Net("e")
    ws.feed("x", np.array([[-1.0, 2.0]], np.float32))
    net.Relu("x", "y", engine=engine)
    net.Softmax("y", "p", engine=engine)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("p"), [[np.exp(-2) / (1 + np.exp(-2)), 1 / (1 + np.exp(-2))]], rtol=1e-6)


def test_engine_must_be_a_name() -> None:
    with pytest.raises(an.NetDefinitionError, match="engine"):
        an.Net("e").Relu("x", "y", engine=3)
