"""Which route, if any, gives the shim to new interpreters, judged from what the probe saw there: ``PYTHONPATH``
(at start-up), ``VERL_USE_EXTERNAL_MODULES=npu_shim`` and ``verl.plugins`` (both at ``import verl``)."""

from __future__ import annotations

import os
from dataclasses import replace

from npu_shim.doctor.report import ProbeState, PythonpathEntry, Report, Route, Routes, VerlFacts
from npu_shim.propagation import bootstrap_dir, is_npu_shim_bootstrap
from npu_shim.settings import PACKAGE, VERL_PLUGINS, VERL_PLUGINS_POLICY
from npu_shim.settings import VERL_MODULES as VERL_EXTERNAL
from npu_shim.watcher import names_npu_shim


def pythonpath_entries(pythonpath: str | None, base: str | None = None) -> list[PythonpathEntry]:
    """Each PYTHONPATH entry, a relative one read against ``base`` (default: this process's working directory)."""
    entries = []
    for entry in filter(None, (pythonpath or "").split(os.pathsep)):
        candidate = os.path.join(base or os.curdir, entry, "sitecustomize.py")
        found = os.path.isfile(candidate)
        entries.append(PythonpathEntry(entry, candidate if found else None, found and is_npu_shim_bootstrap(candidate)))
    return entries


def _bootstrap_to_suggest(probe: ProbeState) -> str:
    # The bootstrap of the npu_shim the probed interpreter imports (this doctor's own only where it finds none): in a
    # checkout `python -m npu_shim` runs the checkout's and `npu-shim` the installed one; both suggest a worker's.
    return bootstrap_dir(os.path.dirname(probe.npu_shim_origin) if probe.npu_shim_origin else None)


def _relative_entries_reason(probe: ProbeState) -> str | None:
    """Why a relative PYTHONPATH entry gives the shim to some processes and not others, or None."""
    pythonpath = probe.environment.get("PYTHONPATH")
    relative = [entry for entry in (pythonpath or "").split(os.pathsep) if entry and not os.path.isabs(entry)]
    if not relative:
        return None
    # Python reads a relative entry against each process's own working directory: the probe started in
    # an empty one, as a Ray worker does; the caller's directory is the one the user may be thinking of.
    try:
        here = os.getcwd()
    except OSError:  # the caller's directory was deleted
        here = None
    ours_here = [entry.entry for entry in pythonpath_entries(pythonpath, here) if entry.npu_shim] if here else []
    if ours_here:
        absolute = os.path.normpath(os.path.join(here or "", ours_here[0]))
        return (
            f"PYTHONPATH entry {ours_here[0]!r} is relative: it is read against each process's working directory; "
            f"from {here} it holds npu_shim's bootstrap, so only processes started there get the shim (Ray workers "
            f"start elsewhere); use the absolute path: export PYTHONPATH={absolute}:$PYTHONPATH"
        )
    return (
        f"PYTHONPATH has no npu_shim bootstrap; {', '.join(repr(entry) for entry in relative)} relative, read against "
        "each process's working directory (not one of npu_shim's here either); "
        f"export PYTHONPATH={_bootstrap_to_suggest(probe)}:$PYTHONPATH"
    )


def _pythonpath_route(probe: ProbeState, disabled: bool) -> Route:
    ours = next((entry.entry for entry in probe.pythonpath_entries or [] if entry.npu_shim), None)
    ran = probe.sitecustomize
    shadowed_by = ran if ours is not None and ran and not probe.sitecustomize_is_npu_shim else None
    works = probe.activated_at_start == "sitecustomize"
    if works:
        reason = f"{ours or ran}: its sitecustomize.py activated the shim at start-up"
    elif ours is None:
        reason = _relative_entries_reason(probe) or (
            f"PYTHONPATH has no npu_shim bootstrap (export PYTHONPATH={_bootstrap_to_suggest(probe)}:$PYTHONPATH)"
        )
    elif disabled:
        reason = f"{ours} is on PYTHONPATH, but NPU_SHIM_DISABLE is set"
    elif shadowed_by:
        reason = (
            f"{shadowed_by} runs instead of npu_shim's ({ours}): Python runs only the first sitecustomize.py "
            "on sys.path; put npu_shim's entry first (its own runs the other one after it)"
        )
    elif probe.sitecustomize_is_npu_shim:
        reason = (
            f"{ours} is another environment's bootstrap: npu_shim is not installed for {probe.python}, "
            "and the bootstrap adds no environment's packages to another's"
        )
    else:
        reason = f"{ours} is on PYTHONPATH, but no sitecustomize ran (python -S, -E or -I?)"
    return Route(ours, works, reason, shadowed_by=shadowed_by)


def names_at_fault(named: str, error: str) -> bool:
    """Whether ``import verl`` failed on the way ``VERL_USE_EXTERNAL_MODULES`` is written, not in verl itself."""
    names = named.split(",")
    # verl imports each comma-separated name exactly as written: a blank or empty one fails, and an error
    # that quotes one of the names is that import's
    return any(name != name.strip() or not name for name in names) or any(f"'{name}'" in error for name in names)


def _verl_route(probe: ProbeState, verl: VerlFacts, disabled: bool) -> Route:
    named = probe.environment.get(VERL_EXTERNAL)
    configured = names_npu_shim(named)
    works = configured and probe.activated_after_verl == VERL_EXTERNAL and not probe.verl_import_error
    if named and probe.verl_import_error and names_at_fault(named, probe.verl_import_error):
        reason = (
            f"import verl failed: {probe.verl_import_error} (verl imports each comma-separated name of "
            f"{VERL_EXTERNAL}={named!r} exactly as written)"
        )
    elif not configured:
        reason = f"{VERL_EXTERNAL} does not name npu_shim (export {VERL_EXTERNAL}=npu_shim)"
    elif works:
        reason = "import verl imported npu_shim, which activated"
    elif disabled:
        reason = "set, but NPU_SHIM_DISABLE is set"
    elif probe.activated_at_start is not None:
        reason = "set, but the shim was already active from start-up"
    elif probe.verl_import_error and not verl.installed:
        reason = f"set, but verl is not installed here: nothing to patch ({probe.verl_import_error})"
    elif probe.verl_import_error:
        reason = f"import verl failed: {probe.verl_import_error} (verl itself is broken here, shim or not)"
    elif probe.npu_shim_origin is None:
        reason = f"npu_shim is not importable by {probe.python}"
    else:
        reason = f"set, but this verl ({verl.version}) did not import it (verl reads {VERL_EXTERNAL} from 0.6.0 on)"
    return Route(configured, works, reason)


def _plugin_route(probe: ProbeState, disabled: bool) -> Route:
    installed = probe.verl_plugin is not None
    policy = probe.environment.get(VERL_PLUGINS_POLICY)
    # as verl reads it: unset or auto all, none none, else the comma-separated names (lower-cased, stripped)
    names = ("auto" if policy is None else policy).strip().lower()
    allowed = names == "auto" or (names != "none" and PACKAGE in {name.strip() for name in names.split(",")})
    works = probe.activated_after_verl == VERL_PLUGINS and not probe.verl_import_error
    if not installed:
        reason = (
            f"npu_shim's {VERL_PLUGINS} entry point is not installed for {probe.python} "
            "(pip install npu-shim there: verl 0.9.0 and later load it)"
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
    elif probe.activated_after_verl is not None:
        reason = f"installed; not needed here: the shim was already active ({probe.activated_after_verl})"
    elif probe.verl_import_error:
        reason = f"installed, but import verl failed: {probe.verl_import_error}"
    else:
        reason = f"installed, but this verl did not load it (verl loads {VERL_PLUGINS} from 0.9.0 on)"
    return Route(installed, works, reason)


def judge(report: Report) -> Routes:
    """The routes of a full report (a probe, and the shim and verl there), from what the probe saw."""
    probe, shim, verl = report.probe, report.shim, report.verl
    disabled = shim.disabled
    routes = [_pythonpath_route(probe, disabled), _verl_route(probe, verl, disabled), _plugin_route(probe, disabled)]
    if verl.importable and not shim.hook_loaded:
        # the hook loads only when verl is imported: a route that activated npu_shim without it gives no shim
        why = f"it activated npu_shim, but {shim.reason}"
        routes = [replace(r, works=False, reason=why) if r.works and shim.activated_via else r for r in routes]
    named = Routes(*routes).by_name()
    effective = next((name for name, route in named.items() if route.works), None)
    for name, route in named.items():  # no hint to set up a second route
        if effective not in (None, name) and not route.configured:
            named[name] = replace(route, needed=False, reason=f"not used (the shim comes by {effective})")
    return Routes(*named.values(), effective=effective)
