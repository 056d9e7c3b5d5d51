"""SIMULATED ``mindspeed.patch_utils``: how MindSpeed patches Megatron, as observed from outside.

A patch targets a dotted path (``package.module.Class.attribute`` or ``package.module.Class``).
One entry per target lives for the whole process, in the order targets were first registered.
A function whose name ends in ``wrapper`` or ``decorator`` wraps whatever is there, and any
number stack; anything else *replaces* the target, and a second replacement registered for the
same target before the patches are removed raises ``RuntimeError: the patch of <attribute>
exist !`` (the same function twice included), unless it is registered with
``force_patch=True``: then it takes the first one's place (every line read has ``force_patch``;
``core_r0.18.0`` uses it). The owner of the target is looked up through
the attributes as they are when the entry is first applied, and kept. Applying sets the
attribute, and also rebinds every module in ``sys.modules`` that holds the object it replaces
under that name (``from x import f`` copies); removing puts the originals back and forgets
replacements and wrappers.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

_MISSING = object()


def _is_wrapper(function: Any) -> bool:
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


class Patch:
    def __init__(self, target: str) -> None:
        self.target = target
        self.name = target.rsplit(".", 1)[1]
        self.replacement: Callable[..., Any] | None = None
        self.wrappers: list[Callable[..., Any]] = []
        self.owner: Any = None
        self.original: Any = None
        self.applied: Any = None
        self.create_dummy = False

    def add(self, function: Callable[..., Any], force_patch: bool = False) -> None:
        if _is_wrapper(function):
            if function not in self.wrappers:
                self.wrappers.append(function)
        elif self.replacement is not None and not force_patch:
            raise RuntimeError(f"the patch of {self.name} exist !")
        else:
            self.replacement = function

    def apply(self) -> None:
        if self.owner is None:
            self.owner, _ = _resolve(self.target)
            default = (_MISSING,) if self.create_dummy else ()
            self.original = getattr(self.owner, self.name, *default)
        current = getattr(self.owner, self.name, _MISSING)
        final = self.replacement or self.original
        if final is _MISSING:
            return
        for wrapper in self.wrappers:
            final = wrapper(final)
        setattr(self.owner, self.name, final)
        _rebind_copies(self.name, current, final)
        self.applied = final

    def remove(self) -> None:
        if self.applied is not None and self.original is _MISSING:
            delattr(self.owner, self.name)
        elif self.applied is not None:
            setattr(self.owner, self.name, self.original)
            _rebind_copies(self.name, self.applied, self.original)
        self.applied = None
        self.replacement = None
        self.wrappers.clear()


def _rebind_copies(name: str, old: Any, new: Any) -> None:
    if old is new:
        return
    # vars(), not getattr(): a module-level __getattr__ (lazy modules) must not run here.
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if "mindspeed" not in module_name and isinstance(namespace, dict) and namespace.get(name) is old:
            namespace[name] = new


class MindSpeedPatchesManager:
    """All of MindSpeed's patches in this process."""

    patches_info: dict[str, Patch] = {}  # noqa: RUF012 - one process-wide registry, as MindSpeed's

    @classmethod
    def register_patch(
        cls, target: str, function: Callable[..., Any], force_patch: bool = False, create_dummy: bool = False
    ) -> None:
        patch = cls.patches_info.setdefault(target, Patch(target))
        patch.create_dummy = patch.create_dummy or create_dummy
        patch.add(function, force_patch)

    @classmethod
    def apply_patches(cls) -> None:
        for patch in cls.patches_info.values():
            patch.apply()

    @classmethod
    def remove_patches(cls) -> None:
        for patch in reversed(list(cls.patches_info.values())):
            patch.remove()

    @classmethod
    def forget(cls) -> None:
        """Test-only: no entries at all, as in a new process (MindSpeed itself never forgets one)."""
        cls.remove_patches()
        cls.patches_info.clear()
