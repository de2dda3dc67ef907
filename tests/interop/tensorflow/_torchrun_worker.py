"""One rank of test_torch_distributed_backend: sync_gradients and broadcast_variables through
TorchDistributedGradientSync (gloo), eagerly and inside a tf.function; prints its results."""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import torch.distributed as dist

from asyncnet.sync.torch_dist import TorchDistributedGradientSync
from asyncnet.tensorflow import broadcast_variables, limit_threads, sync_gradients

dist.init_process_group("gloo")
sync = TorchDistributedGradientSync()
limit_threads()  # process_cores() is already this rank's share of the host
import tensorflow as tf

r = sync.worker_id
grads = [
    tf.constant([1.0 + r, 2.0]),
    None,
    tf.constant([r], tf.bfloat16),
    tf.IndexedSlices(tf.constant([[1.0, 1.0]]), tf.constant([r]), tf.constant([3, 2])),
]
out = sync_gradients(grads, sync)
in_graph = tf.function(lambda a: sync_gradients([a], sync)[0])(tf.constant([float(r)], tf.float64))
v = tf.Variable([float(r + 5)])
broadcast_variables([v], sync)
result = json.dumps(
    {
        "rank": r,
        "dense": out[0].numpy().tolist(),
        "none": out[1] is None,
        "bf16": out[2].dtype.name,
        "bf16_value": float(out[2].numpy()[0]),
        "slices": out[3].numpy().tolist(),
        "graph": in_graph.numpy().tolist(),
        "var": v.numpy().tolist(),
    }
)
print(f"RESULT {result}", flush=True)  # one write: the ranks share the pipe
dist.destroy_process_group()
