"""One trainer worker (its workspace and train net) for a zoo model, as the trainers build it.

>>> callable(zoo_worker)
True
"""

from __future__ import annotations

from typing import Any


def zoo_worker(model: str, tensor: str, net_type: str, steps: int) -> tuple[Any, list[tuple[Any, Any]], int]:
    """(WorkerNets, the first ``steps`` batches of epoch 1, batch size) for ``model`` in local mode
    with one BLAS/torch thread: batch 32 (dlrm: 128 on a 20,000-click log)."""
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import dataset_for, epoch_batches, load_clicks
    from asyncnet.train.program import build_program
    from asyncnet.train.worker import WorkerNets

    ds = load_clicks(20000, 1000) if model == "dlrm" else dataset_for(model)
    bs = 128 if model == "dlrm" else 32
    cfg = TrainConfig(
        model=model,
        mode="local",
        workers=1,
        tensor=tensor,
        net_type=net_type,
        seed=0,
        trace=False,
        threads=1,
        batch_size=bs,
    )
    worker = WorkerNets(
        cfg, build_program(cfg, ds.input_dim, ds.num_classes), feeds=ds.feeds if model == "dlrm" else None
    )
    return worker, list(epoch_batches(ds.x_train, ds.y_train, bs, 1, 0))[:steps], bs
