"""A diverged model never scores: Accuracy counts a NaN row as wrong (checked against torch.topk),
and the trainers stop at the first non-finite loss with one error naming the step and the setting."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import asyncnet as an
from asyncnet.errors import TrainConfigError, TrainingDivergedError
from asyncnet.train.trainers import TrainConfig, train

pytestmark = pytest.mark.timeout(60)


def _accuracy(pred: np.ndarray, label: np.ndarray, top_k: int = 1) -> float:
    ws = an.Workspace()
    ws.feed("pred", pred)
    ws.feed("label", label)
    net = an.Net("acc")
    net.Accuracy(["pred", "label"], "acc", top_k=top_k)
    ws.run_net_once(net)
    return float(ws.fetch("acc"))


def _torch_accuracy(pred: np.ndarray, label: np.ndarray, top_k: int) -> float:
    """torch.topk ranks NaN above every number; a NaN at the label is wrong (nothing was learned)."""
    p = torch.from_numpy(pred.astype(np.float64))
    # ties go to the lower index, as Caffe2's Accuracy: rank by (score, -index) with a stable sort
    order = torch.argsort(torch.nan_to_num(p, nan=np.inf), dim=1, descending=True, stable=True)
    top = order[:, :top_k]
    hit = (top == torch.from_numpy(label.astype(np.int64))[:, None]).any(dim=1)
    hit &= ~torch.isnan(p[torch.arange(len(label)), torch.from_numpy(label.astype(np.int64))])
    return float(hit.double().mean()) if len(label) else 0.0


def test_a_row_of_nans_is_wrong() -> None:
    pred = np.array([[np.nan] * 4, [0.1, 0.7, 0.1, 0.1], [0.1, np.nan, 0.5, 0.2]], np.float32)
    label = np.array([2, 1, 1], np.int32)
    assert _accuracy(pred, label) == pytest.approx(1 / 3)
    assert _accuracy(np.full((5, 3), np.nan, np.float32), np.zeros(5, np.int32)) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda d: st.tuples(
            arrays(
                np.float32,
                st.tuples(st.integers(1, 8), st.just(d)),
                elements=st.sampled_from([np.nan, -1.0, 0.0, 0.5, 1.0, 2.0]),
            ),
            st.integers(0, 10**6),
            st.integers(1, d),
        )
    )
)
def test_accuracy_matches_torch_topk_with_nans(case) -> None:
    pred, seed, k = case
    label = np.random.default_rng(seed).integers(0, pred.shape[1], len(pred)).astype(np.int32)
    assert _accuracy(pred, label, k) == pytest.approx(_torch_accuracy(pred, label, k), abs=1e-6)


@pytest.mark.parametrize("mode", ["sync", "hogwild"])
def test_a_diverging_run_stops_with_one_error_naming_step_and_setting(mode: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the overflow on the way to NaN
        with pytest.raises(TrainingDivergedError) as exc:
            train(TrainConfig(mode=mode, workers=2, epochs=3, lr=1e9, trace=False))
    msg = str(exc.value)
    assert "epoch 1, step" in msg and "--lr" in msg and "lr 1e+09" in msg, msg
    assert "\n" not in msg
    assert ("--workers" in msg) == (mode == "hogwild")


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(batch_size=100_000), "larger than the training set"),
        (dict(mode="hogwild", workers=40, batch_size=32), "at least the number of hogwild workers"),
        (dict(mode="sync", workers=3, batch_size=2), "at least the number of sync workers"),
        (dict(lr=float("nan")), "lr must be a positive number"),
        (dict(momentum=1.0), "momentum must be in [0, 1)"),
        (dict(lr_policy="cosine"), "lr_policy must be one of"),
        (dict(weight_decay=-1e-4), "weight_decay"),
        (dict(hidden=(0,)), "hidden"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_any_step(kwargs: dict, words: str) -> None:
    with pytest.raises(TrainConfigError) as exc:
        train(TrainConfig(**{"epochs": 1, **kwargs}))
    assert words in str(exc.value)


def test_each_optimizer_has_its_own_default_rate_and_learns() -> None:
    rates = {opt: TrainConfig(optimizer=opt).lr for opt in ("sgd", "momentum", "adam")}
    assert len(set(rates.values())) == 3 and TrainConfig(optimizer="momentum", lr=0.3).lr == 0.3
    for opt in ("momentum", "adam"):
        h = train(TrainConfig(optimizer=opt, epochs=3, trace=False)).history
        assert h.final.test_accuracy >= 0.93, (opt, [m.test_accuracy for m in h])


def test_many_hogwild_workers_warn_about_staleness(caplog) -> None:
    with caplog.at_level("WARNING", logger="asyncnet.train"):
        train(TrainConfig(mode="hogwild", workers=9, batch_size=64, epochs=1, trace=False))
    assert any("stale" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="asyncnet.train"):
        train(TrainConfig(mode="hogwild", workers=2, epochs=1, trace=False))
    assert not caplog.records


def test_every_optimizer_setting_reaches_the_model() -> None:
    from asyncnet.train.program import build_program as build_model

    cfg = TrainConfig(optimizer="momentum", momentum=0.5, weight_decay=1e-3, lr_policy="step", lr_step=7, lr_gamma=0.3)
    m = build_model(cfg, 64, 10)
    assert (m.optimizer, m.momentum, m.weight_decay, m.lr_policy, m.lr_step, m.lr_gamma, m.lr) == (
        "momentum",
        0.5,
        1e-3,
        "step",
        7,
        0.3,
        0.05,
    )
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    ops = {op.type: op for op in m.train_net().to_def().ops}
    assert ops["LearningRate"].args["stepsize"] == 7 and ops["MomentumSGDUpdate"].args["weight_decay"] == 1e-3
