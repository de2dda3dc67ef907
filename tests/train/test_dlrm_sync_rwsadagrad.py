"""Row-wise sparse Adagrad in sync mode: the workers all-reduce each table's dense gradient and
every row with a non-zero gradient takes the reference's RWSAdagrad step (a row no example of
the global batch touched has a zero gradient, so its moment and its values stay as they were):
2 workers take the steps of one process on the whole batch."""

from __future__ import annotations

import numpy as np
import pytest

from asyncnet.train.criteo import click_dataset
from asyncnet.train.trainers import TrainConfig, train

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_sync_rwsadagrad_takes_the_steps_of_one_process_on_the_global_batch(backend: str) -> None:
    ds = click_dataset("random:tables=3000-500,dense=4,batches=6,batch=32,indices=4,seed=5")
    args = {**ds.log.model_args, "bottom": [8], "top": [8], "dim": 4}
    common = dict(model="dlrm", optimizer="rwsadagrad", lr=0.05, epochs=2, batch_size=32, seed=3, model_args=args)
    sync = train(config=TrainConfig(mode="sync", backend=backend, workers=2, **common), dataset=ds)
    local = train(config=TrainConfig(mode="local", workers=1, **common), dataset=ds)
    tables = [p for p in local.params if p.endswith("_table")]
    assert tables
    for name, value in local.params.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(sync.params[name], value, rtol=2e-4, atol=1e-6, err_msg=name)
    moment = local.params[tables[0] + "_moment"]
    assert (moment == 0).any() and (moment > 0).any()  # some rows untouched, some updated
