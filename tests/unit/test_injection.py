"""The three fixes on synthetic layouts of every verl generation, under each activation."""

from __future__ import annotations

import subprocess

import pytest
from helpers import ROOT, clean_env, pyenv_python

UNKNOWN_DEVICE = "Unknown device: npu for model_type: value_model and backend: megatron"

BUILD_BOTH = """
import verl.workers.engine
from verl import events
from verl.workers.engine import EngineRegistry
from verl.workers.engine.megatron.transformer_impl import EngineConfig
from megatron.core import parallel_state
from mindspeed.megatron_adaptor import calls
built = {}
for model_type in ("value_model", "language_model"):
    user_config = {"attention_backend": "flash"}
    events.clear(); calls.clear(); parallel_state.destroy_model_parallel()
    try:
        EngineRegistry.new(model_type, "megatron", None, EngineConfig(user_config), None, None)
    except AssertionError as error:
        built[model_type] = str(error)
        continue
    built[model_type] = {"events": list(events), "user_config": user_config,
                         "calls": [{k: str(v) for k, v in c.items()} for c in calls]}
print(__import__("json").dumps(built))
"""

ACTIVATIONS = {
    "sitecustomize": ("sitecustomize", ""),
    "import-before": ("import", "import npu_shim\n"),
    "import-after": ("import", "import verl.workers.engine\nimport npu_shim\n"),
}


@pytest.mark.parametrize("layout", ["0.6", "0.7.1"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_value_engine_is_injected_and_both_engines_repatch_once_before_the_mesh(
    synthetic, run_with, layout, activation
):
    mode, prelude = ACTIVATIONS[activation]
    run = run_with(prelude + BUILD_BOTH, synthetic(layout), activation=mode)
    built, report = (__import__("json").loads(line) for line in run.stdout.strip().splitlines()[-2:])

    assert report["value_model"] == {
        "name": "MindspeedEngineWithValueHead",
        "module": "verl.workers.engine.mindspeed.transformer_impl",
        "shim": True,
        "bases": ["MegatronEngineWithValueHead", "MegatronEngineWithLMHead"],
    }
    assert report["activated_via"] == ("sitecustomize" if mode == "sitecustomize" else "import")
    assert {fix: verdict for fix, (verdict, _) in report["outcomes"].items()} == {
        "shared_repatch": "applied",
        "value_engine": "applied",
        "lm_engine_repatch": "applied",
        "megatron_critic": "not applicable",  # a synthetic tree, not 0.7.1's exact code
        "mindspeed_line_repatch": "not applicable",  # the shim's own _mindspeed_repatch has #6674 and the mend
        "npu_smi_card": "not applicable",  # the tree's verl.utils.device has no get_npu_versions (0.6's)
    }
    expected_call = {"attention_backend": "AttnBackend.flash", "use_flash_attn": "True"}
    for model_type in ("value_model", "language_model"):
        assert built[model_type]["events"] == ["repatch", "mesh"], model_type
        assert built[model_type]["calls"] == [{**expected_call, "_parallel_state_initialized": "False"}]
        assert built[model_type]["user_config"] == {"attention_backend": "flash"}, "the user's config was written"


def test_without_the_shim_verl_fails_as_upstream_reports(synthetic, run_with):
    run = run_with(BUILD_BOTH, synthetic("0.7.1"), activation="none")
    built, report = (__import__("json").loads(line) for line in run.stdout.strip().splitlines()[-2:])
    assert report["value_model"] == {"error": UNKNOWN_DEVICE}
    assert built["value_model"] == UNKNOWN_DEVICE
    # The bugs the LM fix removes: repatch after the mesh, and the user's config written into.
    assert built["language_model"]["events"] == ["mesh", "repatch"]
    assert built["language_model"]["user_config"] == {"attention_backend": "flash", "use_flash_attn": True}
    assert report["loaded"] == []


def test_pre_6135_main_gets_the_value_engine_and_keeps_its_own_lm_engine(synthetic, run_with):
    run = run_with(BUILD_BOTH, synthetic("main-pre-6135"))
    built, report = (__import__("json").loads(line) for line in run.stdout.strip().splitlines()[-2:])
    assert report["value_model"]["shim"] is True
    assert report["outcomes"]["lm_engine_repatch"][0] == "native"
    assert built["language_model"]["events"] == ["repatch", "mesh"]  # verl's own inline code
    own = __import__("json").loads(run_with(OWN_CODE, synthetic("main-pre-6135"), report=False).stdout)
    assert own["lm_init_device_mesh"] == VERLS_OWN
    assert built["value_model"]["events"] == ["repatch", "mesh"]


# verl's own methods and functions in its MindSpeed module, and where their code comes from.
OWN_CODE = """
import json
from verl.workers.engine.mindspeed import transformer_impl as impl
def origin(function):
    return [function.__module__, function.__code__.co_filename == impl.__file__, hasattr(function, "__npu_shim__")]
print(json.dumps({
    "lm_init_device_mesh": origin(impl.MindspeedEngineWithLMHead.__dict__["_init_device_mesh"]),
    "mindspeed_repatch": origin(getattr(impl, "_mindspeed_repatch", origin)),
}))
"""
VERLS_OWN = ["verl.workers.engine.mindspeed.transformer_impl", True, False]


def test_native_verl_is_left_alone(synthetic, run_with):
    run = run_with("import verl.workers.engine\n" + OWN_CODE, synthetic("0.9"))
    report = run.report
    own = __import__("json").loads(run.stdout.strip().splitlines()[-2])
    assert own == {"lm_init_device_mesh": VERLS_OWN, "mindspeed_repatch": VERLS_OWN}
    assert report["value_model"]["shim"] is False
    assert {fix: verdict for fix, (verdict, _) in report["outcomes"].items()} == {
        "shared_repatch": "native",
        "value_engine": "native",
        "lm_engine_repatch": "native",
        "megatron_critic": "not applicable",  # a synthetic tree, not 0.8.0's exact code
        "mindspeed_line_repatch": "not applicable",  # nor 0.9.x's: recognised by their code, not by their names
        "npu_smi_card": "not applicable",  # the tree's verl.utils.device has no get_npu_versions (0.6's)
    }
    assert "Traceback" not in run.stderr


def test_a_repatch_function_it_does_not_know_is_left_alone(synthetic, run_with):
    code = """
    import verl.workers.engine
    from verl.workers.engine.mindspeed import transformer_impl
    print(__import__("json").dumps(transformer_impl._mindspeed_repatch.__module__))
    """
    run = run_with(code, synthetic("0.8-edited"))
    verdict, reason = run.report["outcomes"]["mindspeed_line_repatch"]
    where = "verl.workers.engine.mindspeed.transformer_impl._mindspeed_repatch"
    assert (verdict, reason) == (
        "not applicable",
        f"{where} is not the code of a verl release npu_shim knows; left as verl ships it",
    )
    assert (
        __import__("json").loads(run.stdout.strip().splitlines()[-2])
        == "verl.workers.engine.mindspeed.transformer_impl"
    )


@pytest.mark.parametrize(
    ("layout", "with_mindspeed", "fix", "reason"),
    [
        ("0.5", True, "value_engine", "no (model_type, backend, device) engine registry"),
        ("no-megatron", True, "value_engine", "verl's Megatron engine did not import"),
        ("renamed-base", True, "value_engine", "has no MegatronEngineWithValueHead"),
        ("0.6", False, "value_engine", "MindSpeed engine module did not import"),
    ],
)
def test_layouts_it_cannot_fix_get_a_reason_and_no_exception(synthetic, run_with, layout, with_mindspeed, fix, reason):
    code = "import verl.workers.engine\n"
    tree = synthetic(layout, with_mindspeed=with_mindspeed)
    if layout == "0.5":
        run = run_with(
            code + "import npu_shim.hook as h; print(__import__('json').dumps([o.__dict__ for o in h.outcomes]))",
            tree,
            report=False,
        )
        outcomes = {o["fix"]: o for o in run.report}
    else:
        run = run_with(code, tree)
        outcomes = {fix: {"verdict": v, "reason": r} for fix, (v, r) in run.report["outcomes"].items()}
        assert "error" in run.report["value_model"], "nothing may be registered"
    assert outcomes[fix]["verdict"] == "not applicable"
    assert reason in outcomes[fix]["reason"]
    assert "Traceback" not in run.stderr and "npu_shim failed" not in run.stderr


def test_without_mindspeed_the_engine_is_injected_and_repatch_is_skipped(synthetic, run_with):
    code = """
    import verl.workers.engine
    from verl import events
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.megatron.transformer_impl import EngineConfig
    EngineRegistry.new("value_model", "megatron", None, EngineConfig({}), None, None)
    print(__import__("json").dumps(list(events)))
    """
    run = run_with(code, synthetic("0.7.1", with_mindspeed=False))
    events = __import__("json").loads(run.stdout.strip().splitlines()[-2])
    assert events == ["mesh"]
    assert run.report["value_model"]["shim"] is True


def test_an_lm_engine_init_with_one_constant_changed_is_left_alone_and_named(synthetic, run_with):
    """Same names as 0.7.1's __init__, one constant changed (use_flash_attn = False): a patched verl 0.7.1.

    It still repatches in __init__ (no _init_device_mesh of its own), so the change is missing: the fix
    says it does not know the code, rather than "not applicable", and warns once.
    """
    run = run_with(BUILD_BOTH, synthetic("edited-0.7.1"))
    built, report = (__import__("json").loads(line) for line in run.stdout.strip().splitlines()[-2:])
    verdict, reason = report["outcomes"]["lm_engine_repatch"]
    assert verdict == "unrecognised"
    assert reason.startswith("MindspeedEngineWithLMHead.__init__ is not the code of verl 0.6.0, 0.6.1, 0.7.0, 0.7.1")
    assert "the actor fails at its first forward" in reason
    warnings = [line for line in run.stderr.splitlines() if "did not apply lm_engine_repatch" in line]
    assert len(warnings) == 1, run.stderr
    assert report["outcomes"]["value_engine"][0] == "applied"
    # The edited __init__ runs as written: after the mesh, with its own constant.
    assert built["language_model"]["events"] == ["mesh", "repatch"]
    assert built["language_model"]["calls"][0]["use_flash_attn"] == "False"


@pytest.mark.parametrize("layout", ["0.6", "0.7.1"])
def test_the_releases_lm_engine_init_is_recognised_by_its_code(synthetic, run_with, layout):
    run = run_with("import verl.workers.engine\n", synthetic(layout))
    verdict, reason = run.report["outcomes"]["lm_engine_repatch"]
    assert verdict == "applied"
    assert ("0.7.1" if layout == "0.7.1" else "0.6.0, 0.6.1, 0.7.0") in reason


@pytest.mark.parametrize("version", ["3.10.13", "3.11.7", "3.12.1", "3.13.0"])
@pytest.mark.parametrize("layout", ["0.6", "0.7.1", "edited-0.7.1"])
def test_every_supported_python_recognises_the_releases_code(synthetic, version, layout):
    """One table of fingerprints for every Python: each recognises the releases' __init__ (read, not imported)."""
    source = synthetic(layout) / "verl" / "workers" / "engine" / "mindspeed" / "transformer_impl.py"
    code = f"""
import sys; sys.path.insert(0, {str(ROOT)!r})
from npu_shim.fingerprint import source_fingerprint
from npu_shim.fixes.lm_engine_repatch import LM_INIT
from npu_shim.recognition import known_code
fingerprint = source_fingerprint(open({str(source)!r}).read(), LM_INIT.qualname)
print(", ".join(release for release, known in known_code()[LM_INIT.source].items() if known == fingerprint))
"""
    completed = subprocess.run(
        [str(pyenv_python(version)), "-c", code], env=clean_env(), capture_output=True, text=True, check=True
    )
    expected = {"0.6": "0.6.0, 0.6.1, 0.7.0", "0.7.1": "0.7.1", "edited-0.7.1": ""}[layout]
    assert completed.stdout.strip() == expected


# Makes known_code.json recognise the synthetic tree's _mindspeed_repatch, as the real release's is
# recognised (the tree's code is not verl's, and no verl code is copied here).
RECOGNISE = """
import json, sys
from npu_shim.fingerprint import source_fingerprint
from npu_shim.fixes.mindspeed_line_repatch import REPATCH
from npu_shim.patcher import get_original
from npu_shim.recognition import known_code
fingerprint = source_fingerprint(open({path!r}).read(), "_mindspeed_repatch")
known_code()[REPATCH.source].update(dict.fromkeys({releases!r}, fingerprint))
import verl.workers.engine
from verl.workers.engine.mindspeed import transformer_impl as impl
from npu_shim.fixes.shared_repatch import mindspeed_repatch
kept = get_original(impl, "_mindspeed_repatch")
print(json.dumps({{"rebound": impl._mindspeed_repatch is mindspeed_repatch,
                   "kept": kept.__code__.co_filename == impl.__file__}}))
"""


@pytest.mark.parametrize(
    ("module", "releases", "layout"),
    [
        ("mindspeed_line_repatch", ["0.8.0"], "0.8-edited"),
        ("mindspeed_line_repatch", ["0.9.0", "0.9.1"], "0.9"),
    ],
)
def test_a_recognised_mindspeed_repatch_is_rebound_to_the_shims(synthetic, run_with, module, releases, layout):
    tree = synthetic(layout)
    path = tree / "verl" / "workers" / "engine" / "mindspeed" / "transformer_impl.py"
    run = run_with(RECOGNISE.format(releases=releases, path=str(path)), tree)
    assert __import__("json").loads(run.stdout.strip().splitlines()[-2]) == {"rebound": True, "kept": True}
    verdict, reason = run.report["outcomes"][module]
    assert verdict == "applied"
    assert f"(verl {', '.join(releases)}'s)" in reason
