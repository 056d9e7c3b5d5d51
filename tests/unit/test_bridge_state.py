"""The doctor's bridge check (npu_shim/doctor/bridge_state.py) against tiny stand-ins of verl's modules: which bridge
verl's default config builds through, and how verl's import of Megatron-Bridge fails, named with both ways out."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import types
from pathlib import Path

import pytest

from npu_shim.doctor import bridge_state


def engine_config(**defaults: bool) -> type:
    """A stand-in of verl's ``McoreEngineConfig`` with these boolean fields and defaults."""
    return dataclasses.make_dataclass(
        "McoreEngineConfig", [(name, bool, dataclasses.field(default=value)) for name, value in defaults.items()]
    )


@pytest.fixture
def verl_config(monkeypatch: pytest.MonkeyPatch):
    def install(config: type) -> None:
        module = types.ModuleType("verl.workers.config")
        module.McoreEngineConfig = config
        monkeypatch.setitem(sys.modules, "verl.workers.config", module)

    return install


@pytest.mark.parametrize(
    ("defaults", "bridge"),
    [
        ({"use_mbridge": True, "vanilla_mbridge": False}, "Megatron-Bridge"),  # verl 0.9.x
        ({"use_mbridge": True, "vanilla_mbridge": True}, "mbridge"),  # 0.7.x, 0.8.0
        ({"use_mbridge": False}, None),  # 0.6.x: no choice of bridge
    ],
)
def test_the_default_bridge_is_read_from_verls_engine_config(verl_config, defaults, bridge):
    verl_config(engine_config(**defaults))
    assert bridge_state.default_bridge() == bridge


def test_without_verls_config_module_there_is_no_default_to_name(monkeypatch):
    monkeypatch.delitem(sys.modules, "verl.workers.config", raising=False)
    assert bridge_state.default_bridge() is None


def fake_verl_bridge(root: Path, body: str) -> None:
    """A verl package whose ``verl.models.mcore.bridge`` runs ``body`` (verl's imports Megatron-Bridge there)."""
    package = root / "verl"
    for part in ("", "models", "models/mcore"):
        (package / part).mkdir(parents=True, exist_ok=True)
        (package / part / "__init__.py").write_text("")
    (package / "models" / "mcore" / "bridge.py").write_text(body)


def fake_verl_bridge_missing(root: Path, missing: str) -> None:
    """verl's bridge module, where importing Megatron-Bridge fails for want of ``missing``."""
    fake_verl_bridge(root, f'raise ModuleNotFoundError("No module named {missing!r}", name={missing!r})\n')


@pytest.fixture
def megatron_engine_imported(monkeypatch, tmp_path, verl_config):
    """verl 0.9's default config, its Megatron engine module imported, and a fresh place for the fake bridge."""
    verl_config(engine_config(use_mbridge=True, vanilla_mbridge=False))
    for name in [name for name in sys.modules if name == "verl" or name.startswith("verl.models")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, bridge_state.MEGATRON_ENGINE_MODULE, types.ModuleType("megatron engine"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_missing_megatron_bridge_is_named_with_both_ways_out(megatron_engine_imported, capsys):
    # verl's module prints to stdout before it re-raises; the probe's stdout carries the report
    fake_verl_bridge(megatron_engine_imported, "print('Megatron-Bridge package not found')\nimport megatron.bridge\n")
    state = bridge_state.bridge_state()
    assert state["default"] == "Megatron-Bridge"
    assert state["import_error"]["module"] == "verl.models.mcore.bridge"
    assert state["import_error"]["missing"] in ("megatron", "megatron.bridge")  # no megatron at all in this env
    assert "Megatron-Bridge is not installed" in state["meaning"]
    # with what verl's Ascend images install beside it (Megatron-Bridge imports them unguarded)
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    assert f"{pip} --no-deps megatron-bridge && {pip} 'nvidia-modelopt[torch]>=0.37.0' " in state["meaning"]
    assert "install Megatron-Bridge" in state["meaning"]
    assert "actor_rollout_ref.actor.megatron.vanilla_mbridge=True" in state["meaning"]
    assert "critic.megatron.vanilla_mbridge=True" in state["meaning"]
    assert capsys.readouterr().out == ""


def test_a_megatron_bridge_that_cannot_import_is_named_by_the_import_that_fails(megatron_engine_imported):
    # Megatron-Bridge 0.6.2 on megatron-core 0.18: a module only megatron-core 0.19 has
    missing = "megatron.training.models.gpt"
    fake_verl_bridge_missing(megatron_engine_imported, missing)
    state = bridge_state.bridge_state()
    assert state["import_error"]["missing"] == missing
    assert (
        f"`import verl.models.mcore.bridge` fails: ModuleNotFoundError: No module named '{missing}'"
        in (state["meaning"])
    )
    assert "Megatron-Bridge is not installed" not in state["meaning"]
    assert "vanilla_mbridge=True" in state["meaning"]


def test_an_importable_bridge_or_no_megatron_engine_is_no_failure(megatron_engine_imported, monkeypatch):
    fake_verl_bridge(megatron_engine_imported, "AutoBridge = object\n")
    assert bridge_state.bridge_state() == {"default": "Megatron-Bridge", "import_error": None, "meaning": None}
    monkeypatch.delitem(sys.modules, bridge_state.MEGATRON_ENGINE_MODULE)
    monkeypatch.delitem(sys.modules, "verl.models.mcore.bridge")
    fake_verl_bridge(megatron_engine_imported, "raise ImportError('not reached: no Megatron engine to build')\n")
    assert bridge_state.bridge_state()["import_error"] is None


def test_a_megatron_bridge_without_transformer_engine_names_transformer_engine_npu(megatron_engine_imported):
    # Megatron-Bridge 0.5.0 imports transformer_engine.pytorch unguarded (its LoRA layers)
    fake_verl_bridge_missing(megatron_engine_imported, "transformer_engine")
    meaning = bridge_state.bridge_state()["meaning"]
    assert "Megatron-Bridge is installed but `import verl.models.mcore.bridge` fails: ModuleNotFoundError" in meaning
    assert "Transformer Engine is not installed" in meaning
    assert "TransformerEngineNPU, module transformer_engine" in meaning
    assert "vanilla_mbridge=True" in meaning


@pytest.mark.parametrize(("version", "bridge_can_import"), [("0.12.0", False), ("0.17.1", False), ("0.18.0", True)])
def test_below_the_megatron_that_megatron_bridge_imports_on_only_mbridge_is_offered(
    megatron_engine_imported, monkeypatch, version, bridge_can_import
):
    """verl 0.9.1's A5 image pairs megatron-core 0.12.0: installing Megatron-Bridge there cannot help."""
    monkeypatch.setitem(sys.modules, "megatron.core.package_info", types.SimpleNamespace(__version__=version))
    fake_verl_bridge(megatron_engine_imported, "import megatron.bridge\n")
    meaning = bridge_state.bridge_state()["meaning"]
    assert "critic.megatron.vanilla_mbridge=True" in meaning
    assert ("install Megatron-Bridge" in meaning) is bridge_can_import
    assert (f"does not import beside megatron-core {version.rsplit('.', 1)[0]} (it needs 0.18" in meaning) is not (
        bridge_can_import
    )


def test_a_megatron_bridge_without_transformer_engine_is_not_told_to_install_itself(megatron_engine_imported):
    fake_verl_bridge_missing(megatron_engine_imported, "transformer_engine")
    meaning = bridge_state.bridge_state()["meaning"]
    assert "fix: install TransformerEngineNPU, or set vanilla_mbridge=True" in meaning
    assert "install Megatron-Bridge" not in meaning


@pytest.mark.parametrize(("missing", "package"), [("modelopt", "'nvidia-modelopt[torch]>=0.37.0'"),
                                                  ("hydra.core", "hydra-core")])  # fmt: skip
def test_a_megatron_bridge_without_what_the_images_install_beside_it_names_that(
    megatron_engine_imported, missing, package
):
    """Installed as the advice said (`pip install --no-deps megatron-bridge`), it fails for want of modelopt: the
    advice then names the import that fails and that package, never "install Megatron-Bridge" again."""
    fake_verl_bridge_missing(megatron_engine_imported, missing)
    meaning = bridge_state.bridge_state()["meaning"]
    assert f"fails: ModuleNotFoundError: No module named '{missing}'" in meaning
    assert f"fix: {shlex.quote(sys.executable)} -m pip install {package}, or set vanilla_mbridge=True" in meaning
    assert "install Megatron-Bridge" not in meaning and "--no-deps" not in meaning
