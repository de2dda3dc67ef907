"""Training steps on torch CPU tensors with and without op routing (asyncnet.tensor.route), beside numpy arrays.

    python benchmarks/torch_route.py [--model mlp,cnn,lstm,dlrm] [--rounds 7] [--steps 30]

One worker per library (the trainers' WorkerNets, local mode, straight executor, one BLAS and
one torch thread); each round runs ``--steps`` steps on numpy arrays, on torch tensors with
routing (each op on the library measured faster for it) and on torch tensors with every op on
torch's own kernel (:data:`asyncnet.tensor.route.ENABLED` off for that row), interleaved; the
medians of the rounds after the first and their ratio to numpy are printed with the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp,cnn,lstm,dlrm")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)
    import torch

    from asyncnet.tensor import route
    from asyncnet.train.data import dataset_for, epoch_batches, load_clicks
    from asyncnet.train.trainers import TrainConfig
    from asyncnet.train.trainers._common import WorkerNets, build_model

    torch.set_num_threads(1)
    for m in args.model.split(","):
        ds = load_clicks(20000, 1000) if m == "dlrm" else dataset_for(m)
        bs = 128 if m == "dlrm" else 32
        batches = list(epoch_batches(ds.x_train, ds.y_train, bs, 1, 0))[:args.steps]
        workers = {}
        for t in ("numpy", "torch"):
            cfg = TrainConfig(model=m, mode="local", workers=1, tensor=t, net_type="straight", seed=0, trace=False,
                              threads=1, batch_size=bs)
            workers[t] = WorkerNets(cfg, build_model(cfg, ds.input_dim, ds.num_classes), feeds=ds.feeds if m == "dlrm" else None)
        speed: dict[str, list[float]] = {"numpy": [], "torch routed": [], "torch own kernels": []}
        try:
            for r in range(args.rounds + 1):
                for row in speed:
                    w = workers["numpy" if row == "numpy" else "torch"]
                    route.ENABLED = row != "torch own kernels"
                    start = time.perf_counter()
                    for xb, yb in batches:
                        w.step(xb, yb)
                    if r:
                        speed[row].append(len(batches) * bs / (time.perf_counter() - start))
        finally:
            route.ENABLED = True
            for w in workers.values():
                w.close()
        base = statistics.median(speed["numpy"])
        print(f"{m:<5} " + "  ".join(f"{k} {statistics.median(v):>9,.0f} ({statistics.median(v) / base:.2f}x)"
                                     for k, v in speed.items()))
    print("samples/s, medians of interleaved rounds; load " + " ".join(open("/proc/loadavg").read().split()[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
