"""``python -m npu_shim doctor``: will new interpreters and Ray workers started from here get the shim?

The doctor judges the environment it was started in, not the one npu_shim made
(``import npu_shim``, which ``python -m npu_shim`` does, activates the shim and
rewrites PYTHONPATH). It starts a fresh interpreter with that environment as
given (``--ray``: runs a task in a worker of a running Ray cluster), which
reports which sitecustomize ran, imports verl and ``verl.workers.engine`` as a
worker would (a few seconds), and says what verl looks like there and what the
shim did. Nothing runs on an accelerator, no process group, no engine.

Modules: ``probe`` (runs in the fresh interpreter or the Ray worker),
``verl_state`` (verl, the fixes and the registry, inside the probe), ``mindspeed_state`` (what the
MindSpeed there offers verl), ``routes``
(which route gave the shim, or why none did), ``ray_probe``, ``render`` (text).

Exit status: 1 when the probed interpreter's verl looks up ``npu`` engines and
``(value_model, megatron)`` does not resolve there (a Megatron critic would
fail, npu_shim importable there or not) or a fix without which a critic fails
found code it does not recognise, or when verl is installed there and
``import verl`` fails, or (on any device) when a MindSpeed is installed there but
``import mindspeed.megatron_adaptor`` fails (verl then runs every MindSpeed patch
off: ``mindspeed_import_error``), or when MegatronAdaptor and MindSpeed are installed but TransformerEngineNPU
does not import (``transformer_engine_import_error``), or when verl's default bridge, Megatron-Bridge, does not import
where verl looks up npu engines (``bridge``); 2 when the probe gave no report (it crashed, no Ray
cluster answered, or npu_shim is not importable there and the critic's engine
is not known to fail); else 0, including when verl is not installed and when no
NPU is seen there (``"not judged"``: the critic's engine lookup is only judged
where verl looks up NPU engines).

``--json`` prints one object with these keys (stable; new keys may be added):

- ``npu_shim_version`` (str)
- ``status``: ``"ok"``, ``"not judged"`` (no NPU seen), ``"problem"`` (exit 1), ``"not applicable"``
  (no verl) or ``"error"`` (exit 2)
- ``exit_code`` (int): the doctor's exit status
- ``probed_in`` (str): ``"a fresh interpreter"`` or ``"a Ray worker of the cluster at ..."`` (the address
  Ray connected to, ``auto`` resolved; as asked when no worker answered)
- ``error`` (str|None): why there is no full report; without npu_shim in the probed interpreter
  only ``probe``, ``device`` and the ``value_model_megatron_*`` keys are there
- ``probe``: what start-up did in the probed interpreter: ``python``, ``python_version``, ``pid``,
  ``environment`` (its ``PYTHONPATH``, ``VERL_USE_EXTERNAL_MODULES``, ``VERL_USE_EXTERNAL_PLUGINS``,
  ``NPU_SHIM_DISABLE``, ``NPU_SHIM_PROPAGATE``, ``NPU_SHIM_MEGATRON_ADAPTOR``, None when unset), ``sitecustomize``
  (the file that ran, or None),
  ``sitecustomize_is_npu_shim`` (bool), ``activated_at_start`` and ``activated_after_verl``
  (``npu_shim.activated_via()`` then, or None), ``npu_shim_origin`` (where its own sys.path finds
  npu_shim, or None), ``verl_plugin`` (the value of the ``npu_shim`` entry point of ``verl.plugins`` it
  sees, or None), ``verl_import_error`` (str|None), ``pythonpath_entries`` (list of
  ``{"entry", "sitecustomize", "npu_shim"}``), ``report_error`` (str|None)
- ``routes``: ``{"PYTHONPATH": {"configured": entry|None, "works": bool, "shadowed_by": path|None,
  "reason": str}, "VERL_USE_EXTERNAL_MODULES": {"configured": bool, "works": bool, "reason": str},
  "verl.plugins": {"configured": bool, "works": bool, "reason": str},
  "effective": "PYTHONPATH"|"VERL_USE_EXTERNAL_MODULES"|"verl.plugins"|None}``; ``shadowed_by`` is the foreign
  ``sitecustomize.py`` that ran instead of npu_shim's; ``verl.plugins`` is configured where the probed
  interpreter sees the installed shim's entry point in that group; a route that is not set up while another
  one works also has ``"needed": false``
- ``verl``: ``{"importable": bool, "installed": bool, "version": str|None, "path": str|None, "error": str|None}``
- ``shim``: ``{"active": bool,
  "activated_via": "sitecustomize"|"VERL_USE_EXTERNAL_MODULES"|"verl.plugins"|"import"|None, "disabled": bool,
  "hook_loaded": bool, "failure": str|None, "reason": str|None}``
- ``layout``: ``{"id": str|None, "description": str|None}``; ids: ``"0.6/0.7"``,
  ``"pre-#6135 main"``, ``"release/v0.7.1"``, ``"0.8.0"``, ``"native"``, ``"no keyed registry"``,
  ``"no mindspeed engine"``, ``"unrecognised"``; it describes verl as shipped, before any patch of the shim
- ``fixes``: list of ``{"fix": str, "verdict": str, "reason": str, "would": str|None}``;
  ``verdict`` is one of ``"applied"``, ``"already applied"``, ``"native"``,
  ``"not applicable"``, ``"unrecognised"`` (the installed verl needs the change, but the function
  is no release's code: left as verl ships it), ``"inactive"``; ``would`` (for ``"inactive"`` only)
  is what the shim would do there: ``"apply"``, ``"native"``, ``"not applicable"`` or ``"unrecognised"``
- ``unrecognised``: list of ``{"fix": str, "breaks_critic": bool}``, the fixes whose verdict (or
  ``would``) is ``"unrecognised"``, and whether a Megatron critic on an NPU then fails
- ``mindspeed``: ``{"repatch_importable": bool, "source": str|None,
  "batch_invariant_attention": bool|None, "context_parallel_wrapper": bool|None, "meaning": [str]}``:
  what this MindSpeed line offers verl (None: could not tell), and what that means for the verl seen;
  ``repatch_importable`` is whether verl's MindSpeed engine module bound ``repatch``; ``source`` the folder the
  imported ``mindspeed`` package came from (None: not imported)
- ``mindspeed_installed`` (bool): whether a ``mindspeed`` package is found there at all (found, not imported)
- ``mindspeed_import_error``: ``{"module": str, "error": str, "missing": str|None}|None``: where verl's
  MindSpeed engine module bound no ``repatch`` and a ``mindspeed`` package is installed, the probe imports
  ``mindspeed.megatron_adaptor`` itself (verl's guarded import hides why it failed); this is how that
  failed: ``module`` the module imported, ``error`` ``"Type: message"``, ``missing`` the ``name`` of a
  ``ModuleNotFoundError`` (``"megatron_adaptor"``: MegatronAdaptor is not installed), else None. None when
  it imports or was not tried. Not None: ``"problem"`` on any device (verl runs every MindSpeed patch off)
- ``mindspeed_adaptor_has_repatch`` (bool|None): whether that ``mindspeed.megatron_adaptor`` has a
  ``repatch`` (False: a line without it, such as ``2.1.0_core_r0.12.1``; None: not tried, or it failed)
- ``megatron_adaptor_installed``, ``transformer_engine_installed`` (bool): whether the top-level modules of
  MegatronAdaptor (``megatron_adaptor``) and TransformerEngineNPU (``transformer_engine``), which MindSpeed
  core_r0.17.0 and core_r0.18.0 need (installed in that order, then MindSpeed), are found there (not imported)
- ``transformer_engine_import_error``: ``{"module", "error", "missing"}|None``, as ``mindspeed_import_error``: where
  MegatronAdaptor and MindSpeed are installed (the three-layer stack, which needs all three), how the probe's own
  ``import transformer_engine`` failed (``missing`` ``"transformer_engine"``: TransformerEngineNPU is not installed).
  Megatron's import of it is guarded, so without it no verl Megatron model builds. Not None: ``"problem"``
- ``megatron_adaptor``: ``{"installed": bool, "before_megatron": bool, "megatron_first": [str]|None,
  "reason": str}``: whether MegatronAdaptor is found there, whether npu_shim imports it before the first
  import of Megatron in processes started as the probed one (npu_shim started with the interpreter and
  ``NPU_SHIM_MEGATRON_ADAPTOR`` on), and the Megatron modules the probe process had imported before
  MegatronAdaptor (``[]``: it came first; None: Megatron not imported there, or MegatronAdaptor not installed).
  Reported, not judged: it changes no status
- ``bridge``: ``{"default": "Megatron-Bridge"|"mbridge"|None, "import_error": {"module", "error", "missing"}|None,
  "meaning": str|None}``: the bridge verl's default engine config builds Megatron models through (None: this verl has
  no ``vanilla_mbridge``, 0.6.x), and, where that is Megatron-Bridge and verl's Megatron engine imported, how
  the probe's import of ``verl.models.mcore.bridge`` (verl's own import of ``megatron.bridge``) failed, with both ways
  out in ``meaning``. Not None where verl looks up npu engines: ``"problem"`` (verl #6931)
- ``torch_npu``: ``{"loaded": bool, "importable": bool, "version": str|None}``: ``version`` is the loaded
  torch_npu's ``__version__`` (a real one names the torch it was built for; None: not loaded)
- ``device`` (str|None): ``verl.utils.device.get_device_name()``
- ``engine_device`` (str|None): the device the engine registry looks up (``VERL_ENGINE_DEVICE`` on 0.9)
- ``registry``: list of ``{"model_type", "backend", "device", "vendor", "class", "origin", "patched"}``;
  ``origin`` is ``"shim"`` (a class npu_shim added) or ``"upstream"``; ``patched`` is True for an
  upstream class the shim changed a method of
- ``value_model_megatron_resolves`` (bool), ``value_model_megatron_class`` (str|None),
  ``value_model_megatron_error`` (str|None): ``EngineRegistry.get_engine_cls("value_model", "megatron")``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import npu_shim

ERROR = "error"
FRESH_INTERPRETER = "a fresh interpreter"


def environment_as_given() -> dict[str, str]:
    """This process's environment without what ``import npu_shim`` added to it."""
    propagation = sys.modules.get("npu_shim.propagation")
    return propagation.environ_as_given() if propagation is not None else dict(os.environ)


def shim_parent() -> str:
    """The directory that holds this npu_shim package: the probe's way to its report code."""
    return str(Path(npu_shim.__file__).resolve().parent.parent)


def probe_in_fresh_interpreter(timeout: float) -> dict[str, Any]:
    """The probe's report from ``sys.executable`` started with the caller's environment, as a worker would be."""
    from npu_shim.doctor import probe

    source = Path(probe.__file__).read_text(encoding="utf-8")
    # From an empty directory, as a worker starts: `python -c` puts its directory first on sys.path, and
    # the caller's (a checkout, a stray verl.py) would otherwise make things importable that workers lack.
    with tempfile.TemporaryDirectory(prefix="npu-shim-doctor-") as neutral:
        try:
            completed = subprocess.run(
                [sys.executable, "-c", source, shim_parent()],
                env=environment_as_given(),
                cwd=neutral,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"the probe did not finish within {timeout:g} s") from error
    lines = completed.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as error:
        raise RuntimeError(f"the probe exited {completed.returncode}: {completed.stderr.strip()[-2000:]}") from error


def collect(ray_address: str | None = None, use_ray: bool = False, timeout: float = 600) -> dict[str, Any]:
    """The doctor's report (the ``--json`` object); see this module's docstring for its keys."""
    from npu_shim.doctor import ray_probe, routes

    where = ray_probe.where(ray_address) if use_ray else FRESH_INTERPRETER
    try:
        if use_ray:
            report, resolved = ray_probe.probe_on_ray(ray_address, timeout, shim_parent(), environment_as_given())
            where = ray_probe.where(resolved)
        else:
            report = probe_in_fresh_interpreter(timeout)
    except RuntimeError as error:
        report = {"status": ERROR, "exit_code": 2, "error": str(error)}
    report.update(npu_shim_version=npu_shim.__version__, probed_in=where)
    report.setdefault("error", None)
    if "status" not in report:  # the probe ran but could not load npu_shim's report code there
        report.update(status=ERROR, exit_code=2, error=report["probe"]["report_error"])
        if report.get("device") == "npu" and not report.get("value_model_megatron_resolves"):
            report.update(status="problem", exit_code=1)
    elif "probe" in report:
        report["routes"] = routes.judge(report)
    return report


def main(
    as_json: bool = False, ray_address: str | None = None, use_ray: bool = False, timeout: float = 600
) -> tuple[str, int]:
    """The report (text, or one JSON object) and the exit status."""
    from npu_shim.doctor.render import render

    report = collect(ray_address, use_ray, timeout)
    text = json.dumps(report, indent=2, sort_keys=True) if as_json else render(report)
    return text, int(report["exit_code"])
