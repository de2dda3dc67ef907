"""Every module of the package imports: a renamed or removed name breaks a module no other test
loads (a benchmark, a command) here, not in a user's hands."""

import importlib
import pkgutil

import pytest

import asyncnet

pytestmark = pytest.mark.timeout(120)

OPTIONAL = {"torch", "tensorflow", "rich", "matplotlib", "tensorboard"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(asyncnet.__path__, "asyncnet.") if m.name != "asyncnet.__main__")


def test_the_walk_finds_the_package():
    assert {
        "asyncnet.simulate.measure",
        "asyncnet.sync.launch",
        "asyncnet.exec.scheduling",
        "asyncnet.compat.kizzasi",
        "asyncnet.interop.torch",
        "asyncnet.interop.tensorflow",
        "asyncnet._shm",
    } <= set(MODULES)
    assert not any(m.startswith("asyncnet.bench") for m in MODULES)  # the benchmarks live outside the package


def test_the_old_names_still_import():
    import asyncnet.interop.torch
    import asyncnet.torch
    from asyncnet.compat import kizzasi
    from asyncnet.sync import DataParallelModel, ProcessGradientSync, run_parallel_workers

    assert asyncnet.torch is asyncnet.interop.torch
    assert DataParallelModel is kizzasi.DataParallelModel
    assert (
        run_parallel_workers.__module__ == "asyncnet.sync.launch"
        and ProcessGradientSync.__module__ == "asyncnet.sync.process"
    )


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    try:
        importlib.import_module(name)
    except ImportError as e:  # only a missing optional extra may stop it
        if (e.name or "").split(".")[0] in OPTIONAL:
            pytest.skip(f"{name} needs {e.name}")
        raise
