"""SIMULATED ``mindspeed.patch_utils``: how MindSpeed patches Megatron, as observed from outside.

A patch targets a dotted path (``package.module.Class.attribute``). A function whose
name ends in ``wrapper`` or ``decorator`` wraps whatever is there, and any number
stack; any other function *replaces* the target, and a second, different
replacement for the same target raises ``RuntimeError: the patch of <attribute>
exist !`` when it is registered. Applying sets the attribute, and also rebinds
every module in ``sys.modules`` that holds the original object under that name
(``from x import f`` copies); removing puts the originals back.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _is_wrapper(function: Callable[..., Any]) -> bool:
    return getattr(function, "__name__", "").endswith(("wrapper", "decorator"))


def _resolve(path: str) -> tuple[Any, str]:
    """The object that owns the last name of ``path`` (a module or a class), and that name."""
    owner_path, name = path.rsplit(".", 1)
    parts = owner_path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            owner = getattr(owner, attribute)
        return owner, name
    raise ImportError(f"cannot resolve the patch target {path!r}")


@dataclass
class Patch:
    target: str
    replacement: Callable[..., Any] | None = None
    wrappers: list[Callable[..., Any]] = field(default_factory=list)
    original: Any = None
    applied: Any = None

    @property
    def name(self) -> str:
        return self.target.rsplit(".", 1)[1]

    def add(self, function: Callable[..., Any]) -> None:
        if _is_wrapper(function):
            if function not in self.wrappers:
                self.wrappers.append(function)
        elif self.replacement is not None and self.replacement is not function:
            raise RuntimeError(f"the patch of {self.name} exist !")
        else:
            self.replacement = function

    def apply(self) -> None:
        owner, name = _resolve(self.target)
        self.original = getattr(owner, name)
        final = self.replacement or self.original
        for wrapper in self.wrappers:
            final = wrapper(final)
        self.applied = final
        setattr(owner, name, final)
        _rebind_copies(name, self.original, final)

    def remove(self) -> None:
        if self.applied is None:
            return
        owner, name = _resolve(self.target)
        setattr(owner, name, self.original)
        _rebind_copies(name, self.applied, self.original)
        self.applied = None


def _rebind_copies(name: str, old: Any, new: Any) -> None:
    # vars(), not getattr(): a module-level __getattr__ (lazy modules) must not run here.
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(name) is old:
            namespace[name] = new


class PatchesManager:
    """All of MindSpeed's patches in this process."""

    patches: dict[str, Patch] = {}  # noqa: RUF012 - one process-wide registry, as MindSpeed's

    @classmethod
    def register_patch(cls, target: str, function: Callable[..., Any]) -> None:
        cls.patches.setdefault(target, Patch(target)).add(function)

    @classmethod
    def apply_patches(cls) -> None:
        for patch in cls.patches.values():
            patch.apply()

    @classmethod
    def remove_patches(cls) -> None:
        for patch in reversed(list(cls.patches.values())):
            patch.remove()
        cls.patches.clear()
