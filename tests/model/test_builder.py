"""ModelHelper: the same losses as train.model.MLP, eval-mode switches, sparse updates, checkpoints."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import CheckpointError, NetDefinitionError
from asyncnet.model import ModelHelper, load, save
from asyncnet.model.checkpoint import META
from asyncnet.model.zoo import mlp
from asyncnet.train import MLP
from asyncnet.train.data import epoch_batches, load_digits

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_mlp_matches_train_model_mlp(optimizer):
    """An MLP written with the builder follows train.model.MLP's losses step by step (same seed)."""
    ds = load_digits()
    ref = MLP(64, hidden=(32,), num_classes=10, seed=3, optimizer=optimizer, lr=0.05)
    m = mlp(64, (32,), 10, seed=3)
    train = m.train_net(optimizer=optimizer, lr=0.05)
    ws_ref, ws = an.Workspace(), an.Workspace()
    ws_ref.run_net_once(ref.init_net)
    ws.run_net_once(m.init_net)
    ws_ref.create_net(ref.train_net())
    ws.create_net(train)
    losses, ref_losses = [], []
    for step, (xb, yb) in enumerate(epoch_batches(ds.x_train, ds.y_train, 64, 0)):
        if step == 12:
            break
        for w, net, out in ((ws_ref, "train", ref_losses), (ws, "train", losses)):
            w.feed("data", xb)
            w.feed("label", yb)
            w.run_net(net)
            out.append(float(w.fetch("loss")))
    assert losses == ref_losses  # MLP is written with the builder: the same ops, the same bits
    assert losses[-1] < losses[0]


def _bn_dropout_model():
    m = ModelHelper("bn", seed=1)
    x = m.spatial_bn("x", "bn", 3, momentum=0.5)
    x = m.dropout(m.flatten(x, "flat"), "drop", ratio=0.5, seed=7)
    m.softmax_with_loss(m.fc(x, "fc", 12, 2), "label")
    return m


def test_eval_net_uses_running_stats_and_no_dropout():
    m = _bn_dropout_model()
    train, ev = m.train_net(lr=0.0), m.eval_net()
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    x = np.random.default_rng(0).normal(2.0, 3.0, (6, 3, 2, 2)).astype(np.float32)
    ws.feed("x", x)
    ws.feed("label", np.zeros(6, np.int32))
    ws.run_net_once(train)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3), ddof=1)  # Caffe2 keeps the unbiased variance
    rm, rv = ws.fetch("bn_rm").copy(), ws.fetch("bn_riv").copy()
    np.testing.assert_allclose(rm, 0.5 * mean, rtol=1e-5)
    assert np.all(ws.fetch("drop")[~ws.fetch("drop_mask")] == 0) and not ws.fetch("drop_mask").all()
    ws.run_net_once(ev)
    want = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(ws.fetch("drop"), want.reshape(6, 12), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ws.fetch("bn_rm"), rm)  # eval does not move the statistics
    assert ev.ops[0].outputs == ["bn"] and all(
        op.args.get("is_test") for op in ev.ops if op.type in ("SpatialBN", "Dropout")
    )
    np.testing.assert_allclose(rv, 0.5 * 1.0 + 0.5 * var, rtol=1e-4)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_embedding_updates_only_touched_rows(optimizer):
    """Sparse SGD / Adagrad on a table agree with the dense torch-style update computed in numpy."""
    m = ModelHelper("emb", seed=0)
    pooled = m.embedding_bag("ids", "lengths", "emb", 20, 4)
    m.sigmoid_xent_loss(m.fc(pooled, "top", 4, 1), "click")
    train = m.train_net(optimizer=optimizer, lr=0.5)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    ids = np.array([1, 5, 5, 7, 1], np.int64)
    ws.feed("ids", ids)
    ws.feed("lengths", np.array([2, 3], np.int32))
    ws.feed("click", np.array([[1.0], [0.0]], np.float32))
    table0, w, b = ws.fetch("emb_table").copy(), ws.fetch("top_w").copy(), ws.fetch("top_b").copy()
    table = ws.fetch("emb_table")
    ws.run_net_once(train)
    assert ws.fetch("emb_table") is table
    # reference: dense gradient of the mean logistic loss
    seg = np.array([0, 0, 1, 1, 1])
    pooled_ref = np.stack([table0[ids[seg == k]].sum(0) for k in range(2)])
    z = pooled_ref @ w.T + b
    dz = (1 / (1 + np.exp(-z)) - np.array([[1.0], [0.0]])) / 2
    g = np.zeros_like(table0)
    np.add.at(g, ids, (dz @ w)[seg])
    want = table0 - 0.5 * g if optimizer == "sgd" else table0 - 0.5 * g / (np.sqrt(g * g) + 1e-10)
    np.testing.assert_allclose(ws.fetch("emb_table"), want, rtol=1e-5, atol=1e-6)
    untouched = np.setdiff1d(np.arange(20), ids)
    np.testing.assert_array_equal(ws.fetch("emb_table")[untouched], table0[untouched])


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_a_sparse_table_takes_a_dense_only_optimizer_on_its_densified_gradient(optimizer):
    m = ModelHelper()
    m.sigmoid_xent_loss(m.fc(m.embedding_bag("ids", "len", "e", 10, 2), "top", 2, 1), "t")
    ops = m.train_net(optimizer=optimizer).ops
    dense = [op for op in ops if op.type == "SparseToDense"]
    assert [op.outputs for op in dense] == [["e_table_grad_dense"]]
    update = "Adam" if optimizer == "adam" else "MomentumSGDUpdate"
    assert any(op.type == update and "e_table" in op.inputs and "e_table_grad_dense" in op.inputs for op in ops)


def test_builder_errors():
    m = ModelHelper()
    m.fc("x", "fc", 2, 3)
    with pytest.raises(NetDefinitionError, match="already registered"):
        m.param("fc_w", (3, 2))
    with pytest.raises(NetDefinitionError, match="positive ints"):
        m.param("z", (0, 2))
    with pytest.raises(NetDefinitionError, match="expected a loss"):
        m.train_net()
    with pytest.raises(NetDefinitionError, match="optimizer"):
        mlp(4, (3,), 2).train_net(optimizer="rmsprop")


def test_checkpoint_roundtrip_and_errors(tmp_path):
    m = _bn_dropout_model()
    train = m.train_net(optimizer="adagrad", lr=0.1)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    ws.feed("x", np.random.default_rng(1).normal(size=(4, 3, 2, 2)).astype(np.float32))
    ws.feed("label", np.array([0, 1, 1, 0], np.int32))
    ws.run_net_once(train)
    path = tmp_path / "m.npz"
    save(m, ws, path)
    assert set(np.load(path).files) == {*m.params, *m.buffers, *m.optimizer_state, "iter", META}
    ws2 = an.Workspace()
    ws2.run_net_once(m.init_net)
    load(m, ws2, path)
    for n in m.checkpoint_blobs:
        np.testing.assert_array_equal(ws2.fetch(n), ws.fetch(n))
    other = ModelHelper("other")
    other.fc("x", "fc", 5, 2)  # fc_w of another shape
    with pytest.raises(CheckpointError, match="lacks|shape|is for model"):
        load(other, ws2, path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load(m, ws2, tmp_path / "none.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a readable"):
        load(m, ws2, tmp_path / "bad.npz")


def test_zoo_mlp_has_train_model_mlp_blob_names():
    ref, m = MLP(8, hidden=(6, 5), num_classes=3), mlp(8, (6, 5), 3)
    assert m.params == ref.params and {p: m.shapes[p] for p in m.params} == ref.shapes
    assert {o for op in m.forward_net().ops for o in op.outputs} >= {"logits", "softmax", "loss", "accuracy"}


def test_second_optimizer_and_bad_init_are_refused():
    m = mlp(4, (3,), 2)
    m.train_net(optimizer="sgd")
    m.train_net("train2", optimizer="sgd")  # another net with the same optimizer shares its state
    with pytest.raises(NetDefinitionError, match="'sgd' again"):
        m.train_net(optimizer="adam")
    with pytest.raises(NetDefinitionError, match="expected init"):
        m.param("w", (2,), init="he")
    assert "w" not in m.shapes


def test_hoist_moves_only_ops_that_read_no_computed_blob():
    m = ModelHelper("h")
    a = m.fc("x", "a", 2, 2)
    m.fc(a, "b", 2, 2)
    with pytest.raises(an.NetDefinitionError, match="reading only inputs and parameters"):
        m.hoist(["b"])
    assert [op.outputs[0] for op in m.forward_net().ops] == ["a", "b"]


def test_inference_net_reads_no_label_and_eval_prefix_keeps_the_train_blobs():
    m = _bn_dropout_model()
    train = m.train_net(lr=0.0)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    x = np.random.default_rng(2).normal(size=(4, 3, 2, 2)).astype(np.float32)
    ws.feed("x", x)
    ws.feed("label", np.array([0, 1, 1, 0], np.int32))
    ws.run_net_once(train)
    loss = float(ws.fetch("loss"))
    ws.run_net_once(m.eval_net(prefix="eval/"))
    assert float(ws.fetch("loss")) == loss and ws.has("eval/loss") and ws.has("eval/accuracy")
    inference = m.inference_net()
    assert m.labels == ["label"] and [op.type for op in inference.ops][-1] == "Softmax"
    assert not any("label" in op.inputs for op in inference.ops)
    assert all(op.args.get("is_test") for op in inference.ops if op.type in ("SpatialBN", "Dropout"))
    fresh = an.Workspace()
    for n in m.checkpoint_blobs:
        fresh.feed(n, np.array(ws.fetch(n)))
    fresh.feed("x", x)
    fresh.run_net_once(inference)
    np.testing.assert_allclose(fresh.fetch("softmax"), ws.fetch("eval/softmax"), rtol=1e-6)
