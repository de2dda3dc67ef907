"""Caffe2's ``caffe2.python.optimizer_context``: ``UseOptimizer`` gives the parameters created
inside it (``model.create_param``, so every ``brew`` helper) their own optimizer, by tag
(``'WEIGHT'``, ``'BIAS'``) or for all of them (``'DEFAULT'``); ``_build`` then runs that
optimizer instead of the one passed to ``build_*``.

    >>> from caffe2.python import brew, model_helper, optimizer
    >>> from caffe2.python.optimizer_context import UseOptimizer
    >>> m = model_helper.ModelHelper(name="ctx_doc")
    >>> slow = optimizer.SgdOptimizer(0.01)
    >>> with UseOptimizer({"BIAS": slow}):
    ...     fc = brew.fc(m, "x", "fc", dim_in=2, dim_out=1)
    >>> m.get_param_info("fc_b").optimizer is slow, m.get_param_info("fc_w").optimizer
    (True, None)
"""

from __future__ import annotations

from typing import Any

from caffe2.python import context
from caffe2.python.modifier_context import ModifierContext, UseModifierBase

__all__ = ["DEFAULT_OPTIM", "OptimizerContext", "UseOptimizer"]

DEFAULT_OPTIM = "DEFAULT"


@context.define_context(allow_default=True)
class OptimizerContext(ModifierContext):
    """The optimizers active for new parameters, by tag."""

    def has_optimizer(self, name: str) -> bool:
        return self._has_modifier(name)

    def get_optimizer(self, name: str) -> Any:
        if not self.has_optimizer(name):
            raise KeyError(f"{name} optimizer is not provided; active: {sorted(self._modifiers)}")
        return self._get_modifier(name)


class UseOptimizer(UseModifierBase):
    """``with UseOptimizer(optim)`` or ``with UseOptimizer({'WEIGHT': w_optim, 'BIAS': b_optim})``."""

    def _context_class(self) -> Any:
        return OptimizerContext
