"""How a fix recognises verl's code: the fingerprint of one function against those of the released wheels
(``known_code.json``, written by ``scripts/fingerprints.py``). A :class:`Rebinding` is a function a fix replaces.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from npu_shim.fingerprint import function_fingerprint
from npu_shim.patcher import (
    ENGINE_PACKAGE,
    MISSING,
    NATIVE,
    NOT_APPLICABLE,
    UNRECOGNISED,
    Fix,
    Outcome,
    Writer,
    get_original,
    is_ours,
)

DATA_FILE = "known_code.json"


@cache
def known_code() -> dict[str, dict[str, str | None]]:
    """``{"file:qualname": {release: fingerprint, or None where the release has no such function}}``."""
    with open(os.path.join(os.path.dirname(__file__), DATA_FILE), encoding="utf-8") as file:
        return json.load(file)["functions"]


def installed_verl_version() -> str:
    """``verl.__version__`` of the verl imported in this process, or ``""``."""
    return str(getattr(sys.modules.get("verl"), "__version__", ""))


def verl_release() -> str:
    """The installed verl's version without its local part (``0.7.1+ascend`` is 0.7.1), or ``""``."""
    return installed_verl_version().partition("+")[0]


@dataclass(frozen=True, kw_only=True)
class KnownFunction:
    fix: str  # the fix's name
    source: str  # the key into known_code.json: "verl/models/mcore/util.py:_build_npu_attn_mask"
    missing_in: tuple[str, ...]  # the releases whose code lacks the change
    fixed_in: tuple[str, ...] = ()  # the releases whose code has it
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
    def module(self) -> str:  # where the function is defined: verl.models.mcore.util
        return self.file.removesuffix(".py").replace("/", ".")

    def owner(self, module: str = "") -> Any:
        """The module (or its class, for a method) the function is read from, as imported, or None; ``module``:
        another module that bound the function's name (by default the one defining it)."""
        owner: Any = sys.modules.get(module or self.module)
        for name in self.qualname.split(".")[:-1]:
            owner = vars(owner).get(name) if owner is not None else None
        return owner

    def releases(self, function: Any) -> list[str] | None:
        """The known releases whose code ``function`` is exactly; None where known_code.json has no entry for it."""
        table = known_code().get(self.source)
        if table is None:
            return None
        fingerprint = function_fingerprint(function)
        return [release for release, known in table.items() if fingerprint is not None and known == fingerprint]

    def judge(self, owner: Any) -> Outcome:  # noqa: PLR0911 - one verdict per case
        """The verdict on verl's own function on ``owner`` (a fix's replacement is looked through)."""
        where = f"{getattr(owner, '__name__', '?')}.{self.attribute}"
        if owner is None:
            return Outcome(self.fix, NOT_APPLICABLE, f"verl has no {self.module}.{self.qualname}")
        evidence = self.has_change(owner) if self.has_change else ""
        if evidence:
            return Outcome(self.fix, NATIVE, evidence)
        current = get_original(owner, self.attribute)
        if current is None or is_ours(current):  # a name a fix bound where verl had none (shared_repatch's)
            ours = is_ours(vars(owner).get(self.attribute))
            why = f"{where} is npu_shim's own: this verl has none of its own" if ours else f"verl has no {where}"
            return Outcome(self.fix, NOT_APPLICABLE, why)
        releases = self.releases(current)
        listed = ", ".join(releases or [])
        unneeded = self.needs_nothing(owner) if self.needs_nothing else ""
        if releases and set(releases) & set(self.missing_in):
            verdict, why = MISSING, f"{where} (verl {listed}'s)"
        elif releases and set(releases) & set(self.fixed_in):
            return Outcome(self.fix, NATIVE, f"{where} has {self.change} (the code of verl {listed})")
        elif releases:
            return Outcome(self.fix, NOT_APPLICABLE, f"{where} is verl {listed}'s, which has no need of {self.change}")
        elif not (self.needed_on_any_version or verl_release() in self.missing_in):
            why = f"{where} is not the code of a verl release npu_shim knows; left as verl ships it"
            return Outcome(self.fix, NOT_APPLICABLE, why)
        else:
            what = (
                f"npu_shim's {DATA_FILE} has no entry for it: reinstall npu_shim"
                if releases is None
                else "its source could not be read"
                if function_fingerprint(current) is None
                else "a local patch?"
            )
            verdict = UNRECOGNISED
            why = (
                f"{where} is not the code of verl {', '.join(self.missing_in)} ({what}): left as verl ships it, "
                f"without {self.change}, so {self.if_left}"
            )
        return Outcome(self.fix, NOT_APPLICABLE, unneeded) if unneeded else Outcome(self.fix, verdict, why)


@dataclass(frozen=True, kw_only=True)
class Rebinding(KnownFunction):
    """A verl function that a fix replaces where its code is a release's without the change."""

    replacement: Callable[..., Any]
    applied: str  # what the outcome adds once applied: "now builds the mask as bool"
    bound_in: tuple[str, ...] = ()  # the modules whose name for it is rebound, the judged one first (default: its own)

    @property
    def rebound_in(self) -> tuple[str, ...]:
        return self.bound_in or (self.module,)

    def as_fix(self, watches: str = ENGINE_PACKAGE) -> Fix:
        """The fix: judge the function by its fingerprint, and rebind it under each name that binds verl's code."""
        modules = self.rebound_in

        def edit(module: ModuleType, writer: Writer) -> None:
            first, *others = (self.owner(name) for name in modules)
            for owner in [first, *(owner for owner in others if self.judge(owner).missing)]:
                writer.bind(owner, self.attribute, self.replacement)

        judge = lambda module: self.judge(self.owner(modules[0]))  # noqa: E731
        return Fix(name=self.fix, judge=judge, edit=edit, applied=self.applied, watches=watches, known=(self,))
