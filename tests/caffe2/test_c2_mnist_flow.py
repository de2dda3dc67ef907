"""The flow of Caffe2's MNIST tutorial (written here in our own words, on fixture LMDBs): LeNet
with brew, data from TensorProtosDBInput, SGD with a step policy, Print/Summarize bookkeeping,
test accuracy, then the predictor exporter's save and load for inference."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("lmdb")

from c2_mnist_fixture import write_mnist_lmdb

import caffe2.python.predictor.predictor_exporter as pe
from caffe2.python import brew, core, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(600)


def add_input(model, batch_size, db, db_type):
    data_uint8, label = brew.db_input(
        model, blobs_out=["data_uint8", "label"], batch_size=batch_size, db=db, db_type=db_type
    )
    data = model.Cast(data_uint8, "data", to=core.DataType.FLOAT)
    data = model.Scale(data, data, scale=float(1.0 / 256))
    data = model.StopGradient(data, data)
    return data, label


def lenet(model, data):
    conv1 = brew.conv(model, data, "conv1", dim_in=1, dim_out=8, kernel=5)
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, "conv2", dim_in=8, dim_out=16, kernel=5)
    pool2 = brew.max_pool(model, conv2, "pool2", kernel=2, stride=2)
    fc3 = brew.fc(model, pool2, "fc3", dim_in=16 * 4 * 4, dim_out=64)
    fc3 = brew.relu(model, fc3, fc3)
    pred = brew.fc(model, fc3, "pred", 64, 10)
    return brew.softmax(model, pred, "softmax")


def test_mnist_tutorial_flow(tmp_path):
    train_db, test_db = str(tmp_path / "mnist-train-nchw-lmdb"), str(tmp_path / "mnist-test-nchw-lmdb")
    write_mnist_lmdb(train_db, 512, seed=1)
    write_mnist_lmdb(test_db, 200, seed=2)
    root = str(tmp_path / "root")
    workspace.ResetWorkspace(root)
    arg_scope = {"order": "NCHW"}

    train = model_helper.ModelHelper(name="mnist_train", arg_scope=arg_scope)
    data, label = add_input(train, batch_size=32, db=train_db, db_type="lmdb")
    softmax = lenet(train, data)
    xent = train.LabelCrossEntropy([softmax, label], "xent")
    loss = train.AveragedLoss(xent, "loss")
    brew.accuracy(train, [softmax, label], "accuracy")
    train.AddGradientOperators([loss])
    optimizer.build_sgd(train, base_learning_rate=0.1, policy="step", stepsize=1, gamma=0.999)
    train.Print("accuracy", [], to_file=1)
    for param in train.params:
        train.Summarize(param, [], to_file=1)

    test = model_helper.ModelHelper(name="mnist_test", arg_scope=arg_scope, init_params=False)
    data, label = add_input(test, batch_size=50, db=test_db, db_type="lmdb")
    brew.accuracy(test, [lenet(test, data), label], "accuracy")
    deploy = model_helper.ModelHelper(name="mnist_deploy", arg_scope=arg_scope, init_params=False)
    lenet(deploy, "data")

    assert workspace.RunNetOnce(train.param_init_net)
    assert workspace.CreateNet(train.net, overwrite=True)
    losses = []
    for _ in range(120):
        workspace.RunNet(train.net)
        losses.append(float(workspace.blobs["loss"]))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert os.path.exists(os.path.join(root, "accuracy.log"))
    assert os.path.exists(os.path.join(root, "conv1_w.summary"))

    workspace.RunNetOnce(test.param_init_net)
    workspace.CreateNet(test.net, overwrite=True)
    accuracies = []
    for _ in range(4):
        workspace.RunNet(test.net.Proto().name)
        accuracies.append(float(workspace.FetchBlob("accuracy")))
    assert np.mean(accuracies) >= 0.9

    meta = pe.PredictorExportMeta(
        predict_net=deploy.net.Proto(), parameters=[str(b) for b in deploy.params], inputs=["data"], outputs=["softmax"]
    )
    model_file = os.path.join(root, "mnist_model.minidb")
    pe.save_to_db("minidb", model_file, meta)
    blob = workspace.FetchBlob("data")
    expected = workspace.FetchBlob("softmax")
    workspace.ResetWorkspace(root)
    assert workspace.Blobs() == []
    predict_net = pe.prepare_prediction_net(model_file, "minidb")
    assert "conv1_w" in workspace.Blobs()
    workspace.FeedBlob("data", blob)
    workspace.RunNetOnce(predict_net)
    np.testing.assert_allclose(workspace.FetchBlob("softmax"), expected, rtol=1e-5, atol=1e-6)
