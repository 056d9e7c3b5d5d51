"""The doctor's report (``--json``): one flat JSON object, :func:`blank`'s keys in every report. It stays flat because
users' scripts and CI have read these keys since 0.1.0: new keys may come, and one goes only with a CHANGELOG line."""

from __future__ import annotations

from typing import Any

OK = "ok"
NOT_JUDGED = "not judged"  # no NPU seen: whether a Megatron critic's engine resolves on one is not judged
NOT_APPLICABLE = "not applicable"  # no verl: nothing to judge (also a fix's verdict, npu_shim.patcher's)
PROBLEM = "problem"
ERROR = "error"
EXIT_CODES = {OK: 0, NOT_JUDGED: 0, NOT_APPLICABLE: 0, PROBLEM: 1, ERROR: 2}  # the exit status follows the status

Report = dict[str, Any]


def blank() -> Report:
    """Every key of the report, as where nothing was read (a timeout, no Ray cluster: status ``error``)."""
    return {
        "status": ERROR,  # OK, NOT_JUDGED, NOT_APPLICABLE (no verl), PROBLEM (exit 1), ERROR (exit 2)
        "exit_code": EXIT_CODES[ERROR],
        "error": None,  # why there is no full report
        "problems": [],  # why the status is "problem", each once
        "npu_shim_version": None,  # the doctor's
        "probed_in": None,  # "a fresh interpreter" or "a Ray worker of the cluster at ..."
        # probe.py's reading of start-up and `import verl` there: python, python_version, pid, environment (probe.
        # ENV_VARIABLES, None: unset), sitecustomize (the file that ran), sitecustomize_is_npu_shim, activated_at_start
        # and activated_after_verl (npu_shim.activated_via() then), npu_shim_origin (where its sys.path finds
        # npu_shim), verl_plugin (the npu_shim entry point of verl.plugins), verl_import_error, report_error (why
        # npu_shim's report code did not load there), pythonpath_entries ([{entry, sitecustomize, npu_shim}])
        "probe": None,
        # PYTHONPATH, VERL_USE_EXTERNAL_MODULES, verl.plugins: {configured (PYTHONPATH: the entry holding npu_shim's
        # bootstrap), works (it gave the probed interpreter the shim), reason, needed (False: not set up while another
        # route works), shadowed_by (PYTHONPATH: the foreign sitecustomize.py that ran instead)}; effective: the one
        # that works
        "routes": None,
        # EngineRegistry.get_engine_cls("value_model", "megatron") there
        "device": None,  # verl.utils.device.get_device_name()
        "assumed_device": None,  # the device the lookup was made for instead (--device npu)
        "value_model_megatron_resolves": False,
        "value_model_megatron_class": None,
        "value_model_megatron_error": None,
        "rollout_ipc": None,  # on an NPU: the vLLM rollout's IPC decision and its card (fixes/npu_smi_card.py)
        "verl": None,  # {importable, installed, version, path, error (how `import verl` or its engine package failed)}
        # {active, activated_via ("sitecustomize", "VERL_USE_EXTERNAL_MODULES", "verl.plugins", "import"), disabled
        # (NPU_SHIM_DISABLE), hook_loaded, failure (the error a fix raised), reason (why it is not active),
        # disabled_fixes, unknown_fixes (names of NPU_SHIM_DISABLED_FIXES that are no fix's: ignored)}
        "shim": None,
        "torch_npu": None,  # {loaded, importable, version}
        # [{fix, verdict (npu_shim.patcher's, or "inactive"), reason, would ("inactive" only: "apply", or the verdict)}]
        "fixes": [],
        "unrecognised": [],  # [{fix, breaks_critic}]: verdict (or would) "unrecognised"
        "needed_but_off": [],  # [{fix, breaks_critic}]: turned off, and this verl lacks the change
        "engine_device": None,  # the device the registry looks up (VERL_ENGINE_DEVICE on 0.9)
        # [{model_type, backend, device, vendor, class, origin ("upstream", or "shim": npu_shim added it), patched (an
        # upstream class the shim changed a method of)}]
        "registry": [],
        # what this MindSpeed offers verl: repatch_importable (verl's MindSpeed engine module bound `repatch`), source
        # (the folder it came from), batch_invariant_attention, context_parallel_wrapper, meaning (for this verl)
        "mindspeed": {
            "repatch_importable": False,
            "source": None,
            "batch_invariant_attention": None,
            "context_parallel_wrapper": None,
            "meaning": [],
        },
        # default: what verl's default engine config builds through ("Megatron-Bridge", "mbridge"); import_error: how
        # verl's import of Megatron-Bridge failed; meaning: with the ways out (verl #6931)
        "bridge": {"default": None, "import_error": None, "meaning": None},
        # MegatronAdaptor before Megatron in processes started as the probed one: {installed, before_megatron,
        # megatron_first (Megatron modules imported before it in the probe; []: it came first), reason}
        "megatron_adaptor": None,
        # The MindSpeed stack, found, not imported (that could patch Megatron)
        "mindspeed_installed": False,
        "megatron_adaptor_installed": False,
        "transformer_engine_installed": False,
        # Imports the probe made itself, to say what a guarded import hid: {module, error, missing (the module a
        # ModuleNotFoundError names)}. mindspeed_import_error: where verl bound no repatch and MindSpeed is installed;
        # transformer_engine_import_error: where MegatronAdaptor and MindSpeed are installed
        "mindspeed_import_error": None,
        "mindspeed_adaptor_has_repatch": None,
        "transformer_engine_import_error": None,
    }


def with_status(report: Report, status: str, **changes: Any) -> Report:
    """``report`` judged: its status and the exit status that follows from it, and ``changes``."""
    return {**report, **changes, "status": status, "exit_code": EXIT_CODES[status]}
