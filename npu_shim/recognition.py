"""The one decision every fix that recognises verl's code makes, and the one step of a fix that rebinds.

A fix declares a :class:`KnownFunction`: which verl function it looks at (its file in verl's
wheel and its qualified name, the key into ``known_code.json``), the releases whose code
lacks the change and those whose code has it. :meth:`KnownFunction.judge` reads the function
off its owner (a module or a class) and returns a :class:`Judgement`:

- replaced by a fix earlier in this process (:mod:`npu_shim.originals` holds verl's): already applied;
- other evidence than the code that verl has the change (``has_change``): native;
- npu_shim's own function there (a fix bound a name verl lacks): not applicable;
- the code of a release without the change: missing (the fix applies it), unless the fix says
  this verl needs nothing (``needs_nothing``: the Megatron beside it takes what verl passes);
- the code of a release with the change: native;
- the code of any other known release: not applicable (that release does not need it);
- code no release has, where the installed verl's version (or the fix's layout,
  ``needed_on_any_version``) says the change is missing: unrecognised, a verl patched locally
  or a source not readable; it is left as verl ships it, and the hook warns once with what follows;
- otherwise: not applicable.

A fix that replaces one function declares a :class:`Rebinding` (a KnownFunction with its
replacement and the words its outcome says), and :func:`npu_shim.patching.rebinding` makes it the fix:
judge, rebind where missing, report. ``known_code.json`` is generated from the released wheels by
``scripts/fingerprints.py``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from npu_shim import originals
from npu_shim.fingerprint import function_fingerprint
from npu_shim.layout import installed_verl_version
from npu_shim.verdicts import (
    ALREADY_APPLIED,
    APPLIED,
    MISSING,
    NATIVE,
    NOT_APPLICABLE,
    UNRECOGNISED,
    Outcome,
    is_ours,
)

DATA_FILE = "known_code.json"


@cache
def known_code() -> dict[str, dict[str, str | None]]:
    """``{"file:qualname": {release: fingerprint, or None where the release has no such function}}``."""
    with open(os.path.join(os.path.dirname(__file__), DATA_FILE), encoding="utf-8") as file:
        return json.load(file)["functions"]


def verl_release() -> str:
    """The installed verl's version without its local part (``0.7.1+ascend`` is 0.7.1), or ``""``."""
    return installed_verl_version().partition("+")[0]


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


@dataclass(frozen=True, kw_only=True)
class KnownFunction:
    fix: str  # the fix's NAME
    source: str  # the key into known_code.json: "verl/models/mcore/util.py:_build_npu_attn_mask"
    missing_in: tuple[str, ...]  # the releases whose code lacks the change
    fixed_in: tuple[str, ...]  # the releases whose code has it
    change: str  # the upstream change, in words for a reason: "verl #7055"
    if_left: str  # what a verl that needs the change meets when it is not applied
    breaks_critic: bool = False  # left unapplied, a Megatron critic on an NPU fails (the doctor's problem)
    has_change: Callable[[Any], str] | None = None  # evidence besides the code that verl has it: why, or ""
    needs_nothing: Callable[[Any], str] | None = None  # why this verl, though it lacks the change, needs nothing; or ""
    needed_on_any_version: bool = False  # reaching the code at all says the change is missing (the fix's layout)

    @property
    def file(self) -> str:
        return self.source.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.source.partition(":")[2]

    @property
    def attribute(self) -> str:
        return self.qualname.rpartition(".")[2]

    @property
    def module(self) -> str:
        """The module the function is defined in: ``verl.models.mcore.util``."""
        return self.file.removesuffix(".py").replace("/", ".")

    def owner(self, module: str = "") -> Any:
        """The module (or its class, for a method) the function is read from, as imported; None where there is none.

        ``module``: another module that bound the function's name (by default the one defining it).
        """
        owner: Any = sys.modules.get(module or self.module)
        for name in self.qualname.split(".")[:-1]:
            owner = vars(owner).get(name) if owner is not None else None
        return owner

    def releases(self, function: Any) -> list[str]:
        """The known releases whose code ``function`` is exactly (empty for anything else)."""
        return self._releases_of(function_fingerprint(function)) or []

    def original(self, owner: Any) -> Any:
        """verl's own function on ``owner``, also once a fix has replaced it (None if there is none)."""
        return originals.get_original(owner, self.attribute)

    def _releases_of(self, fingerprint: str | None) -> list[str] | None:
        """The releases with that code; None where known_code.json has no entry for the function."""
        table = known_code().get(self.source)
        if table is None:
            return None
        return [release for release, known in table.items() if fingerprint is not None and known == fingerprint]

    def judge(self, owner: Any) -> Judgement:  # noqa: PLR0911 - the module docstring's list
        """The verdict on ``owner``'s function (see the module docstring)."""
        if owner is None:
            return Judgement(self.fix, NOT_APPLICABLE, f"verl has no {self.module}.{self.qualname}")
        where = f"{owner.__name__}.{self.attribute}"
        # a name a fix bound where verl had none (shared_repatch's) is npu_shim's own, judged as such below
        if originals.was_replaced(owner, self.attribute) and originals.get_original(owner, self.attribute) is not None:
            return Judgement(self.fix, ALREADY_APPLIED, f"{where} was replaced earlier in this process")
        evidence = self.has_change(owner) if self.has_change else ""
        if evidence:
            return Judgement(self.fix, NATIVE, evidence)
        current = vars(owner).get(self.attribute)
        if current is None:
            return Judgement(self.fix, NOT_APPLICABLE, f"verl has no {where}")
        if is_ours(current):
            return Judgement(self.fix, NOT_APPLICABLE, f"{where} is npu_shim's own: this verl has none of its own")
        fingerprint = function_fingerprint(current)
        releases = self._releases_of(fingerprint)
        listed = _listed(releases or [])
        if releases and set(releases) & set(self.missing_in):
            unneeded = self.needs_nothing(owner) if self.needs_nothing else ""
            if unneeded:
                return Judgement(self.fix, NOT_APPLICABLE, unneeded, listed)
            return Judgement(self.fix, MISSING, f"{where} (verl {listed}'s)", listed)
        if releases and set(releases) & set(self.fixed_in):
            return Judgement(self.fix, NATIVE, f"{where} has {self.change} (the code of verl {listed})", listed)
        if releases:
            return Judgement(
                self.fix, NOT_APPLICABLE, f"{where} is verl {listed}'s, which has no need of {self.change}"
            )
        if not (self.needed_on_any_version or verl_release() in self.missing_in):
            why = f"{where} is not the code of a verl release npu_shim knows; left as verl ships it"
            return Judgement(self.fix, NOT_APPLICABLE, why)
        unneeded = self.needs_nothing(owner) if self.needs_nothing else ""
        if unneeded:
            return Judgement(self.fix, NOT_APPLICABLE, unneeded)
        what = (
            f"npu_shim's {DATA_FILE} has no entry for it: reinstall npu_shim"
            if releases is None
            else "its source could not be read"
            if fingerprint is None
            else "a local patch?"
        )
        why = (
            f"{where} is not the code of verl {_listed(self.missing_in)} ({what}): left as verl ships it, "
            f"without {self.change}, so {self.if_left}"
        )
        return Judgement(self.fix, UNRECOGNISED, why)


@dataclass(frozen=True, kw_only=True)
class Rebinding(KnownFunction):
    """A verl function that a fix replaces where its code is a release's without the change
    (:func:`npu_shim.patching.rebinding` makes the fix)."""

    replacement: Callable[..., Any]
    applied: str  # what the outcome adds once applied: "now builds the mask as bool"
    bound_in: tuple[str, ...] = ()  # the modules whose name for it is rebound, the judged one first (default: its own)

    @property
    def rebound_in(self) -> tuple[str, ...]:
        return self.bound_in or (self.module,)
