"""Helpers shared by subcommands: loading net files and feeds with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef
from asyncnet.errors import AsyncNetError


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def load_net(path: str) -> NetDef:
    """Read and validate a NetDef JSON file."""
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise CLIError(f"cannot read net file {path}: {e.strerror or e}") from None
    try:
        return NetDef.from_json(text)
    except AsyncNetError as e:
        raise CLIError(f"{path}: {e}") from None


def parse_feeds(specs: list[str] | None) -> dict[str, Any]:
    """``["x=x.npy", ...]`` -> {"x": array}; the file may be .npy or a JSON list."""
    feeds: dict[str, Any] = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CLIError(f"--feed expects NAME=FILE.npy, got {spec!r}")
        feeds[name] = _load_array(path)
    return feeds


def _load_array(path: str) -> Any:
    try:
        if path.endswith(".json"):
            return np.asarray(json.loads(Path(path).read_text()))
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise CLIError(f"cannot load array from {path}: {e}") from None
