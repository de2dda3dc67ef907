"""While one thread imports torch, another sees ``torch`` in sys.modules without ``torch.Tensor``
yet: the type checks say "not a tensor" (none can exist yet) instead of raising AttributeError
("partially initialized module 'torch'"), as a cnn trained on two threads did."""

import sys
import types

import numpy as np
import pytest

from asyncnet.tensor import namespace as ns

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def torch_being_imported(monkeypatch):
    partial = types.ModuleType("torch")
    partial.__spec__ = types.SimpleNamespace(name="torch", _initializing=True)
    monkeypatch.setitem(sys.modules, "torch", partial)
    monkeypatch.setattr(ns, "_TENSOR", None)
    return partial


def test_type_checks_treat_a_torch_being_imported_as_not_imported(torch_being_imported):
    x = np.zeros(3, np.float32)
    assert ns.loaded_torch() is None
    assert ns.is_torch(x) is False
    assert ns.cpu_tensors(x) is False
    assert ns.namespace(None, x, np.ones(3)) is ns.NUMPY


def test_an_op_runs_on_numpy_while_torch_is_being_imported(torch_being_imported):
    import asyncnet as an

    with an.Workspace() as ws:
        ws.feed("x", np.arange(6, dtype=np.float32))
        net = an.Net("n")
        net.Reshape("x", ["y", "old_shape"], shape=[2, 3])
        ws.run_net_once(net)
        assert ws.fetch("y").shape == (2, 3)


def test_a_completely_imported_module_is_returned(monkeypatch):
    done = types.ModuleType("torch")
    done.__spec__ = types.SimpleNamespace(name="torch", _initializing=False)
    monkeypatch.setitem(sys.modules, "torch", done)
    assert ns.loaded_torch() is done
