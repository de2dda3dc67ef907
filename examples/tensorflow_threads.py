"""Data-parallel training of a Keras model by worker threads, through asyncnet's threaded sync.

Each worker thread holds a replica of the same Keras model, compiled with
``SyncOptimizer(optimizer, sync)``, and runs plain ``model.fit`` on its shard of every batch of
the embedded digits. The optimizer averages the gradients over the workers before each update,
so the replicas stay identical (``broadcast_variables`` starts them from worker 0's weights).

    python examples/tensorflow_threads.py            # or: --workers 4 --epochs 20
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info lines

import keras
import numpy as np

from asyncnet.sync import run_parallel_workers
from asyncnet.tensorflow import SyncOptimizer, broadcast_variables, limit_threads
from asyncnet.train.data import epoch_batches, load_digits, shard


def make_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])


def my_shard_of_every_batch(x, y, batch_size: int, epoch: int, world_size: int, rank: int):
    """This worker's share of each batch of the epoch, concatenated: ``fit`` with ``batch_size //
    world_size`` and no shuffle then takes exactly one step per global batch, as its peers do."""
    parts = [
        shard(xb, yb, world_size, rank) for xb, yb in epoch_batches(x, y, batch_size, epoch, multiple_of=world_size)
    ]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def train(sync, model: keras.Model, epochs: int, batch_size: int, lr: float) -> float:
    """Train ``model`` as worker ``sync.worker_id``; return its test accuracy."""
    ds = load_digits()
    broadcast_variables(model, sync)  # every replica starts from worker 0's weights
    model.compile(
        optimizer=SyncOptimizer(keras.optimizers.SGD(lr), sync),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    for epoch in range(epochs):
        x, y = my_shard_of_every_batch(ds.x_train, ds.y_train, batch_size, epoch, sync.num_workers, sync.worker_id)
        model.fit(x, y, batch_size=batch_size // sync.num_workers, epochs=1, shuffle=False, verbose=0)
    pred = np.asarray(model(ds.x_test)).argmax(axis=1)
    return float((pred == ds.y_test).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args()
    limit_threads(a.workers, backend="threads")  # before TensorFlow runs anything
    models = [make_model(seed=w) for w in range(a.workers)]  # made up front: Keras' seeding is global
    accuracies = run_parallel_workers(
        a.workers, lambda sync: train(sync, models[sync.worker_id], a.epochs, a.batch_size, a.lr), timeout=120
    )
    print(f"{a.workers} thread workers, test accuracy per replica: {', '.join(f'{x:.2%}' for x in accuracies)}")


if __name__ == "__main__":
    main()
