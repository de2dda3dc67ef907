"""Hybrid-parallel dlrm with the trainers' optimizers and learning-rate schedules, and its test
set evaluated: one rank takes the steps of plain training with the same optimizer, and 2 ranks
under torchrun (gloo, 127.0.0.1) give one process's epoch losses, test loss and test AUC on the
same global batches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from _torchrun import run_torchrun, torchrun_cmd
from test_criteo_preprocess import lines_with_repeats

import asyncnet as an
from asyncnet.model.zoo.dlrm import auc, dlrm, lr_schedule
from asyncnet.train.criteo import click_dataset, random_log
from asyncnet.train.dlrm_hybrid import HybridDLRM, LocalComm

pytestmark = pytest.mark.timeout(240)
SRC = str(Path(__file__).resolve().parents[2] / "src")
SPEC = "tables=50-80-30-60-20,dense=4,batches=4,batch=32"
SHAPE = {"dim": 8, "bottom": (16,), "top": (16,)}


def densify(net, grads):
    """Each table's (indices, rows) gradient scattered into a dense one (SparseToDense), as sync mode does."""
    out = {}
    for p, g in grads.items():
        out[p] = g if isinstance(g, str) else str(net.SparseToDense([g.indices, g.values, p], f"{p}_dense_grad"))
    return out


def plain_training(log, rows, batch, optimizer, lr, lr_args, test_rows=None, epochs=1):
    """One process: train_net over ``rows`` in global batches, in order; each epoch's mean
    loss, and (with ``test_rows``) the test loss and AUC after it; the final parameters."""
    m = dlrm(**SHAPE, **log.model_args)
    dense = optimizer in ("momentum", "adam")  # tables on their dense gradient, as sync mode
    net = m.train_net(optimizer=optimizer, lr=lr, lr_args=lr_args, before_update=densify if dense else None)
    score = m.forward_net("score")
    out = []
    with an.Workspace() as ws:
        ws.run_net_once(m.init_net)
        ws.create_net(net)
        for _ in range(epochs):
            losses = []
            for start in range(0, len(rows) - batch + 1, batch):
                for k, v in log.batch(rows[start : start + batch]).items():
                    ws.feed(k, v)
                ws.run_net("train")
                losses.append(float(ws.fetch("loss")))
            figures = [float(np.mean(losses))]
            if test_rows is not None:
                feeds = log.batch(test_rows)
                for k, v in feeds.items():
                    ws.feed(k, v)
                ws.run_net_once(score)
                prob = np.asarray(ws.fetch("prob"))[:, 0]
                figures += [float(ws.fetch("loss")), auc(feeds["click"][:, 0], prob)]
            out.append(figures)
        params = {p: np.asarray(ws.fetch(p)).copy() for p in m.params}
    return out, params, losses


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adagrad", "adam", "rwsadagrad"])
def test_one_rank_takes_plain_trainings_steps(optimizer):
    log = random_log(SPEC)
    schedule = lr_schedule(2, 3, 4)
    h = HybridDLRM(LocalComm(), lr=0.05, optimizer=optimizer, update={"lr_args": schedule}, **SHAPE, **log.model_args)
    rows = np.arange(len(log))
    got = [h.step(log.batch(rows[32 * s : 32 * s + 32])) for s in range(4)]
    _, params, losses = plain_training(log, rows, 32, optimizer, 0.05, schedule)
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    mine = h.params()
    for p, v in params.items():
        np.testing.assert_allclose(mine[p], v, rtol=1e-4, atol=1e-6, err_msg=p)
    assert h.lr() != 0.05  # the schedule moved the rate (warm-up, then decay)


def test_one_rank_evaluates_like_the_forward_net():
    log = random_log(SPEC)
    h = HybridDLRM(LocalComm(), lr=0.1, **SHAPE, **log.model_args)
    h.step(log.batch(range(32)))
    rows = np.arange(50)
    loss, probs = h.evaluate(log, rows, 16)  # 16, 16, 16 and 2 examples
    m = dlrm(**SHAPE, **log.model_args)
    with an.Workspace() as ws:
        ws.run_net_once(m.init_net)
        for p, v in h.params().items():
            ws.feed(p, v)
        for k, v in log.batch(rows).items():
            ws.feed(k, v)
        ws.run_net_once(m.forward_net("score"))
        np.testing.assert_allclose(probs, np.asarray(ws.fetch("prob"))[:, 0], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(loss, float(ws.fetch("loss")), rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["rwsadagrad", "adagrad", "adam"])
def test_two_ranks_train_and_test_as_one_process(tmp_path, optimizer):
    pytest.importorskip("torch.distributed")
    path = tmp_path / "train.txt"
    path.write_text("".join(lines_with_repeats(300, seed=11)))
    dims = ["--model-arg", "dim=8", "--model-arg", "bottom=[16]", "--model-arg", "top=[16]"]
    sched = ["--model-arg", "lr_num_warmup_steps=2", "--model-arg", "lr_decay_start_step=4"]
    sched += ["--model-arg", "lr_num_decay_steps=6", "--model-arg", "max_ind_range=40"]
    cmd = torchrun_cmd(
        *("-m", "asyncnet", "train", "--model", "dlrm", "--backend", "torch", "--hybrid"),
        *("--optimizer", optimizer, "--lr", "0.05", "--batch-size", "32", "--epochs", "2"),
        *("--data", str(path), "--out", "run", *dims, *sched),
    )
    env = {**os.environ, "PYTHONPATH": SRC, "ASYNCNET_CACHE": str(tmp_path / "cache")}
    run_torchrun(cmd, "run directory", ranks=1, cwd=tmp_path, env=env, timeout=200)
    epochs = json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"]
    ds = click_dataset(str(path), {"max_ind_range": 40})
    want, _, _ = plain_training(
        ds.log, ds.x_train[:, 0], 32, optimizer, 0.05, lr_schedule(2, 4, 6), ds.x_test[:, 0], epochs=2
    )
    got = [[e["train_loss"], e["test_loss"], e["test_auc"]] for e in epochs]
    np.testing.assert_allclose(got, want, rtol=2e-4)
    assert all(0.0 <= e["test_accuracy"] <= 1.0 and 0.0 <= e["train_accuracy"] <= 1.0 for e in epochs)
    assert len(ds.x_test) == 30 and epochs[-1]["step"] == 2 * (270 // 32)
