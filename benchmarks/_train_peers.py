"""The peers of ``python -m benchmarks train``: what a user would write instead of asyncnet, on the same
MLP, data, batches (:func:`asyncnet.train.data.epoch_batches`, same seed) and initial weights
(the asyncnet model's init net): a hand-written numpy loop (the floor) and plain PyTorch eager.

Each returns the same figures as :func:`benchmarks.train.measure`: samples/s over the epochs
after the first (training steps only) and the test accuracy after each epoch.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["numpy_loop", "torch_eager"]


def _setup(settings: dict[str, Any]) -> tuple[Any, list[np.ndarray], int]:
    """The data set, the initial [W1, b1, W2, b2, ...] of the asyncnet model, and its layer count."""
    import asyncnet as an
    from asyncnet.model.zoo import mlp
    from asyncnet.train import Program
    from asyncnet.train.data import load_digits

    ds = load_digits()
    model = Program(mlp(ds.input_dim, tuple(settings["hidden"]), ds.num_classes, seed=0), lr=settings["lr"])
    with an.Workspace() as ws:
        ws.run_net_once(model.init_net)
        params = [np.array(ws.fetch(p), copy=True) for p in model.params]
    return ds, params, len(params) // 2


def _row(name: str, seconds: list[float], samples: list[int], accs: list[float]) -> dict[str, Any]:
    steady_s, steady_n = sum(seconds[1:]) or sum(seconds), sum(samples[1:]) or sum(samples)
    return {
        "mode": name,
        "backend": "-",
        "workers": 1,
        "samples_per_sec": steady_n / steady_s if steady_s else 0.0,
        "best_test_accuracy": max(accs),
        "final_test_accuracy": accs[-1],
        "test_accuracy_per_epoch": [round(a, 4) for a in accs],
    }


def numpy_loop(settings: dict[str, Any]) -> dict[str, Any]:
    """Hand-written numpy forward, backward and SGD step of the MLP (ReLU, softmax cross-entropy)."""
    from asyncnet.train.data import epoch_batches

    ds, params, layers = _setup(settings)
    lr, seconds, samples, accs = settings["lr"], [], [], []

    def forward(x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        acts = [x]
        for i in range(layers):
            h = acts[-1] @ params[2 * i].T + params[2 * i + 1]
            acts.append(np.maximum(h, 0) if i < layers - 1 else h)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        e = np.exp(z)
        return acts, e / e.sum(axis=1, keepdims=True)

    for epoch in range(1, settings["epochs"] + 1):
        t, n = 0.0, 0
        for xb, yb in epoch_batches(ds.x_train, ds.y_train, settings["batch_size"], epoch, 0):
            start = time.perf_counter()
            acts, p = forward(xb)
            d = p
            d[np.arange(len(yb)), yb] -= 1
            d *= np.float32(1 / len(yb))
            for i in reversed(range(layers)):
                w = params[2 * i]
                dw, db = d.T @ acts[i], d.sum(axis=0)
                if i:
                    d = (d @ w) * (acts[i] > 0)
                w -= lr * dw
                params[2 * i + 1] -= lr * db
            t += time.perf_counter() - start
            n += len(yb)
        seconds.append(t)
        samples.append(n)
        accs.append(float(np.mean(np.argmax(forward(ds.x_test)[1], axis=1) == ds.y_test)))
    return _row("numpy loop", seconds, samples, accs)


def torch_eager(settings: dict[str, Any]) -> dict[str, Any]:
    """Plain PyTorch: nn.Linear + ReLU, F.cross_entropy, autograd, torch.optim.SGD."""
    import torch
    from torch import nn

    from asyncnet.train.data import epoch_batches

    ds, params, layers = _setup(settings)
    mods: list[Any] = []
    for i in range(layers):
        lin = nn.Linear(params[2 * i].shape[1], params[2 * i].shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(params[2 * i]))
            lin.bias.copy_(torch.from_numpy(params[2 * i + 1]))
        mods += [lin, nn.ReLU()] if i < layers - 1 else [lin]
    model = nn.Sequential(*mods)
    opt = torch.optim.SGD(model.parameters(), lr=settings["lr"])
    loss_fn = nn.CrossEntropyLoss()
    x_test, seconds, samples, accs = torch.from_numpy(ds.x_test), [], [], []
    for epoch in range(1, settings["epochs"] + 1):
        t, n = 0.0, 0
        for xb, yb in epoch_batches(ds.x_train, ds.y_train, settings["batch_size"], epoch, 0):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(torch.from_numpy(xb)), torch.from_numpy(yb).long())
            loss.backward()
            opt.step()
            t += time.perf_counter() - start
            n += len(yb)
        seconds.append(t)
        samples.append(n)
        with torch.no_grad():
            accs.append(float((model(x_test).argmax(dim=1).numpy() == ds.y_test).mean()))
    return _row("torch eager", seconds, samples, accs)
