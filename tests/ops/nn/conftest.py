"""The op-family tests share the gradient-check helpers of tests/autodiff."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "autodiff"))
