"""MegatronAdaptor before Megatron, in every process npu_shim starts in, whoever imports Megatron.

MindSpeed ``core_r0.17.0``/``core_r0.18.0`` need MegatronAdaptor (top-level ``megatron_adaptor``) loaded before
Megatron (their README; in verl's NPU CI ``import megatron.core`` crashes otherwise, verl #7838). verl's
``VERL_USE_EXTERNAL_MODULES=megatron_adaptor`` could not give that order (verl #7827, removed in #7886): verl
reads it at ``import verl``, after whatever a process imported first, and never in processes that do not import
verl (vLLM's subprocesses). npu_shim's bootstrap starts before anything is imported: its watcher
(``npu_shim/bootstrap/sitecustomize.py``) calls :func:`before_megatron` when the first ``megatron`` module is
looked for, before any line of Megatron runs. This module is imported then, never at start-up, and only then is
MegatronAdaptor looked for. ``NPU_SHIM_MEGATRON_ADAPTOR=0`` turns it off.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

from npu_shim.found import found
from npu_shim.switches import switch, warn_once

MODULE = "megatron_adaptor"
MEGATRON = "megatron"
SWITCH = "NPU_SHIM_MEGATRON_ADAPTOR"


def installed() -> bool:
    """Whether ``megatron_adaptor`` is found here; found, not imported."""
    return found(MODULE)


def megatron_modules() -> list[str]:
    """The Megatron modules in ``sys.modules``, in the order they were first imported."""
    return [name for name in sys.modules if name == MEGATRON or name.startswith(MEGATRON + ".")]


def wanted() -> bool:
    """Whether npu_shim should import MegatronAdaptor before Megatron here: on, installed, and not imported yet.

    Already imported: by MindSpeed (its ``__init__`` imports it), by the user, or in progress (it imports Megatron).
    """
    return MODULE not in sys.modules and switch(SWITCH) and installed()


def before_megatron(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """At the first import of ``fullname`` (a Megatron module), where MegatronAdaptor is installed: import it first.

    A failure of its import is reported once (``NPU_SHIM_STRICT``: raised) and Megatron imports as it would have.
    Returns the spec Python should load ``fullname`` from: None (the next finder's), unless MegatronAdaptor
    imported ``fullname`` itself, whose module is then handed back as it is (Python would run Megatron twice).
    """
    if MODULE in sys.modules or not switch(SWITCH):
        return None
    try:
        importlib.import_module(MODULE)
    except Exception as error:  # MegatronAdaptor's own: Megatron must still import, as it would have
        if switch("NPU_SHIM_STRICT"):
            raise
        warn_once(
            "megatron-adaptor-import",
            "npu_shim imported MegatronAdaptor (module %s) before Megatron, and that failed (%s: %s); "
            "Megatron imports without it. Set %s=0 to leave it to MindSpeed.",
            MODULE,
            type(error).__name__,
            error,
            SWITCH,
        )
        return None
    module = sys.modules.get(fullname)
    return None if module is None else _hand_back(module)


class _HandBack:
    """The loader of a module imported while Python looked for it: gives that module back, unchanged."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec: Any) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set it to ours


def _hand_back(module: ModuleType) -> importlib.machinery.ModuleSpec:
    # Python takes the spec of a module that appeared in sys.modules during the search for it from that module,
    # and loads it again: so the module carries ours until our loader gives it back its own.
    spec = importlib.machinery.ModuleSpec(module.__name__, _HandBack(module))
    module.__spec__ = spec
    return spec


def came_too_late() -> None:
    """Where npu_shim is activated after Megatron was imported: one warning, if it would have imported MA first."""
    if "megatron" in sys.modules and wanted():
        warn_once(
            "megatron-adaptor-late",
            "MegatronAdaptor (module %s) came too late: %s was imported before npu_shim was activated, and "
            "without MegatronAdaptor first, as MindSpeed requires. Put npu_shim's bootstrap on PYTHONPATH "
            "(npu-shim runtime-env --route PYTHONPATH) to start it before anything imports Megatron.",
            MODULE,
            megatron_modules()[0],
        )
