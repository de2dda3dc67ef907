"""Caffe2's ``caffe2.python.regularizer_context``: ``UseRegularizer`` makes regularizers
available by name (``'WEIGHT'``, ``'BIAS'``, or ``'DEFAULT'`` for a single one) to the code
inside it, which reads them with ``RegularizerContext.current().get_regularizer(name)``.

    >>> from caffe2.python.regularizer import L2Norm
    >>> from caffe2.python.regularizer_context import RegularizerContext, UseRegularizer
    >>> reg = L2Norm(0.1)
    >>> with UseRegularizer({"WEIGHT": reg}):
    ...     RegularizerContext.current().get_regularizer("WEIGHT") is reg
    True
    >>> RegularizerContext.current().has_regularizer("WEIGHT")
    False
"""

from __future__ import annotations

from typing import Any

from caffe2.python import context
from caffe2.python.modifier_context import ModifierContext, UseModifierBase

__all__ = ["RegularizerContext", "UseRegularizer"]


@context.define_context(allow_default=True)
class RegularizerContext(ModifierContext):
    """The regularizers active in the current ``with UseRegularizer`` blocks, by name."""

    def has_regularizer(self, name: str) -> bool:
        return name in self._modifiers

    def get_regularizer(self, name: str) -> Any:
        try:
            return self._modifiers[name]
        except KeyError:
            raise KeyError(f"{name} regularizer is not provided; active: {sorted(self._modifiers)}") from None


class UseRegularizer(UseModifierBase):
    """``with UseRegularizer(reg)`` or ``with UseRegularizer({'WEIGHT': w_reg, 'BIAS': b_reg})``."""

    def _context_class(self) -> Any:
        return RegularizerContext
