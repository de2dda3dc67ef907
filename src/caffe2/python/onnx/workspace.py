"""A private Caffe2 workspace (``caffe2.python.onnx.workspace.Workspace``): every
``caffe2.python.workspace`` function, called through it, acts on a workspace of its own and
switches back to the caller's afterwards.

    >>> import numpy as np
    >>> from caffe2.python import workspace as ambient
    >>> ws = Workspace()
    >>> ws.FeedBlob("x", np.ones(2, np.float32))
    True
    >>> ws.HasBlob("x"), ambient.HasBlob("x")
    (True, False)
    >>> ws.close()
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from caffe2.python import workspace

__all__ = ["Workspace"]


class _WorkspaceCtx:
    """Switch to ``workspace_id`` on enter and back to the previous workspace on exit (reentrant)."""

    def __init__(self, workspace_id: str):
        self.workspace_id = workspace_id
        self.workspace_stack: list[str] = []

    def __enter__(self) -> None:
        self.workspace_stack.append(workspace.CurrentWorkspace())
        workspace.SwitchWorkspace(self.workspace_id, create_if_missing=True)

    def __exit__(self, *exc: Any) -> None:
        workspace.SwitchWorkspace(self.workspace_stack.pop(), create_if_missing=True)


class Workspace:
    """A named workspace of its own; ``ws.F(...)`` runs ``caffe2.python.workspace.F(...)`` in it."""

    def __init__(self) -> None:
        self.workspace_id = str(uuid.uuid4())
        self._ctx = _WorkspaceCtx(self.workspace_id)

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        if attr.startswith("_"):
            raise AttributeError(attr)
        fn = getattr(workspace, attr)

        def f(*args: Any, **kwargs: Any) -> Any:
            with self._ctx:
                return fn(*args, **kwargs)

        return f

    def close(self) -> None:
        """Drop this workspace and its blobs (the caller's workspace is untouched)."""
        if workspace.CurrentWorkspace() == self.workspace_id:
            return
        workspace._workspaces.pop(self.workspace_id, None)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the module may be gone already
            pass
