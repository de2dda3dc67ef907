"""A TensorFlow function as an operator: a convolution branch in TensorFlow beside a native
fully connected branch, trained together in one async_scheduling net.

asyncnet has no convolution op yet; ``tf.nn.conv2d`` does it inside a ``TFFunction`` op, which
the async scheduler runs in parallel with the native branch. ``add_gradient_ops`` derives the
backward net: the TFFunction's gradient is ``TFFunctionGradient``, which re-runs the function
under ``tf.GradientTape``. The NetDef stores only the function's registered name.

    python examples/tensorflow_in_net.py             # or: --iters 300
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info lines

import numpy as np
import tensorflow as tf

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.tensorflow import limit_threads, register_function
from asyncnet.train.data import load_digits


@tf.function(reduce_retracing=True)
def conv_features(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """[N, 64] digits -> 3x3 convolution with 4 filters, ReLU, 2x2 max pool -> [N, 64]."""
    images = tf.reshape(x, [-1, 8, 8, 1])
    h = tf.nn.relu(tf.nn.conv2d(images, kernel, strides=1, padding="SAME"))
    return tf.reshape(tf.nn.max_pool2d(h, 2, 2, "VALID"), [-1, 4 * 4 * 4])


def forward(net: an.Net) -> an.Net:
    """logits = FC(conv_features(x)) + FC(x): a TensorFlow branch and a native one, which the
    async scheduler runs in parallel."""
    net.TFFunction(["x", "kernel"], ["feat"], function="conv_features")
    net.FC(["feat", "w_conv", "b_conv"], "logits_conv")
    net.FC(["x", "w_fc", "b_fc"], "logits_fc")
    net.Add(["logits_conv", "logits_fc"], "logits")
    return net


def build() -> tuple[an.Net, an.Net, an.Net]:
    """The init net (parameters), the train net (forward, backward, SGD) and the eval net."""
    init = an.Net("init")
    init.GaussianFill([], "kernel", shape=[3, 3, 1, 4], std=0.3, seed=1)
    init.XavierFill([], "w_conv", shape=[10, 64], seed=2)
    init.ConstantFill([], "b_conv", shape=[10], value=0.0)
    init.XavierFill([], "w_fc", shape=[10, 64], seed=3)
    init.ConstantFill([], "b_fc", shape=[10], value=0.0)
    init.ConstantFill([], "lr", shape=[1], value=0.1)
    train = forward(an.Net("train", type="async_scheduling", num_workers=2))
    train.SoftmaxWithLoss(["logits", "label"], ["prob", "loss"])
    params = ["kernel", "w_conv", "b_conv", "w_fc", "b_fc"]
    grads = add_gradient_ops(train, "loss", wrt=params)
    for p in params:
        train.SGD([p, grads[p], "lr"], p)
    return init, train, forward(an.Net("eval", type="async_scheduling", num_workers=2))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    a = p.parse_args()
    limit_threads(intra_op=1, inter_op=1)  # the net's 2 executor workers are the parallelism: 2 threads, 2 cores
    register_function("conv_features", conv_features)  # before a net naming it is created
    ds = load_digits()
    init, train, evaluate = build()
    ws = an.Workspace()
    ws.run_net_once(init)
    ws.create_net(train)
    rng = np.random.default_rng(1)
    for it in range(a.iters):
        idx = rng.choice(len(ds.x_train), a.batch_size, replace=False)
        ws.feed("x", ds.x_train[idx])
        ws.feed("label", ds.y_train[idx].astype(np.int64))
        ws.run_net("train")
        if it % 50 == 0 or it == a.iters - 1:
            print(f"iter {it:4d}  loss {float(ws.fetch('loss')):.4f}")
    ws.feed("x", ds.x_test)
    ws.run_net_once(evaluate)
    print(f"test accuracy: {float((ws.fetch('logits').argmax(axis=1) == ds.y_test).mean()):.2%}")


if __name__ == "__main__":
    main()
