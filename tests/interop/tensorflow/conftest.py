"""Settings for the TensorFlow tests; each module skips itself (with the reason) when the
``tensorflow`` extra is not installed (``pip install -e .[tensorflow]``)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info lines; read when it is imported
