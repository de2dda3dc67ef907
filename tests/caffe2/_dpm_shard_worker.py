"""One shard of a 2-host data_parallel_model run (started by torchrun from test_dpm_multihost.py):
a linear model, each shard reading its half of a fixed batch, parameters initialized at random
(so only the init net's Broadcast can make the shards agree), three SGD steps."""

import json
import os
import sys

import numpy as np

from caffe2.python import brew, core, data_parallel_model, model_helper, optimizer, workspace

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
mode, store_dir = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
data = rng.standard_normal((8, 3)).astype(np.float32)
labels = rng.standard_normal((8, 1)).astype(np.float32)
per = len(data) // world

kv_handler = None
if mode in ("store", "bmuf"):  # as resnet50_trainer does with --file_store_path
    workspace.RunOperatorOnce(
        core.CreateOperator("FileStoreHandlerCreate", [], ["store_handler"], path=store_dir, prefix="run")
    )
    kv_handler = "store_handler"
rendezvous = dict(kv_handler=kv_handler, shard_id=rank, num_shards=world, engine="GLOO", transport="tcp",
                  interface="", mpi_rendezvous=False, exit_nets=None)  # fmt: skip


def inputs(model):
    workspace.FeedBlob(core.ScopedName("data"), data[rank * per : (rank + 1) * per])
    workspace.FeedBlob(core.ScopedName("label"), labels[rank * per : (rank + 1) * per])


def forward(model, loss_scale):
    fc = brew.fc(model, "data", "fc", 3, 1, weight_init=("GaussianFill", {"std": 1.0}),
                 bias_init=("GaussianFill", {"std": 1.0}))  # fmt: skip
    dist = model.SquaredL2Distance([fc, "label"], "dist")
    return [model.Scale(model.AveragedLoss(dist, "avg"), "loss", scale=loss_scale)]


def _report(result):
    """One write of the whole line: the two ranks share the launcher's pipe."""
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def run_bmuf():
    """Two BMUF blocks of 2 local SGD steps, each shard on its half of test_dpm_bmuf's batch."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_dpm_bmuf import _forward, _update

    bmuf_rng = np.random.default_rng(26)
    full = bmuf_rng.random((64, 16))
    half = slice(rank * 32, (rank + 1) * 32)
    workspace.FeedBlob("cpu_0/data", full[half].astype(np.float32))
    workspace.FeedBlob("cpu_0/label", np.round(full[half, 0]).astype(np.float32).reshape(-1, 1))
    model = model_helper.ModelHelper(name="bmuf_shards")
    data_parallel_model.Parallelize_BMUF(model, lambda m: None, _forward, _update, devices=[0], cpu_device=True,
                                         rendezvous=rendezvous, nesterov=True)  # fmt: skip
    data_parallel_model.RunInitNet(model)
    for _ in range(2):
        data_parallel_model.RunNet(model, 2)
    data_parallel_model.Synchronize(model)
    out = {
        "rank": rank,
        "w": workspace.FetchBlob("cpu_0/fc_w").tolist(),
        "b": workspace.FetchBlob("cpu_0/fc_b").tolist(),
    }
    _report(out)


if mode == "bmuf":
    run_bmuf()
    import torch.distributed as dist

    dist.destroy_process_group()
    sys.exit(0)

m = model_helper.ModelHelper(name="dpm_shards")
data_parallel_model.Parallelize(m, inputs, forward, optimizer_builder_fun=lambda model: optimizer.build_sgd(model, 0.1),
                                devices=[0], cpu_device=True, rendezvous=rendezvous)  # fmt: skip
workspace.RunNetOnce(m.param_init_net)
w0, b0 = workspace.FetchBlob("cpu_0/fc_w").tolist(), workspace.FetchBlob("cpu_0/fc_b").tolist()
workspace.CreateNet(m.net)
for _ in range(3):
    workspace.RunNet(m.net)
result = {
    "rank": rank,
    "w0": w0,
    "b0": b0,
    "w": workspace.FetchBlob("cpu_0/fc_w").tolist(),
    "b": workspace.FetchBlob("cpu_0/fc_b").tolist(),
    "ops": [op.type for op in m.net.Proto().op],
    "init_ops": [op.type for op in m.param_init_net.Proto().op],
}
_report(result)
import torch.distributed as dist  # noqa: E402

dist.destroy_process_group()
