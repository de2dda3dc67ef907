"""Rank functions for the torch.distributed tests (run by torch.multiprocessing.spawn)."""

import os

import numpy as np


def init(rank, world_size, port):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)


def compare_with_torch(rank, world_size, port, out_dir):
    import torch
    import torch.distributed as dist

    from asyncnet.errors import SyncMismatchError
    from asyncnet.sync import TorchDistributedGradientSync

    init(rank, world_size, port)
    try:
        gen = torch.Generator().manual_seed(rank)
        tensors = [
            torch.randn(1000, generator=gen),
            torch.randn(3, 5, generator=gen),
            torch.randn(7, generator=gen).double(),
        ]
        reference = [t.clone() for t in tensors]
        for t in reference:
            dist.all_reduce(t)
            t.div_(world_size)
        sync = TorchDistributedGradientSync(bucket_mb=0.001)  # tiny buckets: several per call
        assert sync.num_workers == world_size and sync.worker_id == rank and sync.is_distributed
        sync.sync_gradients(tensors)
        arr = np.full(4, float(rank), np.float32)
        sync.sync_gradients(arr)  # numpy arrays work too
        mine = [t.clone() for t in tensors]
        sync.broadcast(mine, root=world_size - 1)
        # mismatch: last rank passes another shape
        bad = torch.zeros(5 if rank == world_size - 1 else 4)
        try:
            sync.sync_gradients(bad)
            mismatch = "no error"
        except SyncMismatchError as exc:
            mismatch = str(exc)
        after = torch.full((3,), float(rank))
        sync.sync_gradients(after)
        np.savez(
            os.path.join(out_dir, f"rank{rank}.npz"),
            *[t.numpy() for t in tensors],
            *[t.numpy() for t in reference],
            arr=arr,
            bcast=mine[0].numpy(),
            mismatch=np.array(mismatch),
            bad=bad.numpy(),
            after=after.numpy(),
        )
    finally:
        dist.destroy_process_group()
