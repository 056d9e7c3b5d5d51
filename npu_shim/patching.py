"""A fix as a record, and the one writer of everything a fix changes in verl (gevent's ``patch_item``).

A :class:`Fix` says which module it watches, how it judges that module once imported (a
:class:`~npu_shim.recognition.Judgement`: missing, already applied, native, not applicable, unrecognised) and
which edits it makes where the change is missing; :meth:`Fix.apply` is the same three steps for every fix.
The edits are data too (:class:`Patch`, :class:`Remove`, :class:`Export`, :class:`Register`), and their
``write`` is the only code that edits verl: it marks what npu_shim adds as ours, keeps what verl had under the
name (or that it had none) in :mod:`npu_shim.originals`, and records the edit in the module's
:class:`~npu_shim.changes.ChangeSet`, so that a failure reverts it and forgets what was kept. Hence one test of
"already applied" for every fix, :func:`npu_shim.originals.was_replaced`, and one reader of verl's own,
:func:`npu_shim.originals.get_original`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from npu_shim import originals
from npu_shim.changes import ChangeSet
from npu_shim.layout import ENGINE_PACKAGE, VerlLayout
from npu_shim.recognition import Judgement, KnownFunction, Rebinding
from npu_shim.verdicts import Outcome, mark_as_ours


@dataclass(frozen=True)
class Patch:
    """Bind npu_shim's ``value`` as ``owner.attribute``, where verl has its own or none."""

    owner: Any
    attribute: str
    value: Any

    def write(self, changes: ChangeSet) -> None:
        mark_as_ours(self.value)
        originals.keep(self.owner, self.attribute, changes)
        changes.setattr(self.owner, self.attribute, self.value)


@dataclass(frozen=True)
class Remove:
    """Delete verl's ``owner.attribute`` (a class then inherits its base's)."""

    owner: Any
    attribute: str

    def write(self, changes: ChangeSet) -> None:
        originals.keep(self.owner, self.attribute, changes)
        changes.delattr(self.owner, self.attribute)


@dataclass(frozen=True)
class Export:
    """Bind ``value`` (verl's or npu_shim's, unmarked) in package ``module`` and list it in its ``__all__``."""

    module: ModuleType | None  # None: a package verl did not import, nothing to export into
    name: str
    value: Any

    def write(self, changes: ChangeSet) -> None:
        if self.module is not None:
            originals.keep(self.module, self.name, changes)
            changes.export(self.module, self.name, self.value)


@dataclass(frozen=True)
class Register:
    """Register ``engine_class`` through verl's own ``EngineRegistry.register`` for ``key``."""

    layout: VerlLayout
    key: dict[str, str]  # model_type, backend, device
    engine_class: type

    def write(self, changes: ChangeSet) -> None:
        self.layout.registry.register(**self.key)(self.engine_class)
        slots = self.layout.slots(self.key["model_type"], self.key["backend"])
        device = self.key["device"]
        changes.on_revert(lambda: slots.pop(device, None))
        if self.layout.registered(**self.key) is not self.engine_class:
            raise RuntimeError(f"verl's EngineRegistry.register did not record {self.engine_class.__name__}")


Edit = Patch | Remove | Export | Register


@dataclass(frozen=True, kw_only=True)
class Fix:
    """One backported change: what it watches, how it judges, what it writes where the change is missing."""

    name: str
    judge: Callable[[ModuleType], Judgement]  # of the watched module, just imported
    edits: Callable[[ModuleType], Sequence[Edit]]  # asked only where the judgement is "missing"
    applied: str  # what the outcome adds once applied: "now builds the mask as bool"
    watches: str = ENGINE_PACKAGE
    known: tuple[KnownFunction, ...] = ()  # the verl functions it recognises by fingerprint (the doctor lists them)

    def apply(self, module: ModuleType, changes: ChangeSet) -> Outcome:
        judged = self.judge(module)
        if judged.missing:
            for edit in self.edits(module):
                edit.write(changes)
        return judged.outcome(self.applied)


def rebinding(declared: Rebinding, *, watches: str = ENGINE_PACKAGE) -> Fix:
    """The fix that replaces one verl function, judged by its fingerprint, under each name that binds it."""

    def judge(module: ModuleType) -> Judgement:
        return declared.judge(declared.owner(declared.rebound_in[0]))

    def edits(module: ModuleType) -> list[Edit]:
        first, *others = (declared.owner(name) for name in declared.rebound_in)
        # the same function bound by another name: rebound where it is verl's there too
        owners = [first, *(owner for owner in others if declared.judge(owner).missing)]
        return [Patch(owner, declared.attribute, declared.replacement) for owner in owners]

    return Fix(
        name=declared.fix, judge=judge, edits=edits, applied=declared.applied, watches=watches, known=(declared,)
    )
