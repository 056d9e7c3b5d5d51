"""Small synthetic verl trees that mirror the engine-package layouts of real releases.

They reproduce only what npu_shim reads and touches: the registry in
``verl/workers/engine/base.py``, the Megatron engines (whose ``__init__`` calls
``_init_device_mesh``) and the MindSpeed module, plus a synthetic ``megatron``
(parallel state, ``AttnBackend``) and a recording ``mindspeed`` stand-in. Events
(``mesh``, ``repatch``) go to ``verl.events`` so tests can check their order.
The real releases are exercised by tests/matrix.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

LAYOUTS = (
    "0.5",  # old register(key) registry: nothing to do
    "0.6",  # unguarded mindspeed import; LM repatches at the end of __init__ with a fresh dict
    "0.7.1",  # guarded import; LM writes into the user's override_transformer_config
    "main-pre-6135",  # LM repatches in _init_device_mesh with inline code; no value engine
    "release-0.7.1",  # branch release/v0.7.1 (#5700): as main-pre-6135, but forces use_flash_attn=True
    "0.9",  # native: _mindspeed_repatch, value engine, register() asserts on duplicates
    "0.8-edited",  # as 0.9, but a _mindspeed_repatch without #6674 that is not 0.8.0's either
    "no-megatron",  # verl's Megatron engine fails to import
    "renamed-base",  # MegatronEngineWithValueHead renamed
    "edited-0.7.1",  # 0.7.1 with one constant of the LM engine's __init__ changed (a user's local edit)
    "patched-critic-0.7.1",  # 0.7.1 whose value engine has a forward_step of its own, no release's code
)

# Lookup as in verl 0.6-0.8; 0.9's reads VERL_ENGINE_DEVICE first (REGISTRY_LOOKUP_0_9).
REGISTRY_LOOKUP = """
    @classmethod
    def get_engine_cls(cls, model_type, backend):
        assert model_type in cls._engines, f"Unknown model_type: {model_type}"
        assert backend in cls._engines[model_type], f"Unknown backend: {backend}"
        device = get_device_name()
        assert device in cls._engines[model_type][backend], (
            f"Unknown device: {device} for model_type: {model_type} and backend: {backend}"
        )
        return cls._engines[model_type][backend][device]

    @classmethod
    def new(cls, model_type, backend, *args, **kwargs):
        return cls.get_engine_cls(model_type, backend)(*args, **kwargs)
"""

REGISTRY_LOOKUP_0_9 = REGISTRY_LOOKUP.replace(
    "device = get_device_name()", 'device = os.getenv("VERL_ENGINE_DEVICE") or get_device_name()'
)

REGISTRY_0_6 = """
class EngineRegistry:
    _engines = {}

    @classmethod
    def register(cls, model_type, backend, device="cuda"):
        def decorator(engine_class):
            assert issubclass(engine_class, BaseEngine)
            slots = cls._engines.setdefault(model_type, {})
            for b in backend if isinstance(backend, list) else [backend]:
                for d in device if isinstance(device, list) else [device]:
                    slots.setdefault(b, {}).setdefault(d, engine_class)
            return engine_class
        return decorator

"""

REGISTRY_0_9 = """
class EngineRegistry:
    _engines = {}

    @classmethod
    def register(cls, model_type, backend, device="cuda", vendor=None):
        def decorator(engine_class):
            slots = cls._engines.setdefault(model_type, {})
            for b in backend if isinstance(backend, list) else [backend]:
                for d in device if isinstance(device, list) else [device]:
                    key = (d, vendor) if vendor else d
                    assert key not in slots.setdefault(b, {}), f"The key({key}) has been already registed!"
                    slots[b][key] = engine_class
            return engine_class
        return decorator

"""

REGISTRY_0_5 = """
class EngineRegistry:
    _engines = {}

    @classmethod
    def register(cls, key):
        def decorator(engine_class):
            cls._engines[key] = engine_class
            return engine_class
        return decorator
"""

ENGINE_INIT = """
from .base import BaseEngine, EngineRegistry

__all__ = ["BaseEngine", "EngineRegistry"]

try:
    from .mindspeed import {mindspeed_exports}

    __all__ += {mindspeed_exports_list}
except ImportError:
    MindspeedEngineWithLMHead = None

try:
    from .megatron import {megatron_exports}

    __all__ += {megatron_exports_list}
except ImportError:
    MegatronEngine = None
"""

MEGATRON_IMPL = '''
{fail}
from megatron.core import parallel_state as mpu

from verl import events
from ..base import BaseEngine, EngineRegistry


class EngineConfig(dict):
    """The two things npu_shim reads of McoreEngineConfig: .get() and context_parallel_size."""

    def __init__(self, override_transformer_config=None, context_parallel_size=1):
        super().__init__(override_transformer_config=override_transformer_config or {{}})
        self.context_parallel_size = context_parallel_size

    @property
    def override_transformer_config(self):
        return self["override_transformer_config"]


class MegatronEngine(BaseEngine):
    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config):
        self.engine_config = engine_config
        self._init_device_mesh()

    def _init_device_mesh(self):
        events.append("mesh")
        mpu.initialize_model_parallel()


@EngineRegistry.register(model_type="language_model", backend="megatron")
class MegatronEngineWithLMHead(MegatronEngine):
    pass


@EngineRegistry.register(model_type="value_model", backend="megatron")
class {value_base}(MegatronEngineWithLMHead):
{value_body}'''

PATCHED_FORWARD = """\
    def forward_step(self, batch_iter, model, postprocess_micro_batch_func):
        return None, None  # a local patch: no release's code
"""

MINDSPEED_IMPORT_GUARDED = """
try:
    from mindspeed.megatron_adaptor import repatch
except ImportError:
    repatch = None
"""
MINDSPEED_IMPORT_UNGUARDED = "from mindspeed.megatron_adaptor import repatch\n"

# The LM engines' __init__ as the releases' code (npu_shim recognises it by bytecode and constants).
LM_INIT_0_6 = """
    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config):
        super().__init__(model_config, engine_config, optimizer_config, checkpoint_config)

        repatch_config = {"use_flash_attn": True}
        if self.engine_config.context_parallel_size > 1:
            repatch_config["context_parallel_size"] = self.engine_config.context_parallel_size

        repatch(repatch_config)
"""
LM_INIT_0_7_1 = """
    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config):
        super().__init__(model_config, engine_config, optimizer_config, checkpoint_config)

        repatch_config = self.engine_config.get("override_transformer_config", {})
        repatch_config["use_flash_attn"] = True
        if self.engine_config.context_parallel_size > 1:
            repatch_config["context_parallel_size"] = self.engine_config.context_parallel_size

        repatch(repatch_config)
"""
LM_MESH_PRE_6135 = """
    def _init_device_mesh(self):
        repatch_config = dict(self.engine_config.get("override_transformer_config", {}))
        repatch_config.setdefault("use_flash_attn", True)
        if self.engine_config.context_parallel_size > 1:
            repatch_config["context_parallel_size"] = self.engine_config.context_parallel_size
        repatch(repatch_config)
        super()._init_device_mesh()
"""
LM_MESH_RELEASE_0_7_1 = LM_MESH_PRE_6135.replace(
    'repatch_config.setdefault("use_flash_attn", True)', 'repatch_config["use_flash_attn"] = True'
)
# What each layout's verl.__version__ says: the two branches report the versions users see.
VERSIONS = {"main-pre-6135": "0.8.0.dev", "release-0.7.1": "0.7.1", "patched-critic-0.7.1": "0.7.1"}
# verl >= 0.8 with a _mindspeed_repatch that is neither 0.8.0's nor has #6674 (edited by hand).
EDITED_REPATCH_0_8 = """
def _mindspeed_repatch(engine_config):
    if repatch is not None:
        repatch(dict(engine_config.get("override_transformer_config", {}), use_flash_attn=True))
"""
NATIVE_0_9 = """
def _mindspeed_repatch(engine_config):
    if repatch is not None:
        config = dict(engine_config.get("override_transformer_config", {}))
        config["use_flash_attn"] = not config.get("use_flash_attn_npu_batch_invariant", False)
        repatch(config)


@EngineRegistry.register(model_type="language_model", backend="megatron", device="npu")
class MindspeedEngineWithLMHead(MegatronEngineWithLMHead):
    def _init_device_mesh(self):
        _mindspeed_repatch(self.engine_config)
        super()._init_device_mesh()


@EngineRegistry.register(model_type="value_model", backend="megatron", device="npu")
class MindspeedEngineWithValueHead(MegatronEngineWithValueHead):
    def _init_device_mesh(self):
        _mindspeed_repatch(self.engine_config)
        super()._init_device_mesh()
"""

VERL_EXTERNAL_MODULES = """
import importlib
import os

_modules = os.getenv("VERL_USE_EXTERNAL_MODULES", "")
if _modules:
    for _module in _modules.split(","):
        importlib.import_module(_module)
"""

# From 0.9.0 verl then loads the entry points of the "verl.plugins" group, as VERL_USE_EXTERNAL_PLUGINS allows:
# "auto" (its default) all of them, "none" none, else the comma-separated names; a plugin that fails is logged at
# debug level and skipped.
VERL_PLUGINS = """
import logging
from importlib.metadata import entry_points

_policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
_wanted = None if _policy == "auto" else set() if _policy == "none" else {n.strip() for n in _policy.split(",")}
for _point in entry_points(group="verl.plugins"):
    if _wanted is None or _point.name in _wanted:
        try:
            _point.load()
        except Exception as _error:
            logging.getLogger(__name__).debug("plugin %s failed: %s", _point.name, _error)
"""

SYNTHETIC_MEGATRON = {
    "megatron/__init__.py": '"""SYNTHETIC megatron for npu_shim unit tests (the matrix tests use megatron-core)."""\n',
    "megatron/core/__init__.py": "",
    "megatron/core/parallel_state.py": """
_initialized = False


def initialize_model_parallel(*args, **kwargs):
    global _initialized
    _initialized = True


def model_parallel_is_initialized():
    return _initialized


def destroy_model_parallel():
    global _initialized
    _initialized = False
""",
    "megatron/core/transformer/__init__.py": "",
    "megatron/core/transformer/enums.py": """
import enum


class AttnBackend(enum.Enum):
    flash = 1
    fused = 2
    unfused = 3
    local = 4
    auto = 5
""",
}

RECORDING_MINDSPEED = {
    "mindspeed/__init__.py": '"""STAND-IN MindSpeed for npu_shim unit tests: records repatch calls."""\n',
    "mindspeed/megatron_adaptor.py": """
import sys

calls = []


def repatch(config):
    from verl import events

    state = sys.modules["megatron.core.parallel_state"]
    calls.append(dict(config, _parallel_state_initialized=state.model_parallel_is_initialized()))
    events.append("repatch")
""",
}

# MindSpeed core_r0.17.0/core_r0.18.0: `mindspeed/__init__.py` is `import megatron_adaptor`, MegatronAdaptor's
# top-level module (a package of its own, installed before TransformerEngineNPU and MindSpeed). Written over
# RECORDING_MINDSPEED with write_files; MEGATRON_ADAPTOR is that package.
MINDSPEED_NEEDING_ADAPTOR = {
    "mindspeed/__init__.py": '"""STAND-IN MindSpeed core_r0.18.0: needs MegatronAdaptor."""\nimport megatron_adaptor\n',
}
MEGATRON_ADAPTOR = {"megatron_adaptor/__init__.py": '"""STAND-IN MegatronAdaptor."""\n'}
TRANSFORMER_ENGINE_NPU = {"transformer_engine/__init__.py": '"""STAND-IN TransformerEngineNPU."""\n'}


def write_layout(root: Path, layout: str, *, with_mindspeed: bool = True) -> Path:
    """Write a synthetic verl (and megatron, and a recording MindSpeed) under ``root``; return ``root``."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    # From 0.6.0 verl imports the modules named in VERL_USE_EXTERNAL_MODULES at `import verl`.
    external_modules = "" if layout == "0.5" else VERL_EXTERNAL_MODULES + (VERL_PLUGINS if layout == "0.9" else "")
    files: dict[str, str] = {
        "verl/__init__.py": (
            f'"""SYNTHETIC verl ({layout})."""\n__version__ = "{VERSIONS.get(layout, layout)}"\nevents = []\n'
            + external_modules
        ),
        "verl/utils/__init__.py": "",
        "verl/utils/device.py": 'def get_device_name():\n    return "npu"  # a (simulated) Ascend NPU\n',
        "verl/workers/__init__.py": "",
        **SYNTHETIC_MEGATRON,
    }
    if with_mindspeed:
        files.update(RECORDING_MINDSPEED)
    base_head = "import os\n\nfrom verl.utils.device import get_device_name\n\n\nclass BaseEngine:\n    pass\n"
    if layout == "0.5":
        files["verl/workers/engine/__init__.py"] = "from .base import BaseEngine, EngineRegistry\n"
        files["verl/workers/engine/base.py"] = base_head + REGISTRY_0_5
        return _write(root, files)

    native = layout in ("0.9", "0.8-edited")
    value_base = "MegatronCriticEngine" if layout == "renamed-base" else "MegatronEngineWithValueHead"
    mindspeed_exports = ["MindspeedEngineWithLMHead", *(["MindspeedEngineWithValueHead"] if native else [])]
    megatron_exports = ["MegatronEngine", "MegatronEngineWithLMHead", *([value_base] if native else [])]
    files["verl/workers/engine/__init__.py"] = ENGINE_INIT.format(
        mindspeed_exports=", ".join(mindspeed_exports),
        mindspeed_exports_list=mindspeed_exports,
        megatron_exports=", ".join(megatron_exports),
        megatron_exports_list=megatron_exports,
    )
    lookup = REGISTRY_LOOKUP_0_9 if layout == "0.9" else REGISTRY_LOOKUP
    files["verl/workers/engine/base.py"] = base_head + (REGISTRY_0_9 if native else REGISTRY_0_6) + lookup
    fail = 'raise ImportError("synthetic: megatron-core is not installed")' if layout == "no-megatron" else ""
    files["verl/workers/engine/megatron/__init__.py"] = (
        f"from .transformer_impl import {', '.join(megatron_exports)}\n\n__all__ = {megatron_exports!r}\n"
    )
    value_body = PATCHED_FORWARD if layout == "patched-critic-0.7.1" else "    pass\n"
    files["verl/workers/engine/megatron/transformer_impl.py"] = MEGATRON_IMPL.format(
        fail=fail, value_base=value_base, value_body=value_body
    )
    files["verl/workers/engine/mindspeed/__init__.py"] = (
        f"from .transformer_impl import {', '.join(mindspeed_exports)}\n\n__all__ = {mindspeed_exports!r}\n"
    )
    mindspeed_import = MINDSPEED_IMPORT_UNGUARDED if layout == "0.6" else MINDSPEED_IMPORT_GUARDED
    head = mindspeed_import + (
        "from ..base import EngineRegistry\n"
        f"from ..megatron.transformer_impl import MegatronEngineWithLMHead, {value_base}\n"
    )
    if native:
        body = NATIVE_0_9
        if layout == "0.8-edited":
            body = EDITED_REPATCH_0_8 + body[body.index("\n\n@EngineRegistry") :]
    else:
        lm_body = {"0.6": LM_INIT_0_6, "main-pre-6135": LM_MESH_PRE_6135, "release-0.7.1": LM_MESH_RELEASE_0_7_1}.get(
            layout, LM_INIT_0_7_1
        )
        if layout == "edited-0.7.1":
            lm_body = lm_body.replace(
                'repatch_config["use_flash_attn"] = True', 'repatch_config["use_flash_attn"] = False'
            )
        body = (
            '\n\n@EngineRegistry.register(model_type="language_model", backend="megatron", device="npu")\n'
            "class MindspeedEngineWithLMHead(MegatronEngineWithLMHead):" + lm_body
        )
    files["verl/workers/engine/mindspeed/transformer_impl.py"] = head + body
    return _write(root, files)


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path: text) under ``root``, over what is there; return ``root``."""
    return _write(root, files)


def _write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root
