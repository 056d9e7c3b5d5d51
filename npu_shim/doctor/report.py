"""The doctor's report as typed values, and the JSON ``npu-shim doctor --json`` prints of them.

Every part of the doctor builds and reads these (``verl_state``, ``routes``, ``render``); none indexes a dict of
string keys but ``probe.py``'s standard-library start, which writes :class:`ProbeState` and :class:`CriticLookup`
as JSON where npu_shim may not be importable. The JSON is the same values written out: a field's JSON key is its
name unless its metadata says otherwise (:func:`named`: ``class``, ``PYTHONPATH``, ``verl.plugins`` cannot be
Python names), a :data:`MERGED` field's keys sit beside its parent's (the report is one flat object, as it always
was), and a :data:`SECTION` that is None is left out (a report without a probe has no ``probe``). The JSON is
stable: new keys may be added.

The codec is written here rather than taken from cattrs or pydantic: it runs inside every probed interpreter and
Ray worker, where npu_shim brings wrapt and nothing else, and it needs only the three rules above.

A report has one of three shapes:

- **full**: npu_shim's report code ran in the probed interpreter: everything below;
- **lookup only**: npu_shim was not importable there, so the probe read the critic's lookup itself
  (:class:`CriticLookup`, written by ``probe.py``'s standard-library code under the same keys) and its start-up
  (``probe``): no ``findings``, no ``routes``;
- **no probe**: it crashed, timed out, or no Ray cluster answered: the status (``"error"``) and why.
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
# The doctor's exit status follows from its status alone.
EXIT_CODES = {OK: 0, NOT_JUDGED: 0, NOT_APPLICABLE: 0, PROBLEM: 1, ERROR: 2}

# A field's metadata: how it is written in the JSON.
_KEY = "json_key"
_MERGED = "json_merged"
_SECTION = "json_section"
MERGED = {_MERGED: True}  # its own keys are written beside its parent's (none, when it is None)
SECTION = {_SECTION: True}  # left out when None
T = TypeVar("T")


def named(key: str) -> dict[str, str]:
    """Written under ``key``."""
    return {_KEY: key}


def _key(item: dataclasses.Field[Any]) -> str:
    return item.metadata.get(_KEY, item.name)


def to_json(value: Any) -> Any:
    """``value`` (a report's dataclass, or what one holds) as JSON-ready dicts, lists and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = {}
        for item in dataclasses.fields(value):
            inner = getattr(value, item.name)
            if item.metadata.get(_MERGED):
                data.update(to_json(inner) if inner is not None else {})
            elif not (inner is None and item.metadata.get(_SECTION)):
                data[_key(item)] = to_json(inner)
        return data
    if isinstance(value, (list, tuple)):
        return [to_json(inner) for inner in value]
    if isinstance(value, dict):
        return {key: to_json(inner) for key, inner in value.items()}
    return value


def from_json(cls: type[T], data: Mapping[str, Any]) -> T:
    """The ``cls`` that :func:`to_json` wrote as ``data``; ValueError naming what is missing or not an object."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        if not item.init:
            continue
        hint = hints[item.name]
        if item.metadata.get(_MERGED):
            inner = _without_none(hint)
            if not _keys(inner).isdisjoint(data):  # written: at least one of its keys is there
                values[item.name] = from_json(inner, data)
        elif _key(item) in data:
            values[item.name] = _decode(hint, data[_key(item)], f"{cls.__name__}.{_key(item)}")
    try:
        return cls(**values)
    except TypeError as error:  # a required key is missing: another npu_shim's report, or none
        missing = [_key(item) for item in _required(cls) if item.name not in values]
        raise ValueError(
            f"{cls.__name__}: no {', '.join(missing)}" if missing else f"{cls.__name__}: {error}"
        ) from None


def _required(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields ``cls`` cannot be made without."""
    no_default = dataclasses.MISSING
    return [
        item
        for item in dataclasses.fields(cls)
        if item.init and item.default is no_default and item.default_factory is no_default
    ]


def _keys(cls: type) -> set[str]:
    """The JSON keys ``cls`` writes at its own level, its merged fields' included."""
    keys = set()
    for item in dataclasses.fields(cls):
        merged = item.metadata.get(_MERGED)
        keys |= _keys(_without_none(typing.get_type_hints(cls)[item.name])) if merged else {_key(item)}
    return keys


def _without_none(hint: Any) -> Any:
    """``X`` of ``X | None``; any other hint as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _decode(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    hint = _without_none(hint)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a JSON list, got {type(value).__name__}")
        return [_decode(item, inner, where) for inner in value]
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value)
    return value


# -- where the probe ran, and how the shim could reach it -----------------------------------------------------


@dataclass(frozen=True)
class PythonpathEntry:
    """An entry of the probed interpreter's PYTHONPATH: the ``sitecustomize.py`` it holds, and whether it is ours."""

    entry: str
    sitecustomize: str | None
    npu_shim: bool


@dataclass(frozen=True)
class ProbeState:
    """What start-up and ``import verl`` did in the probed interpreter (``probe``), read by ``probe.py`` before
    anything of npu_shim was imported there.

    ``environment``: its ``PYTHONPATH``, ``VERL_USE_EXTERNAL_MODULES``, ``VERL_USE_EXTERNAL_PLUGINS``,
    ``NPU_SHIM_DISABLE``, ``NPU_SHIM_PROPAGATE``, ``NPU_SHIM_MEGATRON_ADAPTOR``, ``NPU_SHIM_DISABLED_FIXES``,
    ``NPU_SHIM_LOG_LEVEL`` (None when unset);
    ``sitecustomize``: the file that ran; ``activated_at_start``, ``activated_after_verl``:
    ``npu_shim.activated_via()`` then; ``npu_shim_origin``: where its own sys.path finds npu_shim;
    ``verl_plugin``: the value of the ``npu_shim`` entry point of ``verl.plugins`` it sees;
    ``report_error``: why npu_shim's report code did not load there; ``pythonpath_entries``: None where it did not.
    """

    python: str
    python_version: str
    pid: int
    environment: dict[str, str | None]
    sitecustomize: str | None
    sitecustomize_is_npu_shim: bool
    activated_at_start: str | None
    npu_shim_origin: str | None
    verl_plugin: str | None
    verl_import_error: str | None
    activated_after_verl: str | None
    report_error: str | None
    pythonpath_entries: list[PythonpathEntry] | None = None


@dataclass(frozen=True)
class Route:
    """One way the shim reaches new interpreters. ``configured``: set up; ``works``: it gave the probed interpreter
    the shim; ``needed``: False for a route not set up while another one works (no hint to set up a second)."""

    configured: bool
    works: bool
    reason: str
    needed: bool = True


@dataclass(frozen=True)
class PythonpathRoute:
    """The PYTHONPATH route. ``configured``: the entry holding npu_shim's bootstrap (None: none does);
    ``shadowed_by``: the foreign ``sitecustomize.py`` that ran instead of npu_shim's."""

    configured: str | None
    works: bool
    reason: str
    shadowed_by: str | None = None
    needed: bool = True


@dataclass(frozen=True)
class Routes:
    """Each route (``routes``), and ``effective``: the one that gave the probed interpreter the shim, or None."""

    pythonpath: PythonpathRoute = field(metadata=named("PYTHONPATH"))
    verl_modules: Route = field(metadata=named("VERL_USE_EXTERNAL_MODULES"))
    verl_plugins: Route = field(metadata=named("verl.plugins"))
    effective: str | None = None

    def by_name(self) -> dict[str, PythonpathRoute | Route]:
        """The routes by their names, in the order they act: start-up, then verl's modules, then its plugins."""
        return {_key(item): getattr(self, item.name) for item in dataclasses.fields(self) if item.name != "effective"}


# -- verl, the shim and the fixes there -----------------------------------------------------------------------


@dataclass(frozen=True)
class VerlFacts:
    """verl there (``verl``): ``error`` is how ``import verl`` or ``verl.workers.engine`` failed."""

    importable: bool = False
    installed: bool = False
    version: str | None = None
    path: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class ShimState:
    """The shim there (``shim``). ``activated_via``: ``"sitecustomize"``, ``"VERL_USE_EXTERNAL_MODULES"``,
    ``"verl.plugins"``, ``"import"`` or None; ``failure``: the error a fix raised; ``reason``: why it is not active;
    ``disabled_fixes`` and ``unknown_fixes``: what ``NPU_SHIM_DISABLED_FIXES`` names there, fixes and not."""

    active: bool
    activated_via: str | None
    disabled: bool
    hook_loaded: bool
    failure: str | None = None
    reason: str | None = None
    disabled_fixes: list[str] = field(default_factory=list)  # what NPU_SHIM_DISABLED_FIXES turns off there
    unknown_fixes: list[str] = field(default_factory=list)  # the names it gives that are no fix's (ignored)


@dataclass(frozen=True)
class Layout:
    """verl's engine package as shipped, before any patch of the shim (``layout``); ids: ``"0.6/0.7"``,
    ``"pre-#6135 main"``, ``"release/v0.7.1"``, ``"0.8.0"``, ``"native"``, ``"no keyed registry"``,
    ``"no mindspeed engine"``, ``"unrecognised"``."""

    id: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class FixRow:
    """A fix's verdict (``fixes``): ``"applied"``, ``"already applied"``, ``"native"``, ``"not applicable"``,
    ``"unrecognised"`` (verl needs the change, but the function is no release's: left as verl ships it),
    ``"disabled"`` (``NPU_SHIM_DISABLED_FIXES``) or ``"inactive"``; ``would`` (for ``"inactive"`` only): ``"apply"``,
    ``"native"``, ``"not applicable"``, ``"unrecognised"`` or ``"disabled"``."""

    fix: str
    verdict: str
    reason: str
    would: str | None = None


@dataclass(frozen=True)
class UnrecognisedFix:
    """A fix whose verdict (or ``would``) is ``"unrecognised"`` (``unrecognised``), and whether a Megatron critic on
    an NPU then fails."""

    fix: str
    breaks_critic: bool


@dataclass(frozen=True)
class RegistryRow:
    """A class of verl's engine registry (``registry``): ``origin`` ``"shim"`` (npu_shim added it) or
    ``"upstream"``; ``patched``: an upstream class the shim changed a method of."""

    model_type: str
    backend: str
    device: str
    vendor: str | None
    engine_class: str = field(metadata=named("class"))
    origin: str = "upstream"
    patched: bool = False


@dataclass(frozen=True)
class CriticLookup:
    """``EngineRegistry.get_engine_cls("value_model", "megatron")`` there, and ``device``, what
    ``verl.utils.device.get_device_name()`` returns. Read by ``probe.py`` itself where npu_shim is not importable.
    ``assumed_device``: the device the lookup was made for instead (``doctor --device npu``: an image build on a
    machine without one), or None."""

    device: str | None = None
    assumed_device: str | None = None
    resolves: bool = field(default=False, metadata=named("value_model_megatron_resolves"))
    engine_class: str | None = field(default=None, metadata=named("value_model_megatron_class"))
    error: str | None = field(default=None, metadata=named("value_model_megatron_error"))


# -- MindSpeed, its dependencies, and the bridge -------------------------------------------------------------


@dataclass(frozen=True)
class ImportFailure:
    """An import the probe made itself, to say what a guarded import hid: ``error`` ``"Type: message"``,
    ``missing`` the ``name`` of a ``ModuleNotFoundError`` (the module that is not installed), else None."""

    module: str
    error: str
    missing: str | None = None


@dataclass(frozen=True)
class MindSpeedOffer:
    """What this MindSpeed line offers verl (``mindspeed``; None: could not tell), and what that means here.
    ``repatch_importable``: whether verl's MindSpeed engine module bound ``repatch``; ``source``: the folder the
    imported ``mindspeed`` came from (None: not imported)."""

    repatch_importable: bool = False
    source: str | None = None
    batch_invariant_attention: bool | None = None
    context_parallel_wrapper: bool | None = None
    meaning: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MindSpeedStack:
    """The MindSpeed stack there: what is installed (found, not imported: importing could patch Megatron), and why
    verl bound no ``repatch``.

    ``megatron_adaptor_installed``, ``transformer_engine_installed``: MegatronAdaptor and TransformerEngineNPU, which
    core_r0.17.0 and core_r0.18.0 need. ``mindspeed_import_error``: where verl bound no ``repatch`` and MindSpeed is
    installed, how the probe's own ``import mindspeed.megatron_adaptor`` failed (verl's guarded import hides it;
    verl then runs every MindSpeed patch off). ``mindspeed_adaptor_has_repatch``: whether that module has a
    ``repatch`` (None: not tried, or it failed). ``transformer_engine_import_error``: where MegatronAdaptor and
    MindSpeed are installed, how the probe's ``import transformer_engine`` failed (no verl Megatron model builds).
    """

    mindspeed_installed: bool = False
    megatron_adaptor_installed: bool = False
    transformer_engine_installed: bool = False
    mindspeed_import_error: ImportFailure | None = None
    mindspeed_adaptor_has_repatch: bool | None = None
    transformer_engine_import_error: ImportFailure | None = None


@dataclass(frozen=True)
class AdaptorOrder:
    """MegatronAdaptor before Megatron (``megatron_adaptor``): whether it is installed, whether npu_shim imports it
    before the first import of Megatron in processes started as the probed one, and ``megatron_first``, the Megatron
    modules the probe process had imported before it (``[]``: it came first; None: not seen). Changes no status."""

    installed: bool
    before_megatron: bool
    megatron_first: list[str] | None
    reason: str


@dataclass(frozen=True)
class Bridge:
    """The bridge verl's default engine config builds Megatron models through (``bridge``): ``default``
    ``"Megatron-Bridge"``, ``"mbridge"`` or None (0.6.x: no choice); ``import_error``: where that is Megatron-Bridge
    and verl's Megatron engine imported, how ``import verl.models.mcore.bridge`` failed; ``meaning``: what that
    means, with both ways out (verl #6931)."""

    default: str | None = None
    import_error: ImportFailure | None = None
    meaning: str | None = None


@dataclass(frozen=True)
class TorchNpu:
    """torch_npu there (``torch_npu``): ``version`` is the loaded one's ``__version__`` (a real one names the torch
    it was built for; None: not loaded)."""

    loaded: bool
    importable: bool
    version: str | None = None


@dataclass(frozen=True)
class Findings:
    """What npu_shim's report code read in the probed interpreter, beside the critic's lookup: a full report.

    ``engine_device``: the device the engine registry looks up (``VERL_ENGINE_DEVICE`` on 0.9); ``needed_but_off``:
    the fixes ``NPU_SHIM_DISABLED_FIXES`` turns off whose change this verl lacks (the doctor judges them; the hook
    never runs a fix turned off), and whether a Megatron critic on an NPU then fails. Where verl did not
    import, only ``verl``, ``shim``, ``fixes``, ``stack`` and ``torch_npu`` are read; the rest keeps its defaults.
    """

    verl: VerlFacts
    shim: ShimState
    torch_npu: TorchNpu
    stack: MindSpeedStack = field(metadata=MERGED)
    fixes: list[FixRow] = field(default_factory=list)
    layout: Layout = field(default_factory=Layout)
    unrecognised: list[UnrecognisedFix] = field(default_factory=list)
    mindspeed: MindSpeedOffer = field(default_factory=MindSpeedOffer)
    bridge: Bridge = field(default_factory=Bridge)
    engine_device: str | None = None
    registry: list[RegistryRow] = field(default_factory=list)
    needed_but_off: list[UnrecognisedFix] = field(default_factory=list)  # turned off, and this verl lacks the change


# -- the whole report ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """The doctor's report: one flat JSON object.

    ``status``: ``"ok"``, ``"not judged"`` (no NPU seen), ``"problem"`` (exit 1), ``"not applicable"`` (no verl) or
    ``"error"`` (exit 2: no report, or no judgement); ``exit_code`` follows from it. ``probed_in``: ``"a fresh
    interpreter"`` or ``"a Ray worker of the cluster at ..."``; ``error``: why there is no full report.
    """

    status: str = ERROR  # what the probe could not judge: its lookup-only shape carries no status
    error: str | None = None
    npu_shim_version: str | None = field(default=None, metadata=SECTION)
    probed_in: str | None = field(default=None, metadata=SECTION)
    probe: ProbeState | None = field(default=None, metadata=SECTION)
    routes: Routes | None = field(default=None, metadata=SECTION)
    lookup: CriticLookup | None = field(default=None, metadata=MERGED)
    findings: Findings | None = field(default=None, metadata=MERGED)
    megatron_adaptor: AdaptorOrder | None = field(default=None, metadata=SECTION)
    exit_code: int = field(init=False)

    def __post_init__(self) -> None:
        if self.status not in EXIT_CODES:
            raise ValueError(f"Report: unknown status {self.status!r} (one of {', '.join(EXIT_CODES)})")
        object.__setattr__(self, "exit_code", EXIT_CODES[self.status])

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        return from_json(cls, data)
