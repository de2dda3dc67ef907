"""asyncnet.torch.sync_module_gradients against gradients averaged by hand with torch autograd."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from asyncnet.sync import LocalGradientSync, ThreadedGradientSync, run_parallel_workers  # noqa: E402
from asyncnet.torch import module_gradients, sync_module_gradients  # noqa: E402


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _data(worker: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + worker)  # a private generator: safe in threads
    return torch.randn(5, 8, generator=g), torch.randint(0, 3, (5,), generator=g)


def _grads_of(worker: int) -> list[torch.Tensor]:
    model = _model()
    x, y = _data(worker)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, 3])
def test_threaded_sync_matches_hand_average(workers: int) -> None:
    reference = [sum(gs) / workers for gs in zip(*(_grads_of(w) for w in range(workers)))]

    models = [_model() for _ in range(workers)]  # torch's global RNG is not for threads to share

    def worker(sync):
        model = models[sync.worker_id]
        x, y = _data(sync.worker_id)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        sync_module_gradients(model, sync)
        return [p.grad.clone() for p in model.parameters()]

    results = run_parallel_workers(workers, worker, timeout=30)
    for grads in results:
        for got, want in zip(grads, reference):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    for grads in results[1:]:  # every worker holds the very same bits
        for a, b in zip(grads, results[0]):
            assert torch.equal(a, b)


@pytest.mark.timeout(60)
def test_training_with_synced_gradients_equals_full_batch_training() -> None:
    """Two workers on half batches each, synced, take the same steps as one worker on the full batch."""
    xs = [_data(w) for w in range(2)]
    full_x, full_y = torch.cat([x for x, _ in xs]), torch.cat([y for _, y in xs])
    ref = _model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(full_x), full_y).backward()
        opt.step()

    models = [_model() for _ in range(2)]

    def worker(sync):
        model = models[sync.worker_id]
        o = torch.optim.SGD(model.parameters(), lr=0.5)
        x, y = xs[sync.worker_id]
        for _ in range(3):
            o.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            sync_module_gradients(model, sync)
            o.step()
        return [p.detach().clone() for p in model.parameters()]

    for params in run_parallel_workers(2, worker, timeout=30):
        for got, want in zip(params, ref.parameters()):
            torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)


def test_unused_parameters_get_zero_gradients_and_frozen_ones_are_skipped() -> None:
    model = _model()
    model[0].weight.requires_grad_(False)
    grads = module_gradients(model)
    assert len(grads) == 3 and all(float(g.abs().sum()) == 0.0 for g in grads)
    sync_module_gradients(model, LocalGradientSync())


def test_rejects_a_non_module() -> None:
    with pytest.raises(TypeError, match="nn.Module"):
        sync_module_gradients(object(), LocalGradientSync())
    sync = ThreadedGradientSync.new_workers(1)[0]
    sync_module_gradients(_model(), sync)
