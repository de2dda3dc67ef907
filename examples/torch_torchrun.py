"""Data-parallel training of a PyTorch model under torchrun, through asyncnet's
TorchDistributedGradientSync (gloo on CPU; the same code runs nccl on GPUs, and across
machines with torchrun's --nnodes / --rdzv-endpoint).

    torchrun --nproc-per-node 2 examples/torch_torchrun.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from asyncnet.sync import TorchDistributedGradientSync
from asyncnet.torch import sync_module_gradients
from asyncnet.train.data import epoch_batches, load_digits, shard


def main(epochs: int = 10, batch_size: int = 32, lr: float = 0.2) -> None:
    dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from torchrun
    try:
        sync = TorchDistributedGradientSync()
        torch.set_num_threads(1)
        torch.manual_seed(0)  # every rank starts from the same weights
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        ds = load_digits()
        for epoch in range(epochs):
            for xb, yb in epoch_batches(ds.x_train, ds.y_train, batch_size, epoch, multiple_of=sync.num_workers):
                x, y = shard(xb, yb, sync.num_workers, sync.worker_id)
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long()).backward()
                sync_module_gradients(model, sync)
                opt.step()
        with torch.no_grad():
            acc = (model(torch.from_numpy(ds.x_test)).argmax(dim=1).numpy() == ds.y_test).mean()
        print(f"rank {sync.worker_id}/{sync.num_workers}: test accuracy {acc:.2%}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
