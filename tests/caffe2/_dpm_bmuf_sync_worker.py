"""One shard of a 2-host Parallelize_BMUF run with add_blobs_to_sync (started by torchrun from
test_dpm_bmuf_blob_sync.py): shard 0 holds devices 0 and 1, shard 1 devices 2 and 3; a blob
set on shard 0's first device must reach every device of both shards in the global update."""

import json
import os
import sys

import numpy as np

from caffe2.python import core, data_parallel_model, model_helper, workspace

rank = int(os.environ["RANK"])
store_dir = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_dpm_bmuf_blob_sync import _forward, _inputs, _update  # noqa: E402

workspace.RunOperatorOnce(
    core.CreateOperator("FileStoreHandlerCreate", [], ["store_handler"], path=store_dir, prefix="sync")
)
rendezvous = dict(kv_handler="store_handler", shard_id=rank, num_shards=2, engine="GLOO", transport="tcp",
                  interface="", mpi_rendezvous=False, exit_nets=None)  # fmt: skip
devices = [0, 1] if rank == 0 else [2, 3]
model = model_helper.ModelHelper(name="bmuf_sync_shards")
data_parallel_model.Parallelize_BMUF(model, _inputs, _forward, _update, devices=devices, cpu_device=True,
                                     rendezvous=rendezvous, add_blobs_to_sync=["sync_num"])  # fmt: skip
data_parallel_model.RunInitNet(model)
data_parallel_model.RunNet(model, 1)
before = {d: float(workspace.FetchBlob(f"cpu_{d}/sync_num")[0]) for d in devices}
if rank == 0:
    workspace.FeedBlob("cpu_0/sync_num", np.array([2603.0], np.float32))
workspace.RunNetOnce(model._global_model_param_updates_net)
after = {d: float(workspace.FetchBlob(f"cpu_{d}/sync_num")[0]) for d in devices}
sys.stdout.write("RESULT " + json.dumps({"rank": rank, "before": before, "after": after}) + "\n")
sys.stdout.flush()
import torch.distributed as dist  # noqa: E402

dist.destroy_process_group()
