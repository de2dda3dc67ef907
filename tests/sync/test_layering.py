"""asyncnet.sync imports nothing from asyncnet.core, and torch only lazily."""

import ast
import pathlib
import subprocess
import sys

import asyncnet.sync

SYNC_DIR = pathlib.Path(asyncnet.sync.__file__).parent


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
