"""Momentum and Adam train the dlrm in every mode: a table's gradient is densified, so in sync
mode 2 workers all-reduce it and take the steps of one process on the whole global batch, and
local and Hogwild runs train too."""

from __future__ import annotations

import numpy as np
import pytest

from asyncnet.train.criteo import click_dataset
from asyncnet.train.trainers import TrainConfig, train

pytestmark = pytest.mark.timeout(120)
DATA = "random:tables=300-50,dense=4,batches=6,batch=32,indices=4,seed=5"


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_sync_takes_the_steps_of_one_process_on_the_global_batch(optimizer: str) -> None:
    ds = click_dataset(DATA)
    args = {**ds.log.model_args, "bottom": [8], "top": [8], "dim": 4}
    common = dict(model="dlrm", optimizer=optimizer, lr=0.01, epochs=2, batch_size=32, seed=3, model_args=args)
    sync = train(config=TrainConfig(mode="sync", backend="threads", workers=2, **common), dataset=ds)
    local = train(config=TrainConfig(mode="local", workers=1, **common), dataset=ds)
    tables = [p for p in local.params if p.endswith("_table")]
    assert tables and all(f"{t}_{'momentum' if optimizer == 'momentum' else 'm1'}" in local.params for t in tables)
    for name, value in local.params.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(sync.params[name], value, rtol=2e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_hogwild_trains(optimizer: str) -> None:
    ds = click_dataset(DATA)
    args = {**ds.log.model_args, "bottom": [8], "top": [8], "dim": 4}
    cfg = TrainConfig(
        model="dlrm",
        optimizer=optimizer,
        lr=0.01,
        epochs=1,
        batch_size=32,
        seed=3,
        model_args=args,
        mode="hogwild",
        workers=2,
    )
    result = train(config=cfg, dataset=ds)
    assert np.isfinite(result.history.epochs[-1].train_loss)
