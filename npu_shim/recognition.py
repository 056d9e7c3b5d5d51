"""The one decision every fix that recognises verl's code makes: apply, stand aside, or say it cannot tell.

A fix declares a :class:`KnownFunction`: which verl function it looks at (its file in verl's
wheel and its qualified name, the key into ``known_code.json``), the releases whose code
lacks the change and those whose code has it. :meth:`KnownFunction.judge` reads the function
off its owner (a module or a class) and returns a :class:`Judgement`:

- npu_shim's own function there (another fix bound it): not applicable;
- the code of a release without the change: missing (the fix applies it), or already applied
  earlier in this process;
- the code of a release with the change: native;
- the code of any other known release: not applicable (that release does not need it);
- code no release has, where the installed verl's version (or the fix, from verl's layout)
  says the change is missing: unrecognised, a verl patched locally or a source not readable;
  it is left as verl ships it, and the hook warns once with what follows;
- otherwise: not applicable.

``known_code.json`` is generated from the released wheels by ``scripts/fingerprints.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from npu_shim.fingerprint import function_fingerprint
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, UNRECOGNISED, Outcome, is_ours
from npu_shim.layout import installed_verl_version

MISSING = "missing"  # a judgement only: the change is missing from known code, and the fix applies it
DATA_FILE = "known_code.json"


@cache
def known_code() -> dict[str, dict[str, str | None]]:
    """``{"file:qualname": {release: fingerprint, or None where the release has no such function}}``."""
    with open(os.path.join(os.path.dirname(__file__), DATA_FILE), encoding="utf-8") as file:
        return json.load(file)["functions"]


def verl_release() -> str:
    """The installed verl's version without its local part (``0.7.1+ascend`` is 0.7.1), or ``""``."""
    return installed_verl_version().partition("+")[0]


def replaced_name(attribute: str) -> str:
    """Where a rebinding keeps verl's own function on its owner, for re-activations and the doctor."""
    return f"__npu_shim_replaced_{attribute}__"


def _listed(releases: tuple[str, ...] | list[str]) -> str:
    return ", ".join(releases)


@dataclass(frozen=True)
class Judgement:
    fix: str
    verdict: str  # MISSING, ALREADY_APPLIED, NATIVE, NOT_APPLICABLE or UNRECOGNISED
    reason: str
    releases: str = ""  # the known releases whose code it is

    @property
    def missing(self) -> bool:
        return self.verdict == MISSING

    def outcome(self, applied: str = "") -> Outcome:
        """The fix's outcome; ``applied`` says what the fix did, when the change was missing."""
        if self.missing:
            return Outcome(self.fix, APPLIED, f"{self.reason} {applied}".strip())
        return Outcome(self.fix, self.verdict, self.reason)


@dataclass(frozen=True)
class KnownFunction:
    fix: str  # the fix's NAME
    source: str  # the key into known_code.json: "verl/models/mcore/util.py:_build_npu_attn_mask"
    missing_in: tuple[str, ...]  # the releases whose code lacks the change
    fixed_in: tuple[str, ...]  # the releases whose code has it
    change: str  # the upstream change, in words for a reason: "verl #7055"
    if_left: str  # what a verl that needs the change meets when it is not applied
    breaks_critic: bool = False  # left unapplied, a Megatron critic on an NPU fails (the doctor's problem)

    @property
    def file(self) -> str:
        return self.source.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.source.partition(":")[2]

    @property
    def attribute(self) -> str:
        return self.qualname.rpartition(".")[2]

    def releases(self, function: Any) -> list[str]:
        """The known releases whose code ``function`` is exactly (empty for anything else)."""
        return self._releases_of(function_fingerprint(function))

    def _releases_of(self, fingerprint: str | None) -> list[str]:
        if fingerprint is None:
            return []
        return [release for release, known in known_code()[self.source].items() if known == fingerprint]

    def shipped(self, owner: Any) -> Any:
        """verl's own function on ``owner``, also once a fix has rebound the name (None if there is none)."""
        namespace = vars(owner) if owner is not None else {}
        return namespace.get(replaced_name(self.attribute), namespace.get(self.attribute))

    def rebind(self, owner: Any, replacement: Any, changes: Any) -> None:
        """Bind ``replacement`` under the attribute, keeping verl's own beside it."""
        changes.setattr(owner, replaced_name(self.attribute), vars(owner)[self.attribute])
        changes.setattr(owner, self.attribute, replacement)

    def judge(self, owner: Any, *, needed: bool | None = None) -> Judgement:  # noqa: PLR0911 - the docstring's list
        """The verdict on ``owner``'s function; ``needed``: whether the change is missing, when the fix can tell
        from verl's layout (by default the installed verl's version says so)."""
        where = f"{getattr(owner, '__name__', owner)}.{self.attribute}"
        current = vars(owner).get(self.attribute) if owner is not None else None
        if current is None:
            return Judgement(self.fix, NOT_APPLICABLE, f"verl has no {where}")
        shipped = self.shipped(owner)
        if is_ours(shipped):
            return Judgement(self.fix, NOT_APPLICABLE, f"{where} is npu_shim's own: this verl has none of its own")
        fingerprint = function_fingerprint(shipped)
        releases = self._releases_of(fingerprint)
        listed = _listed(releases)
        if set(releases) & set(self.missing_in):
            if is_ours(current):
                return Judgement(self.fix, ALREADY_APPLIED, f"{where} was replaced earlier in this process", listed)
            return Judgement(self.fix, MISSING, f"{where} (verl {listed}'s)", listed)
        if set(releases) & set(self.fixed_in):
            return Judgement(self.fix, NATIVE, f"{where} has {self.change} (the code of verl {listed})", listed)
        if is_ours(current):
            return Judgement(self.fix, NOT_APPLICABLE, f"{where} is already npu_shim's (another fix rebound it)")
        if releases:
            return Judgement(
                self.fix, NOT_APPLICABLE, f"{where} is verl {listed}'s, which has no need of {self.change}"
            )
        if needed is None:
            needed = verl_release() in self.missing_in
        if not needed:
            why = f"{where} is not the code of a verl release npu_shim knows; left as verl ships it"
            return Judgement(self.fix, NOT_APPLICABLE, why)
        what = "its source could not be read" if fingerprint is None else "a local patch?"
        why = (
            f"{where} is not the code of verl {_listed(self.missing_in)} ({what}): left as verl ships it, "
            f"without {self.change}, so {self.if_left}"
        )
        return Judgement(self.fix, UNRECOGNISED, why)


def declared_functions() -> list[KnownFunction]:
    """Every KnownFunction a fix module declares, in the order of the fixes."""
    from npu_shim.fixes import fix_modules  # the fix modules import this one

    return [value for fix in fix_modules() for value in vars(fix).values() if isinstance(value, KnownFunction)]


def critic_fails_without(fix_name: str) -> bool:
    """Whether a Megatron critic on an NPU fails where the fix ``fix_name`` is missing and not applied."""
    return any(known.breaks_critic for known in declared_functions() if known.fix == fix_name)
