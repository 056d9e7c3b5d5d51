"""An undo log for the few attribute and registry edits the fixes make.

A fix that fails halfway must leave verl exactly as it was: no half-registered
engine, no export without its class. Every edit goes through a ChangeSet, and
``revert()`` undoes them in reverse order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


class ChangeSet:
    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._undo)

    def setattr(self, target: Any, name: str, value: Any) -> None:
        previous = target.__dict__.get(name, _MISSING) if isinstance(target, type) else getattr(target, name, _MISSING)
        setattr(target, name, value)
        self._undo.append(lambda: self._restore(target, name, previous))

    def delattr(self, target: Any, name: str) -> None:
        previous = target.__dict__[name]
        delattr(target, name)
        self._undo.append(lambda: setattr(target, name, previous))

    def export(self, module: Any, name: str, value: Any) -> None:
        """Bind ``name`` in ``module`` and list it in the module's ``__all__``, as an upstream export is."""
        self.setattr(module, name, value)
        names = list(getattr(module, "__all__", ()))
        if name not in names:
            self.setattr(module, "__all__", [*names, name])

    def on_revert(self, undo: Callable[[], None]) -> None:
        """Record how to undo an edit made some other way (a registration through verl's own API)."""
        self._undo.append(undo)

    def revert(self) -> None:
        while self._undo:
            self._undo.pop()()

    @staticmethod
    def _restore(target: Any, name: str, previous: Any) -> None:
        if previous is _MISSING:
            delattr(target, name)
        else:
            setattr(target, name, previous)
