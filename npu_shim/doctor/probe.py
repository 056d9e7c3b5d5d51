"""The doctor's probe, run as ``python -c`` source in a fresh interpreter with the caller's environment, or as a Ray
task. It reads start-up, imports verl as a worker would, and only then loads npu_shim's report code, kept inactive
(``verl_state.answer``): standard library until then, as npu_shim may not be importable here at all (then only
:func:`critic_lookup`, which the report code calls too)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

WATCHER_GLOBAL = "npu_shim_waiting"  # npu_shim.settings.WAITING, read without importing npu_shim
ENV_VARIABLES = ("PYTHONPATH", "VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS", "NPU_SHIM_DISABLE")
ENV_VARIABLES += ("NPU_SHIM_PROPAGATE", "NPU_SHIM_MEGATRON_ADAPTOR", "NPU_SHIM_DISABLED_FIXES", "NPU_SHIM_LOG_LEVEL")
ENV_VARIABLES += ("NPU_SHIM_STRICT", "VERL_ENGINE_DEVICE")


class MegatronOrder:
    """Finds nothing: notes the Megatron modules already imported when ``megatron_adaptor`` is first looked for."""

    at_adaptor: list[str] | None = None  # None: not looked for while this was in sys.meta_path

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == "megatron_adaptor" and self.at_adaptor is None:
            self.at_adaptor = sorted(name for name in sys.modules if name.partition(".")[0] == "megatron")


def _shim_via() -> str | None:
    activated_via = getattr(sys.modules.get("npu_shim"), "activated_via", None)
    if activated_via is not None:
        return activated_via()
    # npu_shim's sitecustomize activates without importing npu_shim: its finder is the sign
    return "sitecustomize" if any(hasattr(f, WATCHER_GLOBAL) for f in sys.meta_path) else None


def _npu_shim_origin() -> str | None:  # without importing it
    finder = next((f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder"), None)
    spec = finder.find_spec("npu_shim", sys.path) if finder is not None else None
    return None if spec is None else spec.origin


def _verl_plugin() -> str | None:  # the npu_shim entry point of verl.plugins here
    from importlib.metadata import entry_points

    try:
        found = [point for point in entry_points(group="verl.plugins") if point.name == "npu_shim"]
    except Exception:  # a broken distribution's metadata elsewhere on sys.path: verl would stumble over it too
        return None
    return found[0].value if found else None


def _import_inactive(shim_parent: str | None) -> None:  # where start-up and verl did not import npu_shim
    if _npu_shim_origin() is None and shim_parent:
        sys.path.append(shim_parent)  # last: it hides nothing of this interpreter's own
    before = os.environ.get("NPU_SHIM_DISABLE")
    os.environ["NPU_SHIM_DISABLE"] = "1"
    try:
        import npu_shim  # noqa: F401
    finally:
        os.environ.pop("NPU_SHIM_DISABLE") if before is None else os.environ.update(NPU_SHIM_DISABLE=before)


@contextlib.contextmanager
def device_assumed(device: str | None) -> Iterator[None]:
    """While it lasts, the module that defines verl's ``EngineRegistry`` answers ``device`` (None: what verl sees)
    where it asks ``get_device_name()``, and VERL_ENGINE_DEVICE (which verl 0.9 reads first) is unset;
    ``verl.utils.device.get_device_name()`` still says what verl sees."""
    registry = getattr(sys.modules.get("verl.workers.engine"), "EngineRegistry", None)
    module = sys.modules.get(getattr(registry, "__module__", ""))
    seen = getattr(module, "get_device_name", None)
    if device is None or seen is None:
        yield
        return
    module.get_device_name, engine_device = (lambda: device), os.environ.pop("VERL_ENGINE_DEVICE", None)
    try:
        yield
    finally:  # a Ray worker lives on
        module.get_device_name = seen
        if engine_device is not None:
            os.environ["VERL_ENGINE_DEVICE"] = engine_device


def probe(options: dict[str, Any]) -> dict[str, Any]:
    """``{"report": ..., "text": ...}`` from here; ``options``: ``command.probe_options``'s. Where npu_shim's report
    code of the doctor's release does not load here, only the keys this file reads itself (the doctor renders them)."""
    sitecustomize = sys.modules.get("sitecustomize")
    start: dict[str, Any] = dict(  # the report's "probe"
        python=sys.executable,
        python_version=".".join(map(str, sys.version_info[:3])),
        pid=os.getpid(),
        environment={name: os.environ.get(name) for name in ENV_VARIABLES},
        sitecustomize=getattr(sitecustomize, "__file__", None),
        sitecustomize_is_npu_shim=hasattr(sitecustomize, WATCHER_GLOBAL),
        activated_at_start=_shim_via(),
        npu_shim_origin=_npu_shim_origin(),
        verl_plugin=_verl_plugin(),
        verl_import_error=None,
        report_error=None,
    )
    order = MegatronOrder()  # first: it must see MegatronAdaptor's lookup even where npu_shim's watcher makes it
    sys.meta_path.insert(0, order)
    try:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the report
                import verl  # noqa: F401
        except Exception as error:
            start["verl_import_error"] = f"{type(error).__name__}: {error}"
        start["activated_after_verl"] = _shim_via()
        try:
            if "npu_shim" not in sys.modules:
                _import_inactive(options.get("shim_parent"))
            # The one comparison of versions: another release's report code may judge otherwise, or not answer
            theirs, ours = getattr(sys.modules["npu_shim"], "__version__", None), options.get("version")
            if theirs != ours:
                raise ImportError(f"this interpreter's npu_shim is {theirs}, the doctor's {ours}")
            from npu_shim.doctor.verl_state import answer
        except Exception as error:
            missing = "npu_shim" not in sys.modules
            where = "npu_shim is not importable here" if missing else "npu_shim's report code did not load here"
            start["report_error"] = f"{where} ({type(error).__name__}: {error})"
            return {"report": _lookup_only(start, options)}
        return answer(start, order, options, critic_lookup)
    finally:
        sys.meta_path.remove(order)  # a Ray worker lives on


def critic_lookup(device: str | None) -> dict[str, Any]:
    """The device verl sees, and ``EngineRegistry.get_engine_cls("value_model", "megatron")`` looked up for ``device``
    (None: that one): whether it resolves, to which class, or why not, under the report's keys. The doctor's one
    lookup: the report code is given it (it must not import this file, which runs as a script)."""
    facts: dict[str, Any] = dict(device=None, value_model_megatron_class=None, value_model_megatron_error=None)
    with contextlib.redirect_stdout(sys.stderr):  # verl may print; stdout carries the report
        with contextlib.suppress(Exception):  # the report says "unknown"
            from verl.utils.device import get_device_name

            facts["device"] = str(get_device_name())
        try:
            registry = importlib.import_module("verl.workers.engine").EngineRegistry
            with device_assumed(device):
                engine = registry.get_engine_cls("value_model", "megatron")
            facts["value_model_megatron_class"] = f"{engine.__module__}.{engine.__qualname__}"
        except AssertionError as raised:  # verl's own words: "Unknown device: npu for model_type: value_model ..."
            facts["value_model_megatron_error"] = str(raised)
        except Exception as raised:  # a verl we do not know: report, do not crash the doctor
            facts["value_model_megatron_error"] = f"{type(raised).__name__}: {raised}"
    return {**facts, "value_model_megatron_resolves": facts["value_model_megatron_error"] is None}


def _lookup_only(start: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Without npu_shim's report code here: the device verl sees and the critic's lookup, judged (a problem where it
    fails on an NPU), under the report's keys."""
    device = options.get("device")
    facts = {"probe": start, "error": start["report_error"], "probed_in": options.get("probed_in")}
    facts.update(assumed_device=device, **critic_lookup(device))
    fails = (device or facts["device"]) == "npu" and not facts["value_model_megatron_resolves"]
    why = ["a Megatron critic's engine does not resolve on an NPU"] if fails else []  # verl_state.problems' words
    return {**facts, "status": "problem" if fails else "error", "exit_code": 1 if fails else 2, "problems": why}


def last_json_line(stdout: str, stderr: str, who: str, returncode: int) -> Any:
    """The probe's answer, the last line its interpreter printed, in the doctor; else RuntimeError."""
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(f"{who} exited {returncode}: {stderr.strip()[-2000:]}") from None


if __name__ == "__main__":  # python -c <this source> OPTIONS (one JSON object)
    print(json.dumps(probe(json.loads(sys.argv[1]))))
