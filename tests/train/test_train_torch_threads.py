"""Training on torch CPU tensors with two worker threads keeps torch's intra-op pool within the
cores: worker threads x torch threads <= cores (torch.set_num_threads is process-wide)."""

from __future__ import annotations

import pytest

from asyncnet.tensor.threads import process_cores
from asyncnet.train import TrainConfig, train
from asyncnet.train.data import dataset_for
from asyncnet.train.worker import WorkerNets

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("mode", ["sync", "hogwild"])
def test_two_worker_threads_give_torch_one_thread_each_and_restore_it(mode, monkeypatch):
    seen: list[int] = []
    step = WorkerNets.step

    def recording(self, xb, yb):
        seen.append(torch.get_num_threads())
        return step(self, xb, yb)

    monkeypatch.setattr(WorkerNets, "step", recording)
    before = torch.get_num_threads()
    cfg = TrainConfig(model="mlp", mode=mode, workers=2, tensor="torch", epochs=1, seed=0, trace=False)
    train(cfg, dataset_for("mlp"))
    assert seen, "no step ran"
    assert max(seen) * 2 <= max(process_cores(), 2)
    assert max(seen) == 1  # torch's spinning pool gets one thread beside executor workers unless asked
    assert torch.get_num_threads() == before
