"""verl's own functions that npu_shim replaced or removed, in one registry (gevent's ``get_original``).

A fix that rebinds a name records what verl had there, through the :class:`~npu_shim.changes.ChangeSet`
of that module's fixes, so that reverting the fixes forgets it too. The judgement reads the registry
to tell "already applied" from "missing" when the shim is activated again; the doctor reads it to
name the release whose code verl shipped. Keyed weakly by the owner (a module or a class): a verl
module imported afresh is a new owner, with nothing recorded.
"""

from __future__ import annotations

import weakref
from typing import Any

from npu_shim.changes import ChangeSet
from npu_shim.verdicts import is_ours

_originals: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_UNKEPT = object()


def keep(owner: Any, attribute: str, changes: ChangeSet) -> None:
    """Record ``owner``'s own ``attribute`` (or that it has none) before a fix binds, replaces or removes it;
    forgotten when ``changes`` revert. Only :mod:`npu_shim.patching` writes here."""
    kept = _originals.setdefault(owner, {})
    earlier = kept.get(attribute, _UNKEPT)
    kept[attribute] = vars(owner).get(attribute)  # None: verl had none
    changes.on_revert(lambda: kept.pop(attribute, None) if earlier is _UNKEPT else kept.__setitem__(attribute, earlier))


def was_replaced(owner: Any, attribute: str) -> bool:
    """Whether a fix bound, replaced or removed ``owner``'s ``attribute`` and verl has not bound its own there since:
    the one test of "already applied"."""
    if owner is None or attribute not in _originals.get(owner, {}):
        return False
    current = vars(owner).get(attribute)
    return current is None or is_ours(current)


def get_original(owner: Any, attribute: str) -> Any:
    """verl's own ``attribute`` of ``owner``, also where a fix replaced it (None where verl has none)."""
    if was_replaced(owner, attribute):
        return _originals[owner][attribute]
    return vars(owner).get(attribute) if owner is not None else None
