"""The MLP model builder: nets and names, training to high accuracy, in-place updates, checkpoints."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import asyncnet as an
from asyncnet.train import MLP, CheckpointError

pytestmark = pytest.mark.timeout(60)


def blobs(n: int = 600, dim: int = 8, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A linearly separable problem: well-apart Gaussian clusters."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim)) * 4
    label = rng.integers(0, classes, n).astype(np.int32)
    return (centers[label] + rng.normal(size=(n, dim))).astype(np.float32), label


def init(model: MLP) -> an.Workspace:
    ws = an.Workspace()
    ws.run_net_once(model.init_net)
    return ws


def test_names_shapes_and_seeded_init():
    m = MLP(input_dim=5, hidden=(7, 6), num_classes=4, seed=3, optimizer="adam")
    assert m.params == ["fc1_w", "fc1_b", "fc2_w", "fc2_b", "fc3_w", "fc3_b"]
    assert m.grads == {p: f"{p}_grad" for p in m.params}
    a, b = init(m), init(MLP(input_dim=5, hidden=(7, 6), num_classes=4, seed=3, optimizer="adam"))
    assert a.fetch("fc1_w").shape == (7, 5) and a.fetch("fc3_b").shape == (4,)
    for p in m.params:
        np.testing.assert_array_equal(a.fetch(p), b.fetch(p))
        assert a.fetch(p).dtype == np.float32
        np.testing.assert_array_equal(a.fetch(f"{p}_m1"), 0)
    assert not np.array_equal(a.fetch("fc1_w"), init(MLP(5, (7, 6), 4, seed=4)).fetch("fc1_w"))
    assert a.fetch("iter").dtype == np.int64 and int(a.fetch("iter")[0]) == 0
    assert np.all(a.fetch("fc2_b") == 0)


def test_forward_outputs_and_gradients_match_torch():
    m = MLP(input_dim=6, hidden=(5,), num_classes=3, dtype=np.float64)
    ws = init(m)
    x, y = blobs(10, 6, 3)
    ws.feed("data", x.astype(np.float64))
    ws.feed("label", y)
    ws.run_net_once(m.gradient_net())
    loss, acc = ws.fetch("loss"), ws.fetch("accuracy")
    assert loss.shape == () and acc.shape == () and ws.fetch("softmax").shape == (10, 3)
    t = {p: torch.tensor(ws.fetch(p), requires_grad=True) for p in m.params}
    h = torch.relu(F.linear(torch.tensor(x, dtype=torch.float64), t["fc1_w"], t["fc1_b"]))
    tl = F.cross_entropy(F.linear(h, t["fc2_w"], t["fc2_b"]), torch.tensor(y).long())
    tl.backward()
    np.testing.assert_allclose(loss, tl.item(), rtol=1e-12)
    for p in m.params:
        np.testing.assert_allclose(ws.fetch(m.grads[p]), t[p].grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.1), ("momentum", 0.05), ("adam", 0.01)])
def test_trains_a_separable_problem_to_high_accuracy(optimizer, lr):
    x, y = blobs()
    m = MLP(input_dim=8, hidden=(16,), num_classes=3, optimizer=optimizer, lr=lr)
    ws = init(m)
    ws.create_net(m.train_net())
    ws.create_net(m.forward_net())
    rng = np.random.default_rng(0)
    for _ in range(150):
        idx = rng.integers(0, len(x), 32)
        ws.feed("data", x[idx])
        ws.feed("label", y[idx])
        ws.run_net("train")
    ws.feed("data", x)
    ws.feed("label", y)
    ws.run_net("eval")
    assert float(ws.fetch("accuracy")) >= 0.97
    assert int(ws.fetch("iter")[0]) == 150


def test_async_scheduling_nets_and_separate_gradient_and_update_nets():
    x, y = blobs(64)
    m = MLP(input_dim=8, hidden=(8, 8), num_classes=3, net_type="async_scheduling", num_workers=2, optimizer="momentum")
    ref = MLP(input_dim=8, hidden=(8, 8), num_classes=3, optimizer="momentum")
    a, b = init(m), init(ref)
    for ws in (a, b):
        ws.feed("data", x)
        ws.feed("label", y)
    a.create_net(m.gradient_net())
    a.create_net(m.update_net())
    b.create_net(ref.train_net())
    for _ in range(5):
        a.run_net("grad")
        a.run_net("update")
        b.run_net("train")
    for p in m.params:
        np.testing.assert_array_equal(a.fetch(p), b.fetch(p))  # same bits whatever the executor


def test_updates_write_into_the_shared_parameter_arrays():
    """Hogwild: two workers' workspaces hold the same arrays; every step is visible to both."""
    m = MLP(input_dim=8, hidden=(8,), num_classes=3, optimizer="adam", lr=0.01)
    shared = init(m)
    arrays = {n: shared.fetch(n) for n in m.checkpoint_blobs}
    x, y = blobs(256)
    workers = []
    for _ in range(2):
        ws = an.Workspace()
        for n, arr in arrays.items():
            ws.feed(n, arr)
        ws.feed("iter_mutex", shared.fetch("iter_mutex"))
        ws.create_net(m.train_net(iter_op="AtomicIter"))
        workers.append(ws)

    def work(k: int) -> None:
        ws = workers[k]
        for i in range(20):
            sl = slice((i * 2 + k) * 8 % 256, (i * 2 + k) * 8 % 256 + 8)
            ws.feed("data", x[sl])
            ws.feed("label", y[sl])
            ws.run_net("train")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert int(arrays["iter"][0]) == 40  # the AtomicIter counter counted both workers' steps
    for ws in workers:
        for n, arr in arrays.items():
            assert ws.fetch(n) is arr


def test_lr_policies_feed_the_learning_rate():
    m = MLP(input_dim=2, hidden=(), num_classes=2, lr=0.5, lr_policy="step", lr_step=2)
    ws = init(m)
    ws.feed("data", np.zeros((1, 2), np.float32))
    ws.feed("label", np.zeros(1, np.int32))
    ws.create_net(m.train_net())
    seen = []
    for _ in range(5):
        ws.run_net("train")
        seen.append(float(ws.fetch("lr")))
    np.testing.assert_allclose(seen, [0.5, 0.05, 0.05, 0.005, 0.005])


def test_train_net_with_allreduce_op():
    if "Allreduce" not in an.registered_ops():
        pytest.skip("the Allreduce op is not registered yet")
    net = MLP(input_dim=4, hidden=(3,), num_classes=2).train_net(
        sync_blob="sync", bucket_mb=None
    )  # one Allreduce (default: buckets, tests/sync)
    ar = [op for op in net.ops if op.type == "Allreduce"]
    assert len(ar) == 1 and ar[0].inputs[0] == "sync" and ar[0].outputs == ar[0].inputs[1:]


def test_save_load_round_trip_resumes_bit_for_bit(tmp_path):
    x, y = blobs(64)
    m = MLP(input_dim=8, hidden=(8,), num_classes=3, optimizer="momentum", lr=0.05)
    ws = init(m)
    ws.feed("data", x)
    ws.feed("label", y)
    ws.create_net(m.train_net())
    ws.run_net("train", num_iter=3)
    path = tmp_path / "ckpt.npz"
    m.save(ws, path)
    assert path.exists() and not list(tmp_path.glob("*.tmp*"))
    other = init(m)
    kept = other.fetch("fc1_w")
    m.load(other, path)
    assert other.fetch("fc1_w") is kept  # loaded in place
    for n in m.checkpoint_blobs:
        np.testing.assert_array_equal(other.fetch(n), ws.fetch(n))
    other.feed("data", x)
    other.feed("label", y)
    other.create_net(m.train_net())
    ws.run_net("train", num_iter=2)
    other.run_net("train", num_iter=2)
    for n in m.checkpoint_blobs:
        np.testing.assert_array_equal(other.fetch(n), ws.fetch(n))


def test_load_errors(tmp_path):
    m = MLP(input_dim=4, hidden=(3,), num_classes=2, optimizer="momentum")
    ws = init(m)
    with pytest.raises(CheckpointError, match="does not exist"):
        m.load(ws, tmp_path / "nope.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a readable npz"):
        m.load(ws, tmp_path / "junk.npz")
    m.save(ws, tmp_path / "ok.npz")
    with pytest.raises(CheckpointError, match="is for model"):
        MLP(input_dim=4, hidden=(5,), num_classes=2, optimizer="momentum").load(ws, tmp_path / "ok.npz")
    arrays = {n: ws.fetch(n) for n in m.checkpoint_blobs}
    partial = {k: v for k, v in arrays.items() if k != "fc1_b_momentum"}
    np.savez(tmp_path / "partial.npz", **partial)
    with pytest.raises(CheckpointError, match="lacks \\['fc1_b_momentum'\\]"):
        m.load(ws, tmp_path / "partial.npz")
    np.savez(tmp_path / "dtype.npz", **{**arrays, "fc2_w": arrays["fc2_w"].astype(np.float64)})
    before = ws.fetch("fc1_w").copy()
    with pytest.raises(CheckpointError, match="'fc2_w' has shape \\(2, 3\\) dtype float64"):
        m.load(ws, tmp_path / "dtype.npz")
    np.testing.assert_array_equal(ws.fetch("fc1_w"), before)  # nothing written on failure
    assert issubclass(CheckpointError, an.AsyncNetError)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"lr_policy": "cosine"}, "lr_policy"),
        ({"hidden": (0,)}, "hidden"),
        ({"dtype": np.int32}, "dtype"),
        ({"lr_step": 0}, "lr_step"),
    ],
)
def test_bad_options_are_definition_errors(kwargs, field):
    with pytest.raises(an.NetDefinitionError, match=field):
        MLP(input_dim=4, **kwargs)
    with pytest.raises(an.NetDefinitionError, match="iter_op"):
        MLP(input_dim=4).update_net(iter_op="Counter")
