"""Run one verl release on a simulated NPU under one activation of npu_shim; print a JSON report.

Used by the matrix tests (one subprocess per activation, since verl decides at
import time whether there is an NPU) and by ``demo.py``. Modes:

- ``none``: the shim is not loaded at all;
- ``sitecustomize``: the caller put the checkout on PYTHONPATH;
- ``import-before``: ``import npu_shim`` before verl;
- ``import-after``: ``import npu_shim`` after ``verl.workers.engine``.

The simulated NPU (``npu_shim.testing``'s stand-ins) must be on PYTHONPATH.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODES = ("none", "sitecustomize", "import-before", "import-after")


def verl_files_digest() -> str:
    """A hash of every file of the installed verl, bytecode caches aside (Python writes those itself)."""
    spec = importlib.util.find_spec("verl")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def tiny_hf_model(directory: Path, architecture: str) -> str:
    """A config-only Hugging Face model directory: engine constructors read the config, not weights."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": [architecture],
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 256,
        "max_position_embeddings": 128,
        "torch_dtype": "bfloat16",
    }
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def qualified(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def build_engine(model_type: str, override: dict, model_dir: Path) -> dict[str, Any]:
    """Build one engine for real with verl's own config classes, on one gloo rank; report its repatch calls."""
    from megatron.core import parallel_state
    from mindspeed.megatron_adaptor import calls
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import HFModelConfig, McoreEngineConfig, McoreOptimizerConfig
    from verl.workers.engine import EngineRegistry

    architecture = "Qwen2ForTokenClassification" if model_type == "value_model" else "Qwen2ForCausalLM"
    model_config = HFModelConfig(path=tiny_hf_model(model_dir / architecture, architecture), load_tokenizer=False)
    engine_config = McoreEngineConfig(override_transformer_config=override)
    user_config_before = copy.deepcopy(engine_config.override_transformer_config)
    optimizer_config = McoreOptimizerConfig(lr=1e-6)
    checkpoint_config = CheckpointConfig()

    parallel_state.destroy_model_parallel()
    calls.clear()
    report: dict[str, Any] = {"override": override}
    try:
        engine = EngineRegistry.new(
            model_type, "megatron", model_config, engine_config, optimizer_config, checkpoint_config
        )
    except Exception as error:  # reported, not raised: the test says what was expected
        report["error"] = f"{type(error).__name__}: {error}"
        return report
    report["engine"] = qualified(type(engine))
    report["parallel_state_initialized_after"] = parallel_state.model_parallel_is_initialized()
    report["repatch_calls"] = jsonable(calls)
    report["user_config_unchanged"] = engine_config.override_transformer_config == user_config_before
    report["user_config_after"] = jsonable(engine_config.override_transformer_config)
    return report


def resolve(model_type: str) -> dict[str, Any]:
    from verl.workers.engine import EngineRegistry

    try:
        cls = EngineRegistry.get_engine_cls(model_type, "megatron")
    except (AssertionError, ValueError) as error:  # verl 0.9 raises ValueError for an unknown device
        return {"error": f"{type(error).__name__}: {error}"}
    from verl.workers.engine.megatron import transformer_impl as megatron_impl

    base = (
        megatron_impl.MegatronEngineWithValueHead
        if model_type == "value_model"
        else megatron_impl.MegatronEngineWithLMHead
    )
    return {
        "class": qualified(cls),
        "subclass_of_verl_base": issubclass(cls, base),
        "added_by_npu_shim": getattr(cls, "__npu_shim__", False),
        "own_init_device_mesh": qualified_function(cls.__dict__.get("_init_device_mesh")),
        "own_init": "__init__" in cls.__dict__,
    }


def qualified_function(function: Any) -> str | None:
    return None if function is None else f"{function.__module__}.{function.__qualname__}"


def exports() -> dict[str, Any]:
    names = {
        "verl.workers.engine": ["MindspeedEngineWithValueHead", "MegatronEngineWithValueHead"],
        "verl.workers.engine.mindspeed": ["MindspeedEngineWithValueHead"],
        "verl.workers.engine.megatron": ["MegatronEngineWithValueHead"],
        "verl.workers.engine.mindspeed.transformer_impl": ["MindspeedEngineWithValueHead", "_mindspeed_repatch"],
    }
    found = {}
    for module_name, wanted in names.items():
        module = sys.modules[module_name]
        for name in wanted:
            value = getattr(module, name, None)
            found[f"{module_name}.{name}"] = {
                "present": value is not None,
                "in_all": name in module.__all__ if hasattr(module, "__all__") and not name.startswith("_") else None,
                "defined_in": getattr(value, "__module__", None),
            }
    return found


def direct_repatch_with_context_parallel() -> dict[str, Any]:
    """``_mindspeed_repatch`` with CP=2 called directly: one gloo rank cannot build a CP=2 engine."""
    from mindspeed.megatron_adaptor import calls
    from verl.workers.config import McoreEngineConfig
    from verl.workers.engine.mindspeed import transformer_impl

    config = McoreEngineConfig(context_parallel_size=2, override_transformer_config={"use_flash_attn": True})
    calls.clear()
    transformer_impl._mindspeed_repatch(config)
    return {"repatch_calls": jsonable(calls)}


def main(mode: str) -> dict[str, Any]:
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}, not {mode!r}")
    if mode.startswith("import"):
        sys.path.insert(0, str(ROOT))
    report: dict[str, Any] = {"mode": mode, "verl_digest_before": verl_files_digest()}
    if mode == "import-before":
        import npu_shim

    import torch
    import verl
    import verl.workers.engine
    from verl.utils.device import get_device_name

    if mode == "import-after":
        import npu_shim

    report["verl_version"] = verl.__version__
    report["torch_npu_simulated"] = getattr(sys.modules.get("torch_npu"), "SIMULATED", False)
    report["device"] = get_device_name()
    report["shim_loaded"] = "npu_shim" in sys.modules
    if report["shim_loaded"]:
        import npu_shim
        from npu_shim import hook

        report["activated_via"] = npu_shim.activated_via()
        report["outcomes"] = [outcome.__dict__ for outcome in hook.outcomes]
    report["value_model"] = resolve("value_model")
    report["language_model"] = resolve("language_model")
    report["exports"] = exports()

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    engines: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as model_dir:
        for model_type in ("value_model", "language_model"):
            for case, override in {
                "defaults": {},
                "attention_backend": {"attention_backend": "flash"},
                "batch_invariant": {"use_flash_attn_npu_batch_invariant": True},
            }.items():
                engines[f"{model_type}/{case}"] = build_engine(model_type, override, Path(model_dir))
    report["engines"] = engines
    if hasattr(sys.modules["verl.workers.engine.mindspeed.transformer_impl"], "_mindspeed_repatch"):
        report["context_parallel"] = direct_repatch_with_context_parallel()
    torch.distributed.destroy_process_group()
    report["verl_digest_after"] = verl_files_digest()
    return report


if __name__ == "__main__":
    result = main(sys.argv[1])
    output = sys.argv[2] if len(sys.argv) > 2 else None
    text = json.dumps(result, indent=2, default=str)
    if output:
        Path(output).write_text(text)
    else:
        print(text)
