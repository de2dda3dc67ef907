"""MNIST-format LMDB databases for tests: records as Caffe2's make_mnist_db wrote them (a
TensorProtos of a BYTE image [1, 28, 28] and an INT32 scalar label, keys "%08d"), holding
synthetic digits: class k is a bright 7x7 block at a place of its own, plus noise."""

from __future__ import annotations

import numpy as np

from caffe2.proto import caffe2_pb2


def synthetic_digits(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.int32)
    images = rng.integers(0, 60, (n, 1, 28, 28)).astype(np.uint8)
    for i, k in enumerate(labels):
        r, c = 2 + (k // 5) * 13, 1 + (k % 5) * 5
        images[i, 0, r : r + 7, c : c + 5] = rng.integers(180, 256, (7, 5))
    return images, labels


def write_mnist_lmdb(path: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    import lmdb

    images, labels = synthetic_digits(n, seed)
    env = lmdb.open(path, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(n):
            protos = caffe2_pb2.TensorProtos()
            data = protos.protos.add(data_type=caffe2_pb2.TensorProto.BYTE, dims=[1, 28, 28])
            data.byte_data = images[i].tobytes()
            label = protos.protos.add(data_type=caffe2_pb2.TensorProto.INT32)
            label.int32_data.append(int(labels[i]))
            txn.put(f"{i:08d}".encode("ascii"), protos.SerializeToString())
    env.close()
    return images, labels
