"""Which route, if any, gives the shim to new interpreters, judged in the probe from what it saw there: ``PYTHONPATH``
(at start-up), ``VERL_USE_EXTERNAL_MODULES=npu_shim`` and ``verl.plugins`` (both at ``import verl``). Every command a
reason names is quoted for a shell (a checkout in ``/srv/my dir`` pastes as it reads)."""

from __future__ import annotations

import os
import shlex
from typing import Any

from npu_shim.doctor.report import Report
from npu_shim.propagation import bootstrap_dir, is_npu_shim_bootstrap, verl_modules_runtime_env
from npu_shim.settings import PACKAGE, VERL_MODULES, VERL_PLUGINS, VERL_PLUGINS_POLICY
from npu_shim.watcher import names_npu_shim


def pythonpath_entries(pythonpath: str | None, base: str | None = None) -> list[dict[str, Any]]:
    """Each PYTHONPATH entry, a relative one read against ``base`` (default: this process's working directory)."""
    entries = []
    for entry in filter(None, (pythonpath or "").split(os.pathsep)):
        candidate = os.path.join(base or os.curdir, entry, "sitecustomize.py")
        ours = os.path.isfile(candidate)
        entries.append({"entry": entry, "sitecustomize": candidate if ours else None,
                        "npu_shim": ours and is_npu_shim_bootstrap(candidate)})  # fmt: skip
    return entries


def export_pythonpath(entry: str) -> str:  # no trailing ":" where PYTHONPATH was empty: Python would add the cwd
    return f'export PYTHONPATH={shlex.quote(entry)}"${{PYTHONPATH:+:$PYTHONPATH}}"'


def _export_bootstrap(probe: dict[str, Any]) -> str:
    # The bootstrap of the npu_shim the probed interpreter imports (this doctor's own only where it finds none): in a
    # checkout `python -m npu_shim` runs the checkout's and `npu-shim` the installed one; both suggest a worker's.
    origin = probe["npu_shim_origin"]
    return export_pythonpath(bootstrap_dir(os.path.dirname(origin) if origin else None))


def _relative_entries_reason(probe: dict[str, Any], here: str | None) -> str | None:
    """Why a relative PYTHONPATH entry gives the shim to some processes and not others, or None. ``here``: the
    doctor's working directory, the one the user may be thinking of (the probe started in an empty one, as a Ray worker
    does); Python reads a relative entry against each process's own."""
    pythonpath = probe["environment"].get("PYTHONPATH")
    relative = [entry for entry in (pythonpath or "").split(os.pathsep) if entry and not os.path.isabs(entry)]
    if not relative:
        return None
    ours_here = [entry["entry"] for entry in pythonpath_entries(pythonpath, here) if entry["npu_shim"]] if here else []
    if ours_here:
        absolute = os.path.normpath(os.path.join(here or "", ours_here[0]))
        return (
            f"PYTHONPATH entry {ours_here[0]!r} is relative: it is read against each process's working directory; "
            f"from {here} it holds npu_shim's bootstrap, so only processes started there get the shim (Ray workers "
            f"start elsewhere); use the absolute path: {export_pythonpath(absolute)}"
        )
    return (
        f"PYTHONPATH has no npu_shim bootstrap; {', '.join(repr(entry) for entry in relative)} relative, read against "
        "each process's working directory (not one of npu_shim's here either); "
        f"{_export_bootstrap(probe)}"
    )


def _pythonpath_route(probe: dict[str, Any], disabled: bool, here: str | None) -> dict[str, Any]:
    ours = next((entry["entry"] for entry in probe["pythonpath_entries"] or [] if entry["npu_shim"]), None)
    ran = probe["sitecustomize"]
    shadowed_by = ran if ours is not None and ran and not probe["sitecustomize_is_npu_shim"] else None
    works = probe["activated_at_start"] == "sitecustomize"
    if works:
        reason = f"{ours or ran}: its sitecustomize.py activated the shim at start-up"
    elif ours is None:
        reason = (
            _relative_entries_reason(probe, here)
            or f"PYTHONPATH has no npu_shim bootstrap ({_export_bootstrap(probe)})"
        )
    elif disabled:
        reason = f"{ours} is on PYTHONPATH, but NPU_SHIM_DISABLE is set"
    elif shadowed_by:
        reason = (
            f"{shadowed_by} runs instead of npu_shim's ({ours}): Python runs only the first sitecustomize.py "
            "on sys.path; put npu_shim's entry first (its own runs the other one after it)"
        )
    elif probe["sitecustomize_is_npu_shim"]:
        reason = (
            f"{ours} is another environment's bootstrap: npu_shim is not installed for {probe['python']}, "
            "and the bootstrap adds no environment's packages to another's"
        )
    else:
        reason = f"{ours} is on PYTHONPATH, but no sitecustomize ran (python -S, -E or -I?)"
    return {"configured": ours, "works": works, "reason": reason, "needed": True, "shadowed_by": shadowed_by}


def names_at_fault(named: str, error: str) -> bool:
    """Whether ``import verl`` failed on the way ``VERL_USE_EXTERNAL_MODULES`` is written, not in verl itself."""
    names = named.split(",")
    # verl imports each comma-separated name exactly as written: a blank or empty one fails, and an error
    # that quotes one of the names is that import's
    return any(name != name.strip() or not name for name in names) or any(f"'{name}'" in error for name in names)


def import_failure_text(error: str | None) -> str:
    """What a failing ``import verl`` means (the shim's reason, and the critic's lookup error)."""
    named = os.environ.get(VERL_MODULES)
    if named and error and names_at_fault(named, error):
        return f"import verl fails: {error}: verl imports each name of {VERL_MODULES}={named!r} as written"
    return (
        f"import verl fails: {error}: verl itself does not import here, so every worker that imports verl "
        "dies the same way, with the shim or without; npu_shim patches verl only once it imports"
    )


def _verl_route(probe: dict[str, Any], verl: dict[str, Any], disabled: bool) -> dict[str, Any]:
    named, failed = probe["environment"].get(VERL_MODULES), probe["verl_import_error"]
    configured = names_npu_shim(named)
    works = configured and probe["activated_after_verl"] == VERL_MODULES and not failed
    if named and failed and names_at_fault(named, failed):
        reason = f"import verl failed on {VERL_MODULES}={named!r} (see verl)"
    elif not configured:  # what verl_modules_runtime_env writes: the names set kept, blanks verl cannot import gone
        value = verl_modules_runtime_env({"env_vars": {VERL_MODULES: named}} if named else None)["env_vars"]
        reason = f"{VERL_MODULES} does not name npu_shim (export {VERL_MODULES}={shlex.quote(value[VERL_MODULES])})"
    elif works:
        reason = "import verl imported npu_shim, which activated"
    elif disabled:
        reason = "set, but NPU_SHIM_DISABLE is set"
    elif failed and not verl["installed"]:
        reason = f"set, but verl is not installed here: nothing to patch ({failed})"
    elif failed:
        reason = "import verl fails (see verl): verl itself is broken here, shim or not"
    elif probe["activated_at_start"] is not None:
        reason = "set, but npu_shim was already activated at start-up"
    elif probe["npu_shim_origin"] is None:
        reason = f"npu_shim is not importable by {probe['python']}"
    else:
        reason = f"set, but this verl ({verl['version']}) did not import it (verl reads {VERL_MODULES} from 0.6.0 on)"
    return {"configured": configured, "works": works, "reason": reason, "needed": True, "shadowed_by": None}


def _plugin_route(probe: dict[str, Any], disabled: bool, install_from: str | None) -> dict[str, Any]:
    installed = probe["verl_plugin"] is not None
    policy = probe["environment"].get(VERL_PLUGINS_POLICY)
    # as verl reads it: unset or auto all, none none, else the comma-separated names (lower-cased, stripped)
    names = ("auto" if policy is None else policy).strip().lower()
    allowed = names == "auto" or (names != "none" and PACKAGE in {name.strip() for name in names.split(",")})
    failed = probe["verl_import_error"]
    works = probe["activated_after_verl"] == VERL_PLUGINS and not failed
    if not installed:
        # npu-shim is not on PyPI: never a bare name an index could answer with someone else's package
        python = probe["python"]
        how = "install npu_shim there as it was installed here"
        if install_from:
            how = f"{shlex.quote(python)} -m pip install {shlex.quote(install_from)}"
        reason = (
            f"npu_shim's {VERL_PLUGINS} entry point is not installed for {python} ({how}: verl 0.9.0 and later load it)"
        )
    elif works:
        reason = f"import verl loaded npu_shim's {VERL_PLUGINS} entry point, which activated"
    elif not allowed:
        reason = (
            f"installed, but {VERL_PLUGINS_POLICY}={policy!r} keeps verl from loading it "
            f"(unset it, or add {PACKAGE} to its list)"
        )
    elif disabled:
        reason = "installed, but NPU_SHIM_DISABLE is set"
    elif failed:
        reason = "installed, but import verl fails (see verl)"
    elif probe["activated_after_verl"] is not None:
        reason = f"installed; not needed here: npu_shim was already activated ({probe['activated_after_verl']})"
    else:
        reason = f"installed, but this verl did not load it (verl loads {VERL_PLUGINS} from 0.9.0 on)"
    return {"configured": installed, "works": works, "reason": reason, "needed": True, "shadowed_by": None}


def judge(report: Report, options: dict[str, Any]) -> dict[str, Any]:
    """The routes, from what the probe saw; ``options``: the doctor's working directory and where it was installed
    from. A route that activated npu_shim works only where the shim is active: no line says "yes" beside "inactive"."""
    probe, shim = report["probe"], report["shim"]
    disabled = shim["disabled"]
    routes = {
        "PYTHONPATH": _pythonpath_route(probe, disabled, options.get("cwd")),
        VERL_MODULES: _verl_route(probe, report["verl"], disabled),
        VERL_PLUGINS: _plugin_route(probe, disabled, options.get("install_from")),
    }  # in the order they act: start-up, verl's modules, its plugins
    for route in routes.values():
        if route["works"] and not shim["active"]:
            route.update(works=False, reason=f"it activated npu_shim, but {shim['reason']}")
    effective = next((name for name, route in routes.items() if route["works"]), None)
    for name, route in routes.items():  # no hint to set up a second route
        if effective not in (None, name) and not route["configured"]:
            route.update(needed=False, reason=f"not used (the shim comes by {effective})")
    return {**routes, "effective": effective}
