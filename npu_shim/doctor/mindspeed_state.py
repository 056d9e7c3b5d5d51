"""What the MindSpeed in the probed interpreter offers verl, and what that means for the verl there, read after verl
imported its MindSpeed engine module (docs/mindspeed-lines.md has the table this condenses)."""

from __future__ import annotations

import logging
import os
import sys
from types import ModuleType
from typing import Any

from npu_shim import mindspeed_line, watcher
from npu_shim.doctor.bridge_state import import_or_failure
from npu_shim.doctor.report import Report
from npu_shim.fixes import shared_repatch
from npu_shim.fixes.value_engine import VerlLayout
from npu_shim.settings import switch
from npu_shim.watcher import found

logger = logging.getLogger("npu_shim")

MINDSPEED_ADAPTOR = "mindspeed.megatron_adaptor"  # what verl imports `repatch` from
# What MindSpeed core_r0.17.0 and core_r0.18.0 need besides themselves, installed in this order before MindSpeed:
# MegatronAdaptor (watcher.ADAPTOR: their `mindspeed/__init__.py` is `import megatron_adaptor`), TransformerEngineNPU
TRANSFORMER_ENGINE = "transformer_engine"  # TransformerEngineNPU
TENPU = "TransformerEngineNPU (module transformer_engine)"
INSTALL_ORDER = "install MegatronAdaptor, then TransformerEngineNPU, then MindSpeed"
PATCHES_OFF = "verl runs with repatch = None, every MindSpeed patch off"
NO_CONFIG = (  # where verl binds no repatch
    "verl's engine config never reaches MindSpeed; fusion attention and context parallelism only by MindSpeed's "
    "own command-line flags"
)


def stack() -> dict[str, bool]:  # found, not imported: that could patch Megatron
    return {
        "mindspeed_installed": found("mindspeed"),
        "megatron_adaptor_installed": found(watcher.ADAPTOR),
        "transformer_engine_installed": found(TRANSFORMER_ENGINE),
    }


def package_folder(package: ModuleType | None) -> str | None:  # which verl or MindSpeed of several on the path
    file = getattr(package, "__file__", None)
    return os.path.dirname(os.path.abspath(file)) if file else None


def adaptor_order(installed: bool, activated_at_start: str | None, megatron_at_adaptor: list[str] | None) -> dict:
    """MegatronAdaptor (``installed`` or not) before Megatron here: only a shim active from start-up imports it at
    Megatron's first import. ``megatron_at_adaptor``: the Megatron modules imported when the probe first looked for it
    (None: it never did)."""
    megatron = watcher.megatron_modules()
    if not installed or not megatron:
        first = None
    elif megatron_at_adaptor is not None:
        first = megatron_at_adaptor
    else:  # never looked for: there before the probe began, or never imported while Megatron was
        first = [] if watcher.ADAPTOR in sys.modules else sorted(megatron)
    if not installed:
        reason = "MegatronAdaptor (module megatron_adaptor) is not installed: npu_shim imports nothing before Megatron"
    elif switch("NPU_SHIM_DISABLE"):
        reason = (
            "NPU_SHIM_DISABLE=1: npu_shim installs nothing, MegatronAdaptor is left to MindSpeed's `import mindspeed`"
        )
    elif not switch(watcher.ADAPTOR_SWITCH):
        reason = f"{watcher.ADAPTOR_SWITCH}=0: npu_shim leaves MegatronAdaptor to MindSpeed's `import mindspeed`"
    elif activated_at_start is None:
        reason = (
            "npu_shim does not start with this interpreter (verl's route starts it at `import verl`, after what a "
            "process imported first), so Megatron imports without MegatronAdaptor unless something imports it "
            "first: put npu_shim's bootstrap on PYTHONPATH (npu-shim runtime-env --route PYTHONPATH)"
        )
    else:
        reason = (
            "npu_shim imports MegatronAdaptor at the first import of Megatron, in every process started as this one"
        )
    before_megatron = installed and activated_at_start is not None and switch(watcher.ADAPTOR_SWITCH)
    return {"installed": installed, "before_megatron": before_megatron, "megatron_first": first, "reason": reason}


def offer(report: Report, layout: VerlLayout) -> dict[str, Any]:
    """What this MindSpeed offers verl and what that means here, under the report's keys. Where MindSpeed and
    MegatronAdaptor are installed, the probe imports ``transformer_engine`` too: Megatron's import of it is guarded, and
    without it verl's Transformer Engine layer specs and MindSpeed 0.18's norms fail only when built."""
    repatch = getattr(layout.mindspeed_impl, "repatch", None)  # importing mindspeed here could patch Megatron
    context_parallel_wrapper = None
    # where verl imported MindSpeed already: one more module patches nothing
    if sys.modules.get(MINDSPEED_ADAPTOR) is not None:
        cp_utils, failure = import_or_failure("mindspeed.core.context_parallel.model_parallel_utils")
        context_parallel_wrapper = hasattr(cp_utils, "initialize_model_parallel_cp_wrapper")
        if failure is not None:
            logger.debug("MindSpeed's context-parallel utilities did not import: %s", failure["error"])
    tried: dict[str, Any] = {"mindspeed_import_error": None, "mindspeed_adaptor_has_repatch": None}
    if repatch is None and report["mindspeed_installed"]:  # why verl bound none: its guarded import hid the error
        imported, tried["mindspeed_import_error"] = import_or_failure(MINDSPEED_ADAPTOR)
        if imported is not None:
            tried["mindspeed_adaptor_has_repatch"] = getattr(imported, "repatch", None) is not None
    tried["transformer_engine_import_error"] = None
    if report["mindspeed_installed"] and report["megatron_adaptor_installed"] and not tried["mindspeed_import_error"]:
        tried["transformer_engine_import_error"] = import_or_failure(TRANSFORMER_ENGINE)[1]
    mindspeed = {
        "repatch_importable": repatch is not None,
        "source": package_folder(sys.modules.get("mindspeed")),
        "batch_invariant_attention": mindspeed_line.has_batch_invariant_attention(),
        "context_parallel_wrapper": context_parallel_wrapper,
    }
    in_place = getattr(layout.mindspeed_impl, shared_repatch.UPSTREAM_NAME, None)
    shims_repatch = in_place is shared_repatch.mindspeed_repatch
    meaning = _mindspeed_meaning(mindspeed, tried, shims_repatch) if report["mindspeed_installed"] else []
    return {**tried, "mindspeed": {**mindspeed, "meaning": meaning}}


def _mindspeed_meaning(mindspeed: dict[str, Any], tried: dict[str, Any], shims_repatch: bool) -> list[str]:
    if tried["mindspeed_import_error"]:
        return [_import_failure(tried["mindspeed_import_error"])]
    if tried["transformer_engine_import_error"]:
        return [_transformer_engine_meaning(tried["transformer_engine_import_error"])]
    if tried["mindspeed_adaptor_has_repatch"]:
        return [f"no repatch bound by verl, though {MINDSPEED_ADAPTOR}.repatch imports here: {NO_CONFIG}"]
    if not mindspeed["repatch_importable"]:  # a line whose adaptor has no repatch
        return [f"no repatch (a MindSpeed line without it, such as 2.1.0_core_r0.12.1): {NO_CONFIG}"]
    meaning = []
    if mindspeed["batch_invariant_attention"] is False:
        then = "npu_shim keeps fusion attention on for it, with a warning"
        if not shims_repatch:
            then = "verl >= 0.9 alone turns fusion attention off for it (Megatron's unfused attention)"
        meaning.append(
            "no batch-invariant flash attention (only core_r0.16.0 has it): use_flash_attn_npu_batch_invariant "
            f"does nothing here; {then}"
        )
    elif mindspeed["batch_invariant_attention"]:
        meaning.append(
            "batch-invariant flash attention: it excludes fusion attention, and once an engine turns it on it is "
            "on for every engine in the process; "
            + (
                "npu_shim turns fusion attention off for it, and for engines built after one that set it, "
                "and refuses it with context parallelism (it would hide MindSpeed's ring attention)"
                if shims_repatch
                else "without npu_shim an engine without the key built after one with it (verl 0.8.0: any engine "
                "with it) dies with 'the patch of forward exist !'"
            )
        )
    if mindspeed["context_parallel_wrapper"]:
        meaning.append(
            "ring context parallelism: MindSpeed must see the CP size before Megatron's parallel state exists "
            "(the repatch in _init_device_mesh: verl >= 0.8.0, or npu_shim)"
        )
    elif mindspeed["context_parallel_wrapper"] is False:
        meaning.append("no wrapper of initialize_model_parallel: context parallelism is Megatron's own here")
    return meaning


def _import_failure(failure: dict[str, Any]) -> str:  # an installed MindSpeed's adaptor that does not import
    if failure["missing"] == watcher.ADAPTOR:
        also = "" if found(TRANSFORMER_ENGINE) else f"; {TENPU} is not installed either"
        return (
            "MegatronAdaptor (module megatron_adaptor) is not installed: MindSpeed core_r0.17.0/core_r0.18.0 "
            f"imports it at `import mindspeed`, so {PATCHES_OFF}{also}; fix: {INSTALL_ORDER}"
        )
    module, error = failure["module"], failure["error"]
    if failure["missing"] == TRANSFORMER_ENGINE:
        return (
            f"{TENPU} is not installed: MindSpeed core_r0.17.0/core_r0.18.0 imports it at `import {module}`, "
            f"so {PATCHES_OFF}; fix: {INSTALL_ORDER}"
        )
    return f"MindSpeed is installed but `import {module}` failed: {error}: {PATCHES_OFF}"


def _transformer_engine_meaning(failure: dict[str, Any]) -> str:
    consequence = (
        "Megatron runs without Transformer Engine, so verl's Megatron models (Transformer Engine layer specs) and "
        "MindSpeed core_r0.18.0's norms fail to build"
    )
    if failure["missing"] == TRANSFORMER_ENGINE:
        return f"{TENPU} is not installed beside MegatronAdaptor and MindSpeed: {consequence}; fix: {INSTALL_ORDER}"
    module, error = failure["module"], failure["error"]
    return f"TransformerEngineNPU is installed but `import {module}` failed: {error}: {consequence}"
