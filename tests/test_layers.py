"""The package's layers run one way: no import circle between modules, and no module imports a
layer above its own (DESIGN.md, "The layers"). Imports are read from the source with ``ast``,
those inside functions included (a lazy import is still a dependency).

Layers, bottom up: ``errors`` and the private utilities ``asyncnet._*`` and ``cleanup``;
``atomic``, ``sync`` and ``tensor`` (nothing from ``core`` or above); ``core``; ``exec`` and
``ops`` (ops import ``core`` and ``tensor``, never an executor); ``autodiff`` and the package
itself; ``model``; ``train``, ``interop``, ``compat`` and ``simulate``; ``cli`` at the top.
Nothing in the package imports the repository's ``benchmarks/``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import asyncnet

pytestmark = pytest.mark.timeout(60)

SRC = Path(asyncnet.__file__).resolve().parent
BOTTOM = 0
RANKS = {  # the component (first name under asyncnet) -> its layer
    "errors": BOTTOM,
    "cleanup": BOTTOM,
    "data": BOTTOM,
    "atomic": 1,
    "sync": 1,
    "tensor": 1,
    "core": 2,
    "exec": 3,
    "ops": 3,
    "autodiff": 4,
    "": 4,  # "": the package asyncnet itself (its __init__ loads core, ops, exec, autodiff)
    "model": 5,
    "train": 6,
    "interop": 6,
    "compat": 6,
    "simulate": 6,
    "torch": 6,
    "tensorflow": 6,
    "onnx": 6,
    "cli": 7,
    "__main__": 7,
}
# Deliberate exceptions, each with its reason.
ALLOWED = {
    # asyncnet.sync serves kizzasi's helpers under the names users import from it, lazily
    # (PEP 562 __getattr__): nothing in sync uses them.
    ("asyncnet.sync", "asyncnet.compat.kizzasi"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str, attr: str | None) -> str:
    """``from name import attr``: the submodule when ``name.attr`` is one, else ``name``."""
    if attr and f"{name}.{attr}" in MODULES:
        return f"{name}.{attr}"
    return name


def imports_of(module: str, path: Path) -> set[str]:
    """Every module ``module`` imports anywhere in its source (functions included)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            out.update(_resolve(base, a.name) for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        deps = {d for d in imports_of(module, path) if d == "asyncnet" or d.startswith("asyncnet.")}
        graph[module] = {_known(d) for d in deps} - {module}
    return graph


def _known(name: str) -> str:
    """The longest prefix of ``name`` that is a module of the package (``asyncnet.sync.X`` -> itself)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _rank(module: str) -> int:
    parts = module.split(".")
    comp = parts[1] if len(parts) > 1 else ""
    if comp.startswith("_") and comp not in RANKS:
        return BOTTOM
    assert comp in RANKS, f"{module}: no layer for {comp!r}; add it to RANKS (and DESIGN.md)"
    return RANKS[comp]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_reader_sees_lazy_and_relative_imports(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("import os\nfrom . import x\ndef f():\n    from asyncnet.sync import launch\n")
    assert {"os", "asyncnet.sync.launch"} <= imports_of("asyncnet.sync.m", mod)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    graph = {m: {d for d in deps if (m, d) not in ALLOWED} for m, deps in _graph().items()}
    assert _cycles(graph) == []


def test_no_upward_import():
    upward = [
        f"{m} -> {d}"
        for m, deps in _graph().items()
        for d in sorted(deps)
        if _rank(d) > _rank(m) and (m, d) not in ALLOWED
    ]
    assert upward == []


@pytest.mark.parametrize(
    "low,high",
    [
        ("atomic", "core"),
        ("sync", "core"),
        ("core", "exec"),
        ("core", "sync"),
        ("core", "ops"),
        ("ops", "exec"),
        ("core", "cli"),
        ("ops", "interop"),
    ],
)
def test_named_rules(low, high):
    bad = [
        f"{m} -> {d}"
        for m, deps in _graph().items()
        if m.startswith(f"asyncnet.{low}")
        for d in deps
        if d == f"asyncnet.{high}" or d.startswith(f"asyncnet.{high}.")
    ]
    assert bad == []


def test_only_the_cli_imports_the_cli():
    bad = [
        f"{m} -> {d}"
        for m, deps in _graph().items()
        if _rank(m) < RANKS["cli"]
        for d in deps
        if d.startswith("asyncnet.cli")
    ]
    assert bad == []


def test_nothing_in_the_package_imports_benchmarks():
    bad = [m for m, p in MODULES.items() for d in imports_of(m, p) if d == "benchmarks" or d.startswith("benchmarks.")]
    assert bad == []


# -- asyncnet.sync: nothing from core, torch only lazily -----------------------------------------

SYNC_DIR = SRC / "sync"


def test_no_core_imports_and_no_top_level_torch():
    for path in SYNC_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("asyncnet.core"), f"{path.name} imports {name}"
        for node in tree.body:  # module level
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert not (mod or "").startswith("torch"), f"{path.name} imports torch at module level"


def test_importing_sync_does_not_import_torch():
    code = "import sys, asyncnet.sync; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_importing_asyncnet_loads_no_backend_and_no_optional_library():
    code = (
        "import sys, asyncnet; heavy = ('torch', 'tensorflow', 'rich', 'matplotlib', 'tensorboard', "
        "'asyncnet.sync.process', 'asyncnet.sync.launch', 'asyncnet.sync.torch_dist', 'asyncnet.compat.kizzasi', "
        "'asyncnet.atomic.shared', 'multiprocessing'); print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
