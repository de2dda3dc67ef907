"""PyTorch interop: average an ``nn.Module``'s gradients through any GradientSync.

torch is optional: it is imported only when these functions run, so ``import asyncnet`` works
without it. Call :func:`sync_module_gradients` after ``loss.backward()`` and before
``optimizer.step()``, in every worker, with that worker's sync::

    from asyncnet.sync import run_parallel_workers
    from asyncnet.interop.torch import sync_module_gradients

    def worker(sync):
        model = make_model(seed=0)                 # same initial weights everywhere
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for xb, yb in my_shard_of_every_batch(sync.worker_id, sync.num_workers):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            sync_module_gradients(model, sync)     # one all-reduce for all parameters
            opt.step()
        return model.state_dict()

    states = run_parallel_workers(2, worker)     # or backend="processes"; or under torchrun with
                                                 # TorchDistributedGradientSync

The gradients of all parameters go to the sync as one list, i.e. one flat bucket, so a round
costs one barrier however many parameters the module has. Parameters that did not get a
gradient in this step (unused branches) get zeros first, so every worker contributes the same
layout, which is what DistributedDataParallel does too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sync_module_gradients", "module_gradients"]


def module_gradients(module: Any) -> list[Any]:
    """The gradient tensors of ``module``'s trainable parameters, in ``parameters()`` order;
    a parameter without a gradient gets a zero one (allocated once, then reused by torch)."""
    import torch

    if not hasattr(module, "parameters"):
        raise TypeError(f"expected a torch.nn.Module, got {type(module).__name__}")
    grads = []
    for p in module.parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    return grads


def sync_module_gradients(module: Any, sync: Any) -> None:
    """Replace every parameter gradient of ``module`` with its mean over ``sync``'s workers.

    ``sync`` is any :class:`asyncnet.sync.GradientSync` (local, threads, processes,
    torch.distributed). All gradients go in one call, so they are reduced as one bucket; the
    reduction is in place, so ``optimizer.step()`` afterwards sees the averaged values.
    Errors of the sync (a shape mismatch between workers, a timeout, an abort) are raised
    unchanged.
    """
    grads = module_gradients(module)
    if not grads or sync.num_workers == 1:
        return
    sync.sync_gradients(grads)
