"""Data-parallel training of a PyTorch model with asyncnet's threaded gradient sync.

Two worker threads each hold a replica of the same torch model, train on their half of every
batch of the embedded digits, and average gradients with one call after backward:
``sync_module_gradients(model, sync)``. The replicas stay identical, so worker 0's model is the
result.

    python examples/torch_threads.py            # or: --workers 4 --backend processes
"""

from __future__ import annotations

import argparse

import torch

from asyncnet.sync import run_parallel_workers
from asyncnet.torch import sync_module_gradients
from asyncnet.train.data import epoch_batches, load_digits, shard


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def worker(sync, models: list[torch.nn.Module], epochs: int, batch_size: int, lr: float) -> float:
    """Train replica ``sync.worker_id`` on its shard of every batch; return the test accuracy."""
    ds = load_digits()
    model = models[sync.worker_id]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        for xb, yb in epoch_batches(ds.x_train, ds.y_train, batch_size, epoch, seed=0, multiple_of=sync.num_workers):
            x, y = shard(xb, yb, sync.num_workers, sync.worker_id)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long()).backward()
            sync_module_gradients(model, sync)  # every gradient averaged over the workers, one bucket
            opt.step()
    with torch.no_grad():
        pred = model(torch.from_numpy(ds.x_test)).argmax(dim=1).numpy()
    return float((pred == ds.y_test).mean())


def _process_worker(epochs: int, batch_size: int, lr: float, sync) -> float:
    torch.set_num_threads(1)  # one core per worker process
    return worker(sync, {sync.worker_id: make_model()}, epochs, batch_size, lr)  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backend", choices=("threads", "processes"), default="threads")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.2)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.backend == "threads":
        models = [make_model() for _ in range(a.workers)]  # made up front: torch's RNG is global
        fn = lambda sync: worker(sync, models, a.epochs, a.batch_size, a.lr)
    else:
        from functools import partial

        fn = partial(_process_worker, a.epochs, a.batch_size, a.lr)
    accuracies = run_parallel_workers(a.workers, fn, backend=a.backend, timeout=120)
    print(f"{a.workers} {a.backend} workers, test accuracy per replica: {', '.join(f'{x:.2%}' for x in accuracies)}")


if __name__ == "__main__":
    main()
