"""Executor threads of a dlrm run: ``net_threads`` counts every thread running ops, so
async_scheduling (whose caller runs chains beside its pool) gets one pool worker fewer; the
run's results are those of one thread, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from asyncnet.train.criteo import click_dataset
from asyncnet.train.program import build_program, executor_workers
from asyncnet.train.trainers import TrainConfig, train

pytestmark = pytest.mark.timeout(120)
DATA = "random:tables=300-50,dense=4,batches=4,batch=32,indices=4,seed=5"


@pytest.mark.parametrize(
    ("net_type", "threads", "workers"),
    [("async_scheduling", 1, 1), ("async_scheduling", 2, 1), ("async_scheduling", 4, 3), ("simple", 2, 2)],
)
def test_executor_workers_count_the_caller(net_type: str, threads: int, workers: int) -> None:
    assert executor_workers(net_type, threads) == workers


def config(**kw):
    ds = click_dataset(DATA)
    args = {**ds.log.model_args, "bottom": [8], "top": [8], "dim": 4}
    common = dict(model="dlrm", mode="local", lr=0.05, epochs=1, batch_size=32, seed=3, model_args=args)
    return TrainConfig(**common, **kw), ds


def test_two_threads_build_one_worker_and_the_caller() -> None:
    cfg, ds = config(net_threads=2)
    assert cfg.net_type == "async_scheduling"
    program = build_program(cfg, ds.input_dim, ds.num_classes)
    assert program.model.net_type == "async_scheduling" and program.model.num_workers == 1


def test_two_threads_train_the_bits_of_one() -> None:
    one_cfg, ds = config(net_threads=1)
    two_cfg, _ = config(net_threads=2)
    one, two = train(config=one_cfg, dataset=ds), train(config=two_cfg, dataset=ds)
    assert one.steps == two.steps > 0
    for name, value in one.params.items():
        np.testing.assert_array_equal(two.params[name], value, err_msg=name)
