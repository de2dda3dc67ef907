"""Skip a test module, with the reason, when TensorFlow is not installed.

A real install has a spec with an origin; a stray folder named ``tensorflow`` on ``sys.path``
(a namespace package) does not. That is also why this folder is not called ``tests/tensorflow``:
pytest puts ``tests/`` on ``sys.path``, and such a folder would shadow TensorFlow for tensorboard.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

REASON = "TensorFlow interop: install the tensorflow extra (pip install -e '.[tensorflow]')"


def tensorflow_or_skip() -> Any:
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        pytest.skip(REASON, allow_module_level=True)
    import tensorflow

    return tensorflow
