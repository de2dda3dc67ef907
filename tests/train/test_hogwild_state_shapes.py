"""Hogwild's shared state is the init net's arrays with their shapes: a 0-d blob of a user's
init net stays 0-d (np.ascontiguousarray would make it 1-d)."""

import numpy as np
import pytest

from asyncnet.model import ModelHelper
from asyncnet.train.config import TrainConfig
from asyncnet.train.data import from_arrays
from asyncnet.train.loop import initial_state

pytestmark = pytest.mark.timeout(120)


def _scaled() -> ModelHelper:
    m = ModelHelper("scaled", seed=0)
    m.init_net.ConstantFill([], "temperature", shape=[], value=2.0, dtype="float32")
    logits = m.op("Div", [m.fc("data", "fc", 3, 2), "temperature"], "scaled_logits", broadcast=1)
    m.softmax_with_loss(logits, "label")
    return m


def test_initial_state_keeps_the_shape_of_every_init_blob():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 3)).astype(np.float32)
    ds = from_arrays((x, (x[:, 0] > 0).astype(np.int32)), "user:model")
    state = initial_state(TrainConfig(model="user:scaled", mode="hogwild", workers=2), ds, _scaled)
    assert state["temperature"].shape == ()
    assert float(state["temperature"]) == 2.0
    assert state["fc_w"].shape == (2, 3) and state["iter"].shape == (1,)
    assert all(a.flags.c_contiguous for a in state.values())
