"""Caffe2's ``serialized_test_util``: :class:`SerializedTestCase` and the ``given`` decorator.

Caffe2 also stored each op's outputs for its first hypothesis example in zip files and compared
later runs with them; those files belong to Caffe2's repository, so here ``given`` runs the
hypothesis examples and every check compares with the test's own reference only.

    >>> from caffe2.python.serialized_test import serialized_test_util as serial
    >>> issubclass(serial.SerializedTestCase, serial.hu.HypothesisTestCase)
    True
"""

from __future__ import annotations

from typing import Any

import hypothesis

from caffe2.python import hypothesis_test_util as hu

__all__ = ["SerializedTestCase", "given", "hu"]

DATA_SUFFIX = "data"
DATA_DIR = "data"


def given(*given_args: Any, **given_kwargs: Any) -> Any:
    """``hypothesis.given`` (Caffe2's output serialization is not done)."""
    return hypothesis.given(*given_args, **given_kwargs)


class SerializedTestCase(hu.HypothesisTestCase):
    """A HypothesisTestCase; ``assertSerializedOperatorChecks`` has nothing stored to compare with."""

    should_serialize = False

    def assertSerializedOperatorChecks(
        self,
        inputs: Any,
        outputs: Any,
        gradient_operator: Any,
        op: Any,
        device_option: Any,
        atol: float = 1e-7,
        rtol: float = 1e-7,
    ) -> None:
        """Nothing to compare: no outputs are stored."""
