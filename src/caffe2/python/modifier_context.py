"""Caffe2's ``caffe2.python.modifier_context``: a stack of name -> modifier dictionaries (an
optimizer or a regularizer per parameter tag), the innermost entry of a name winning.

    >>> from caffe2.python.modifier_context import ModifierContext
    >>> ctx = ModifierContext()
    >>> ctx.push_modifiers({"DEFAULT": "outer", "BIAS": "b"})
    >>> ctx.push_modifiers({"DEFAULT": "inner"})
    >>> ctx._get_modifier("DEFAULT"), ctx._get_modifier("BIAS")
    ('inner', 'b')
    >>> ctx.pop_modifiers()
    >>> ctx._get_modifier("DEFAULT")
    'outer'
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_MODIFIER", "ModifierContext", "UseModifierBase"]

DEFAULT_MODIFIER = "DEFAULT"


class ModifierContext:
    """The active modifiers: a list of pushed dictionaries and their merged view."""

    def __init__(self) -> None:
        self._modifiers: dict[str, Any] = {}
        self._modifiers_list: list[dict[str, Any]] = []

    def _rebuild_modifiers(self) -> None:
        self._modifiers = {}
        for entry in self._modifiers_list:
            self._modifiers.update(entry)

    def _has_modifier(self, name: str) -> bool:
        return name in self._modifiers

    def _get_modifier(self, name: str) -> Any:
        return self._modifiers.get(name)

    def push_modifiers(self, modifiers: dict[str, Any]) -> None:
        """Activate ``modifiers`` (their names override the ones already active)."""
        self._modifiers_list.append(modifiers)
        self._modifiers.update(modifiers)

    def pop_modifiers(self) -> None:
        """Deactivate the innermost dictionary."""
        if not self._modifiers_list:
            raise RuntimeError("pop_modifiers: expected an active modifier dictionary, found none")
        self._modifiers_list.pop()
        self._rebuild_modifiers()


class UseModifierBase:
    """``with`` context pushing ``{DEFAULT: modifier}`` or a ``{tag: modifier}`` dictionary onto
    the current context of :meth:`_context_class`."""

    def __init__(self, modifier_or_dict: Any) -> None:
        if isinstance(modifier_or_dict, dict):
            self._modifiers = modifier_or_dict
        else:
            self._modifiers = {DEFAULT_MODIFIER: modifier_or_dict}

    def _context_class(self) -> Any:
        raise NotImplementedError("UseModifierBase subclasses name their context class")

    def __enter__(self) -> UseModifierBase:
        self._context_class().current().push_modifiers(self._modifiers)
        return self

    def __exit__(self, *exc: object) -> None:
        self._context_class().current().pop_modifiers()
