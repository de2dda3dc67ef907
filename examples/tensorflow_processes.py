"""Data-parallel training of a Keras model by worker processes (shared-memory gradient sync).

The same training as ``tensorflow_threads.py``, with ``backend="processes"``: each worker is a
process with its own TensorFlow, whose thread pools ``limit_threads`` sizes to its share of the
cores before TensorFlow runs anything (workers x TensorFlow threads <= cores). The parent never
imports TensorFlow. Under ``torchrun``, the same ``train`` works with a
``TorchDistributedGradientSync``.

    python examples/tensorflow_processes.py          # or: --workers 4 --epochs 20
"""

from __future__ import annotations

import argparse
import os
from functools import partial

from asyncnet.sync import run_parallel_workers


def worker(epochs: int, batch_size: int, lr: float, sync) -> tuple[float, tuple[int, int]]:
    """One worker process: size TensorFlow's pools, train, return (test accuracy, pool sizes)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from asyncnet.tensorflow import limit_threads

    pools = limit_threads(sync.num_workers, backend="processes")  # before TensorFlow runs anything

    from tensorflow_threads import make_model, train  # the training itself is the threads example's

    return train(sync, make_model(seed=sync.worker_id), epochs, batch_size, lr), pools


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args()
    results = run_parallel_workers(
        a.workers, partial(worker, a.epochs, a.batch_size, a.lr), backend="processes", timeout=120
    )
    intra, inter = results[0][1]
    print(f"TensorFlow threads per worker process: intra-op {intra}, inter-op {inter}")
    print(f"{a.workers} process workers, test accuracy per replica: {', '.join(f'{acc:.2%}' for acc, _ in results)}")


if __name__ == "__main__":
    main()
