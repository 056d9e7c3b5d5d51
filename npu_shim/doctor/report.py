"""The doctor's report (``--json``): :class:`Report` written by :func:`dataclasses.asdict`, read back by :func:`read`;
one flat object whose keys are the fields' names (:data:`JSON_NAMES`: the two that are no Python name). It stays flat
because users' scripts and CI have read these keys since 0.1.0. The codec is ours, not cattrs' or pydantic's: it runs
in every probed interpreter and Ray worker, where npu_shim brings wrapt and nothing else.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from npu_shim.patcher import NOT_APPLICABLE

OK = "ok"
NOT_JUDGED = "not judged"  # no NPU seen: whether a Megatron critic's engine resolves on one is not judged
PROBLEM = "problem"
ERROR = "error"
EXIT_CODES = {OK: 0, NOT_JUDGED: 0, NOT_APPLICABLE: 0, PROBLEM: 1, ERROR: 2}  # the exit status follows the status
JSON_NAMES = {"engine_class": "class", "verl_plugins": "verl.plugins"}
T = TypeVar("T")


def to_json(value: Any) -> dict[str, Any]:
    return dataclasses.asdict(value, dict_factory=lambda items: {JSON_NAMES.get(k, k): v for k, v in items})


def read(cls: type[T], data: Any) -> T:
    """The ``cls`` that :func:`to_json` wrote as ``data``; ValueError naming what is missing or of the wrong kind."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    hints, values, missing = typing.get_type_hints(cls), {}, []
    for item in (item for item in dataclasses.fields(cls) if item.init):  # type: ignore[arg-type]
        key = JSON_NAMES.get(item.name, item.name)
        if key in data:
            values[item.name] = _read(hints[item.name], data[key], f"{cls.__name__}.{key}")
        elif item.default is item.default_factory:  # both MISSING: a required key, missing (another npu_shim's)
            missing.append(key)
    if missing:
        raise ValueError(f"{cls.__name__}: no {', '.join(missing)}")
    return cls(**values)


def _read(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a JSON list, got {type(value).__name__}")
        return [_read(typing.get_args(hint)[0], inner, where) for inner in value]
    return read(hint, value) if dataclasses.is_dataclass(hint) else value


@dataclass(frozen=True)
class PythonpathEntry:  # of the probed interpreter's PYTHONPATH
    entry: str
    sitecustomize: str | None  # the sitecustomize.py it holds
    npu_shim: bool  # that file is npu_shim's bootstrap


@dataclass(frozen=True)
class ProbeState:
    """What start-up and ``import verl`` did in the probed interpreter (``probe``), read by ``probe.py`` before
    anything of npu_shim was imported there; ``activated_*``: ``npu_shim.activated_via()`` then."""

    python: str
    python_version: str
    pid: int
    environment: dict[str, str | None]  # probe.ENV_VARIABLES there (None: unset)
    sitecustomize: str | None  # the file that ran
    sitecustomize_is_npu_shim: bool
    activated_at_start: str | None
    npu_shim_origin: str | None  # where its own sys.path finds npu_shim
    verl_plugin: str | None  # the value of the npu_shim entry point of verl.plugins it sees
    verl_import_error: str | None
    activated_after_verl: str | None
    report_error: str | None  # why npu_shim's report code did not load there
    pythonpath_entries: list[PythonpathEntry] | None = None


@dataclass(frozen=True)
class Route:
    configured: str | bool | None  # set up; PYTHONPATH: the entry holding npu_shim's bootstrap, or None
    works: bool  # it gave the probed interpreter the shim
    reason: str
    needed: bool = True  # False: not set up while another route works (no hint to set up a second)
    shadowed_by: str | None = None  # PYTHONPATH: the foreign sitecustomize.py that ran instead of npu_shim's


@dataclass(frozen=True)
class Routes:
    PYTHONPATH: Route
    VERL_USE_EXTERNAL_MODULES: Route
    verl_plugins: Route
    effective: str | None = None  # the route that gave the probed interpreter the shim

    def by_name(self) -> dict[str, Route]:  # in the order they act: start-up, verl's modules, its plugins
        return {JSON_NAMES.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)[:3]}


@dataclass(frozen=True)
class VerlFacts:
    importable: bool = False
    installed: bool = False
    version: str | None = None
    path: str | None = None
    error: str | None = None  # how `import verl` or `verl.workers.engine` failed


@dataclass(frozen=True)
class ShimState:
    active: bool
    activated_via: str | None  # "sitecustomize", "VERL_USE_EXTERNAL_MODULES", "verl.plugins", "import" or None
    disabled: bool  # NPU_SHIM_DISABLE
    hook_loaded: bool
    failure: str | None = None  # the error a fix raised
    reason: str | None = None  # why it is not active
    disabled_fixes: list[str] = field(default_factory=list)  # what NPU_SHIM_DISABLED_FIXES turns off there
    unknown_fixes: list[str] = field(default_factory=list)  # the names it gives that are no fix's (ignored)


@dataclass(frozen=True)
class Layout:
    id: str | None = None  # verl_state.LAYOUTS
    description: str | None = None


@dataclass(frozen=True)
class FixRow:
    fix: str
    verdict: str  # a verdict of npu_shim.patcher, or "inactive"
    reason: str
    would: str | None = None  # "inactive" only: "apply", or the verdict the fix would give


@dataclass(frozen=True)
class FixGap:
    fix: str  # a fix that left verl without its change (unrecognised code, or turned off)
    breaks_critic: bool  # a Megatron critic on an NPU then fails


@dataclass(frozen=True)
class RegistryRow:
    model_type: str
    backend: str
    device: str
    vendor: str | None
    engine_class: str  # JSON "class"
    origin: str = "upstream"  # or "shim": npu_shim added it
    patched: bool = False  # an upstream class the shim changed a method of


@dataclass(frozen=True)
class TorchNpu:
    loaded: bool
    importable: bool
    version: str | None = None  # a real one names the torch it was built for


@dataclass(frozen=True)
class ImportFailure:  # of an import the probe made itself, to say what a guarded import (verl's, Megatron's) hid
    module: str
    error: str  # "Type: message"
    missing: str | None = None  # the name of a ModuleNotFoundError: the module that is not installed


@dataclass(frozen=True)
class MindSpeedOffer:
    repatch_importable: bool = False  # verl's MindSpeed engine module bound `repatch` (what verl calls)
    source: str | None = None  # the folder the imported mindspeed came from
    batch_invariant_attention: bool | None = None
    context_parallel_wrapper: bool | None = None
    meaning: list[str] = field(default_factory=list)  # what that means for this verl


@dataclass(frozen=True)
class AdaptorOrder:  # MegatronAdaptor before Megatron in processes started as the probed one (changes no status)
    installed: bool
    before_megatron: bool
    megatron_first: list[str] | None  # Megatron modules imported before it in the probe ([]: it came first)
    reason: str


@dataclass(frozen=True)
class Bridge:
    default: str | None = None  # what verl's default engine config builds through: "Megatron-Bridge", "mbridge"
    import_error: ImportFailure | None = None  # how verl's import of Megatron-Bridge failed
    meaning: str | None = None  # and what that means, with the ways out (verl #6931)


@dataclass(frozen=True)
class Report:
    """**full** (npu_shim's report code ran in the probed interpreter: ``shim`` is set), **lookup only** (npu_shim
    was not importable there: ``probe`` and the critic's lookup, read by ``probe.py``) or **no probe** (``error``)."""

    status: str = ERROR  # OK, NOT_JUDGED, PROBLEM (exit 1), "not applicable" (no verl), ERROR (exit 2)
    error: str | None = None  # why there is no full report
    npu_shim_version: str | None = None  # the doctor's
    probed_in: str | None = None  # "a fresh interpreter" or "a Ray worker of the cluster at ..."
    probe: ProbeState | None = None
    routes: Routes | None = None
    # EngineRegistry.get_engine_cls("value_model", "megatron") there
    device: str | None = None  # verl.utils.device.get_device_name()
    assumed_device: str | None = None  # the device the lookup was made for instead (--device npu)
    value_model_megatron_resolves: bool = False
    value_model_megatron_class: str | None = None
    value_model_megatron_error: str | None = None
    rollout_ipc: str | None = None  # on an NPU: the vLLM rollout's IPC decision and its card (npu_smi_card)
    # What npu_shim's report code read there; where verl did not import, only verl, shim, torch_npu, fixes, the stack
    verl: VerlFacts | None = None
    shim: ShimState | None = None
    torch_npu: TorchNpu | None = None
    fixes: list[FixRow] = field(default_factory=list)
    layout: Layout = field(default_factory=Layout)  # verl's engine package as the fixes found it
    unrecognised: list[FixGap] = field(default_factory=list)  # verdict (or would) "unrecognised"
    needed_but_off: list[FixGap] = field(default_factory=list)  # turned off, and this verl lacks the change
    engine_device: str | None = None  # the device the registry looks up (VERL_ENGINE_DEVICE on 0.9)
    registry: list[RegistryRow] = field(default_factory=list)
    mindspeed: MindSpeedOffer = field(default_factory=MindSpeedOffer)
    bridge: Bridge = field(default_factory=Bridge)
    megatron_adaptor: AdaptorOrder | None = None
    # The MindSpeed stack: found, not imported (importing could patch Megatron); MegatronAdaptor and
    # TransformerEngineNPU are what core_r0.17.0 and core_r0.18.0 need
    mindspeed_installed: bool = False
    megatron_adaptor_installed: bool = False
    transformer_engine_installed: bool = False
    # where verl bound no repatch and MindSpeed is installed: how the probe's `import mindspeed.megatron_adaptor`
    # failed (verl's guarded import hides it, and runs every MindSpeed patch off), or whether it has a repatch
    mindspeed_import_error: ImportFailure | None = None
    mindspeed_adaptor_has_repatch: bool | None = None
    # where MegatronAdaptor and MindSpeed are installed: how `import transformer_engine` failed (no model builds)
    transformer_engine_import_error: ImportFailure | None = None
    exit_code: int = field(init=False)

    def __post_init__(self) -> None:
        if self.status not in EXIT_CODES:
            raise ValueError(f"Report: unknown status {self.status!r} (one of {', '.join(EXIT_CODES)})")
        object.__setattr__(self, "exit_code", EXIT_CODES[self.status])

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        report = read(cls, data)
        if report.probe is not None and report.probe.report_error is None:  # npu_shim's report code ran there
            missing = [name for name in ("verl", "shim", "torch_npu") if getattr(report, name) is None]
            if missing:
                raise ValueError(f"Report: no {', '.join(missing)}")
        return report
