"""Caffe2's ``caffe2.python.context``: classes whose instances are ``with`` contexts, each
class with a thread-local stack of active instances (``Cls.current()``).

    >>> from caffe2.python import context
    >>> @context.define_context(allow_default=True)
    ... class Mode:
    ...     pass
    >>> with Mode() as m:
    ...     Mode.current() is m
    True
"""

from __future__ import annotations

import functools
import threading
from typing import Any

__all__ = ["define_context"]


class _Stack(threading.local):
    def __init__(self) -> None:
        self.items: list[Any] = []


def define_context(allow_default: bool = False, arg_name: str | None = None) -> Any:
    """Class decorator: ``with obj:`` makes ``obj`` the class's current instance;
    ``Cls.current(value=None, required=True)`` returns ``value`` when given, else the innermost
    active instance (a default instance when ``allow_default``, else an AssertionError when
    ``required``, else None). The class's own ``__enter__``/``__exit__`` still run."""

    def decorate(cls: type) -> type:
        stack = _Stack()
        own_enter = cls.__dict__.get("__enter__")
        own_exit = cls.__dict__.get("__exit__")

        def __enter__(self: Any) -> Any:
            stack.items.append(self)
            if own_enter is not None:
                own_enter(self)
            return self

        def __exit__(self: Any, *args: Any) -> Any:
            try:
                if own_exit is not None:
                    return own_exit(self, *args)
                return None
            finally:
                if not stack.items or stack.items[-1] is not self:
                    raise AssertionError(f"{cls.__name__} contexts exited out of order")
                stack.items.pop()

        def current(klass: type, value: Any = None, required: bool = True) -> Any:
            if value is not None:
                return value
            if not stack.items:
                if allow_default:
                    stack.items.append(cls())
                elif required:
                    raise AssertionError(f"Context {cls.__name__} is required but none is active.")
                else:
                    return None
            return stack.items[-1]

        def __call__(self: Any, func: Any) -> Any:
            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return func(*args, **kwargs)

            return wrapper

        cls.__enter__ = __enter__  # type: ignore[attr-defined]
        cls.__exit__ = __exit__  # type: ignore[attr-defined]
        cls.current = classmethod(current)  # type: ignore[attr-defined]
        if "__call__" not in cls.__dict__:
            cls.__call__ = __call__  # type: ignore[attr-defined]
        return cls

    return decorate
