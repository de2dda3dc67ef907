"""The trainers: accuracy on a small budget, bitwise reproducibility, Hogwild's shared counter
and stop flag, and nothing left running."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import asyncnet as an
from asyncnet.train import MLP
from asyncnet.train.data import load_digits
from asyncnet.train.trainers import TrainConfig, train

QUICK = dict(epochs=4, seed=0)


def _reference_accuracy(params: dict[str, np.ndarray], cfg: TrainConfig) -> float:
    """Test accuracy of ``params`` computed with plain numpy (not with asyncnet's nets)."""
    ds = load_digits()
    x = ds.x_test.astype(np.float64)
    n_layers = len(cfg.hidden) + 1
    for i in range(1, n_layers + 1):
        x = x @ params[f"fc{i}_w"].T.astype(np.float64) + params[f"fc{i}_b"]
        if i < n_layers:
            x = np.maximum(x, 0)
    return float(np.mean(x.argmax(axis=1) == ds.y_test))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "mode,backend",
    [
        ("local", "threads"),
        ("sync", "threads"),
        ("hogwild", "threads"),
        ("sync", "processes"),
        ("hogwild", "processes"),
    ],
)
def test_every_mode_learns_the_digits(mode: str, backend: str, created_segments) -> None:
    threads_before = set(threading.enumerate())
    cfg = TrainConfig(mode=mode, backend=backend, workers=2, **QUICK)
    result = train(cfg)
    h = result.history
    assert len(h) == cfg.epochs
    assert h.final.test_accuracy >= 0.93, [m.test_accuracy for m in h]
    assert h.final.train_loss < h.epochs[0].train_loss
    # the reported figure is what the parameters really do, checked with numpy
    assert abs(_reference_accuracy(result.params, cfg) - h.final.test_accuracy) < 1e-6  # one sample is 1/359
    # one traced step per worker, each its own process in the trace, with the Allreduce when synced
    assert len(result.traces) == cfg.num_workers
    for w, events in enumerate(result.traces):
        assert {e["pid"] for e in events} == {w + 1} and any(e.get("name") == "FC" for e in events)
        assert (mode == "sync") == any(e.get("name") in ("Allreduce", "AllreduceStart") for e in events)
    assert created_segments.leaked() == []
    if backend == "processes":
        assert created_segments.names or created_segments.prefixes  # the check saw this run's segments
    assert [t for t in threading.enumerate() if t not in threads_before] == []


@pytest.mark.timeout(60)
def test_sync_is_bitwise_reproducible_across_runs_and_backends() -> None:
    cfg = TrainConfig(mode="sync", workers=2, epochs=2, seed=3)
    a, b = train(cfg), train(cfg)
    c = train(cfg.with_(backend="processes"))
    for name in a.params:
        assert np.array_equal(a.params[name], b.params[name]), name
        assert np.array_equal(a.params[name], c.params[name]), name
    assert [m.test_accuracy for m in a.history] == [m.test_accuracy for m in c.history]
    assert [m.train_loss for m in a.history] == [m.train_loss for m in b.history]


@pytest.mark.timeout(60)
def test_sync_workers_take_the_steps_of_one_worker_on_the_whole_batch() -> None:
    """Averaging the shard gradients of 2 workers is the full-batch gradient (up to rounding)."""
    sync = train(TrainConfig(mode="sync", workers=2, epochs=1, batch_size=32))
    local = train(TrainConfig(mode="local", epochs=1, batch_size=32))
    for name in sync.params:
        np.testing.assert_allclose(sync.params[name], local.params[name], rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_hogwild_counts_every_step_once(backend: str) -> None:
    result = train(TrainConfig(mode="hogwild", backend=backend, workers=2, epochs=2))
    assert int(result.params["iter"][0]) == result.steps  # AtomicIter lost no increment


@pytest.mark.timeout(60)
def test_hogwild_stop_flag_stops_every_worker() -> None:
    result = train(TrainConfig(mode="hogwild", workers=2, epochs=30, target_accuracy=0.85))
    assert len(result.history) < 30
    assert result.history.final.test_accuracy >= 0.85


@pytest.mark.timeout(60)
def test_sync_stops_at_target_accuracy() -> None:
    result = train(TrainConfig(mode="sync", workers=2, epochs=30, target_accuracy=0.9))
    assert len(result.history) < 30 and result.history.final.test_accuracy >= 0.9


@pytest.mark.timeout(60)
def test_checkpoint_round_trip(tmp_path) -> None:
    cfg = TrainConfig(mode="sync", workers=2, epochs=2)
    result = train(cfg)
    path = result.save_checkpoint(tmp_path / "ckpt.npz")
    ds = load_digits()
    model = MLP(ds.input_dim, hidden=cfg.hidden, seed=99)
    ws = an.Workspace()
    ws.run_net_once(model.init_net)
    model.load(ws, path)
    ws.feed("data", ds.x_test)
    ws.feed("label", ds.y_test)
    ws.run_net_once(model.forward_net("eval"))
    assert float(ws.fetch("accuracy")) == result.history.final.test_accuracy


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"mode": "bogus"}, "mode"),
        ({"backend": "mpi"}, "backend"),
        ({"workers": 0}, "workers"),
        ({"lr": -1.0}, "lr"),
        ({"hidden": ()}, "hidden"),
        ({"batch_size": 1, "workers": 2}, "batch_size"),
        ({"optimizer": "lbfgs"}, "optimizer"),
    ],
)
def test_bad_configs_are_refused(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**changes)


def test_torch_backend_outside_torchrun_is_a_clear_error(monkeypatch) -> None:
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        train(TrainConfig(backend="torch", epochs=1))


def test_net_type_default_is_straight_for_local_and_explicit_types_are_kept() -> None:
    assert TrainConfig(mode="local").net_type == "straight"
    assert TrainConfig(mode="hogwild", workers=2).net_type == "straight"
    assert TrainConfig(mode="local", net_threads=2).net_type == "async_scheduling"
    assert TrainConfig().net_type is None  # sync: decided by the number of all-reduces in the train net
    assert TrainConfig(mode="local", net_type="simple").net_type == "simple"
    ds = load_digits()
    kw = dict(mode="local", epochs=1, batch_size=64, hidden=(16,), seed=3, trace=False)
    runs = {t: train(TrainConfig(net_type=t, **kw), dataset=ds) for t in (None, "simple", "async_scheduling")}
    for name in runs[None].params:  # the same ops: the same bits on every executor
        assert np.array_equal(runs[None].params[name], runs["simple"].params[name]), name
        assert np.array_equal(runs[None].params[name], runs["async_scheduling"].params[name]), name
    assert [m.train_loss for m in runs[None].history] == [m.train_loss for m in runs["simple"].history]


def test_sync_default_runs_straight_nets_unless_buckets_can_overlap() -> None:
    from asyncnet.sync import ThreadedGradientSync
    from asyncnet.train.program import build_program as build_model
    from asyncnet.train.worker import WorkerNets

    def types(cfg: TrainConfig) -> tuple[str, str]:
        sync = ThreadedGradientSync.new_workers(2, timeout=30)[0]
        nets = WorkerNets(cfg, build_model(cfg, 64, 10), sync=sync)
        try:
            return nets.train_net.definition.type, nets.eval_net.definition.type
        finally:
            nets.close()

    one_bucket = TrainConfig(mode="sync", workers=2)
    assert types(one_bucket) == ("straight", "straight")  # one all-reduce at the end: nothing to overlap
    assert types(one_bucket.with_(bucket_mb=1e-9))[0] == "async_scheduling"  # a bucket per gradient: overlap
    assert types(one_bucket.with_(net_type="simple")) == ("simple", "simple")
    ds = load_digits()
    kw = dict(mode="sync", workers=2, epochs=1, batch_size=64, hidden=(16,), seed=3, trace=False)
    a, b = train(TrainConfig(**kw), dataset=ds), train(TrainConfig(net_type="async_scheduling", **kw), dataset=ds)
    for name in a.params:
        assert np.array_equal(a.params[name], b.params[name]), name
