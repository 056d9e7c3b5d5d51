"""The patcher: a fix as a record (:class:`Fix`, judged to an :class:`Outcome`), the one writer of everything a fix
changes in verl (:class:`Writer`, also the undo log), and verl's originals (the first one wins).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

APPLIED = "applied"
ALREADY_APPLIED = "already applied"  # by an earlier activation in this process
NATIVE = "native"  # this verl has the change: npu_shim stands aside
NOT_APPLICABLE = "not applicable"  # nothing to fix here (old verl, no Megatron, no MindSpeed engine)
UNRECOGNISED = "unrecognised"  # the change is missing here, but the code is no release's: left alone, with a warning
DISABLED = "disabled"  # turned off by NPU_SHIM_DISABLED_FIXES: not applied, whatever this verl needs
MISSING = "missing"  # a judgement only, never an outcome: the change is missing, and the fix applies it
ENGINE_PACKAGE = "verl.workers.engine"  # what most fixes watch: its import has imported every engine module

_ABSENT = object()
# verl's own value of each name a fix bound or removed (None: verl had none), weakly by owner (a module or a class).
_originals: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
# What each fix replaced, by the watched module it was applied to: "already applied" while all of it is still ours.
_applied: weakref.WeakKeyDictionary[ModuleType, dict[str, list[tuple[Any, str]]]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Outcome:
    """A fix's verdict on the module it watches, and why: a judgement (``missing`` included), then its outcome."""

    fix: str
    verdict: str
    reason: str

    @property
    def missing(self) -> bool:
        return self.verdict == MISSING


def is_ours(obj: Any) -> bool:
    return getattr(obj, "__npu_shim__", False) is True


def was_replaced(owner: Any, attribute: str) -> bool:
    """Whether a fix bound, replaced or removed ``owner.attribute`` and verl has not bound its own there since."""
    if owner is None or attribute not in _originals.get(owner, {}):
        return False
    current = vars(owner).get(attribute)
    return current is None or is_ours(current)


def get_original(owner: Any, attribute: str) -> Any:
    """verl's own ``owner.attribute``, also where a fix replaced it (None where verl has none)."""
    if was_replaced(owner, attribute):
        return _originals[owner][attribute]
    return vars(owner).get(attribute) if owner is not None else None


def with_globals(function: FunctionType, **names: Any) -> FunctionType:
    """``function`` (its code, defaults and closure) reading ``names`` in place of its module's globals of those names:
    nothing of its module changes, so no other caller, thread or later call sees them."""
    namespace = {**function.__globals__, **names}
    return FunctionType(function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__)


class Writer:
    """The edits of one module's fixes, in order, each recorded so that :meth:`revert` undoes them all."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._replaced: list[tuple[Any, str]] = []  # by the fix being applied

    def bind(self, owner: Any, attribute: str, value: Any, *, ours: bool = True) -> None:
        """Set ``owner.attribute`` to ``value``: npu_shim's own (marked), or verl's bound under another name."""
        if ours:
            value.__npu_shim__ = True  # so that later activations and the doctor tell it from verl's (is_ours)
            self._replaced.append((owner, attribute))
        self._keep(owner, attribute)
        previous = vars(owner).get(attribute, _ABSENT)
        setattr(owner, attribute, value)
        self._undo.append(
            lambda: delattr(owner, attribute) if previous is _ABSENT else setattr(owner, attribute, previous)
        )

    def remove(self, owner: Any, attribute: str) -> None:
        """Delete verl's ``owner.attribute`` (a class then inherits its base's)."""
        self._replaced.append((owner, attribute))
        self._keep(owner, attribute)
        previous = vars(owner)[attribute]
        delattr(owner, attribute)
        self._undo.append(lambda: setattr(owner, attribute, previous))

    def export(self, package: ModuleType | None, name: str, value: Any) -> None:
        """Bind ``value`` in ``package`` and list it in its ``__all__``, as an upstream export is (None: no package)."""
        if package is not None:
            self.bind(package, name, value, ours=False)
            names = list(getattr(package, "__all__", ()))
            if name not in names:
                self.bind(package, "__all__", [*names, name], ours=False)

    def on_revert(self, undo: Callable[[], None]) -> None:
        """Record how to undo an edit made through verl's own API (a registration)."""
        self._undo.append(undo)

    def revert(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _keep(self, owner: Any, attribute: str) -> None:
        kept = _originals.setdefault(owner, {})
        if attribute not in kept:  # the first original wins: a second application keeps verl's, not ours
            kept[attribute] = vars(owner).get(attribute)
            self._undo.append(lambda: kept.pop(attribute, None))

    def record(self, fix: str, module: ModuleType) -> None:
        """What ``fix`` replaced in ``module``'s application, for "already applied" (forgotten on revert)."""
        by_fix = _applied.setdefault(module, {})
        by_fix[fix], self._replaced = self._replaced, []
        self._undo.append(lambda: by_fix.pop(fix, None))


@dataclass(frozen=True, kw_only=True)
class Fix:
    """One backported change: what it watches, how it judges, what it writes where the change is missing."""

    name: str
    judge: Callable[[ModuleType], Outcome]  # of the watched module, just imported
    edit: Callable[[ModuleType, Writer], None]  # called only where the judgement is "missing"
    applied: str  # what the outcome adds once applied: "now builds the mask as bool"
    watches: str = ENGINE_PACKAGE
    known: tuple[Any, ...] = ()  # recognition.KnownFunction: what it recognises by fingerprint (the doctor lists them)

    def apply(self, module: ModuleType, writer: Writer) -> Outcome:
        replaced = _applied.get(module, {}).get(self.name)
        if replaced and all(was_replaced(owner, attribute) for owner, attribute in replaced):
            owner, attribute = replaced[0]
            where = f"{getattr(owner, '__qualname__', owner.__name__)}.{attribute}"
            return Outcome(self.name, ALREADY_APPLIED, f"{where} is npu_shim's, since earlier in this process")
        judged = self.judge(module)
        if not judged.missing:
            return judged
        self.edit(module, writer)
        writer.record(self.name, module)
        return Outcome(self.name, APPLIED, f"{judged.reason} {self.applied}".strip())
