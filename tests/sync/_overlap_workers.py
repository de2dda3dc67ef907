"""Worker functions for the overlap tests (module level: processes and torch ranks import them)."""

import os

import numpy as np

STEPS = 4
DIMS = dict(input_dim=16, hidden=(48, 32), num_classes=5)


def batches(worker, steps=STEPS, size=12):
    rng = np.random.default_rng(100 + worker)
    return [
        (
            rng.standard_normal((size, DIMS["input_dim"])).astype(np.float32),
            rng.integers(0, DIMS["num_classes"], size).astype(np.int32),
        )
        for _ in range(steps)
    ]


def train_steps(sync, bucket_mb, optimizer="momentum"):
    """``STEPS`` data-parallel steps of a small MLP on this worker's batches; its parameters."""
    import asyncnet as an
    from asyncnet.core.bound import bound_flat, is_bound
    from asyncnet.train import MLP

    model = MLP(**DIMS, optimizer=optimizer, lr=0.1, seed=3, net_type="async_scheduling", num_workers=2)
    ws = an.Workspace()
    try:
        ws.run_net_once(model.init_net)
        ws.feed("sync", sync)
        net_def = model.train_net("train", sync_blob="sync", bucket_mb=bucket_mb).to_def()
        net_def.own_pool = True
        ws.create_net(net_def)
        for x, y in batches(sync.worker_id):
            ws.feed("data", x)
            ws.feed("label", y)
            ws.run_net("train", timeout=60)
        out = {p: ws.fetch(p).copy() for p in model.params}
        if bucket_mb is not None:  # the gradients stayed views of one flat buffer (bucket_view)
            grads = [ws.fetch(model.grads[p]) for p in model.params]
            out["bound"] = np.array([is_bound(g) for g in grads] + [bound_flat(grads[::-1]) is not None])
        return out
    finally:
        ws.close()


def overlap_and_not(sync):
    """(params with tiny buckets, with one bucket of every gradient, with one Allreduce at the end)
    on one worker."""
    return train_steps(sync, 0.002), train_steps(sync, 1.0), train_steps(sync, None)


def torch_rank(rank, world_size, port, out_dir):
    import torch.distributed as dist

    from asyncnet.sync import TorchDistributedGradientSync

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        sync = TorchDistributedGradientSync()
        over, whole, plain = overlap_and_not(sync)
        np.savez(
            os.path.join(out_dir, f"rank{rank}.npz"),
            **{f"over_{k}": v for k, v in over.items()},
            **{f"whole_{k}": v for k, v in whole.items()},
            **{f"plain_{k}": v for k, v in plain.items()},
        )
    finally:
        dist.destroy_process_group()


def threads_x_ranks(rank, world_size, port, out_dir):
    """One rank of ``train(backend="torch", threads_per_rank=2)``; rank 0 saves its parameters."""
    import torch.distributed as dist

    from asyncnet.train.trainers import TrainConfig, train

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        res = train(TrainConfig(mode="sync", backend="torch", threads_per_rank=2, epochs=1, trace=False, timeout=60))
        np.savez(
            os.path.join(out_dir, f"rank{rank}.npz"),
            workers=res.config.workers,
            steps=res.steps,
            **res.params if rank == 0 else {},
        )
    finally:
        dist.destroy_process_group()
