"""TorchDistributedGradientSync on gloo over 127.0.0.1, compared with torch's own all_reduce."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import _torch_workers as TW  # noqa: E402
import torch.multiprocessing as tmp  # noqa: E402

from asyncnet.errors import SyncError  # noqa: E402
from asyncnet.simulate.measure import free_port  # noqa: E402
from asyncnet.sync import TorchDistributedGradientSync  # noqa: E402

pytestmark = pytest.mark.timeout(90)


def test_needs_an_initialized_group():
    with pytest.raises(SyncError, match="init_process_group"):
        TorchDistributedGradientSync()


@pytest.mark.parametrize("world_size", [2, 4])
def test_matches_torch_all_reduce(world_size, tmp_path):
    tmp.spawn(TW.compare_with_torch, args=(world_size, free_port(), str(tmp_path)), nprocs=world_size, join=True)
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(world_size)]
    for d in ranks:
        for i in range(3):
            assert np.allclose(d[f"arr_{i}"], d[f"arr_{i + 3}"], rtol=1e-6, atol=1e-7)
            if world_size == 2:  # a + b is commutative: bit-identical to torch
                assert d[f"arr_{i}"].tobytes() == d[f"arr_{i + 3}"].tobytes()
        assert np.array_equal(d["arr"], np.full(4, (world_size - 1) / 2, np.float32))
        assert d["bcast"].tobytes() == ranks[-1]["arr_0"].tobytes()
        msg = str(d["mismatch"])
        assert f"rank {world_size - 1}: float32[5]" in msg and "rank 0: float32[4]" in msg
        assert not d["bad"].any()
        assert np.array_equal(d["after"], np.full(3, (world_size - 1) / 2, np.float32))
