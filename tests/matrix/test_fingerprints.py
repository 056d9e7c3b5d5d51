"""The fixes' tables of known verl functions, against this release's own file.

Each supported Python compiles the installed file (``transformer_impl.py``, ``util.py``: nothing of verl
runs) through ``scripts/fingerprints.py``. For each table, this release's function must be
known exactly when the table names this release, and unknown otherwise; a release without
the function must be named by no table of it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from npu_shim.fingerprint import KnownCode
from npu_shim.fixes.batch_invariant_repatch import VERL_0_8_0
from npu_shim.fixes.lm_engine_repatch import KNOWN_INITS
from npu_shim.fixes.megatron_critic import VERL_0_7_1 as CRITIC_0_7_1
from npu_shim.fixes.megatron_critic import WITH_5870, WITHOUT_THE_KEYWORD
from npu_shim.fixes.mindspeed_line_repatch import VERL_0_9
from npu_shim.fixes.moe_layer_offset import VERL_0_7_1 as ROUTER_0_7_1
from npu_shim.fixes.moe_layer_offset import WITH_5580
from npu_shim.fixes.npu_causal_mask import VERL_0_8_0 as MASK_0_8_0
from npu_shim.fixes.npu_causal_mask import WITH_7055
from npu_shim.fixes.vlm_mask_on_npu import WITH_7372, WITHOUT_7372

VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))


def interpreter(version: tuple[int, int]) -> str:
    if sys.version_info[:2] == version:
        return sys.executable
    found = sorted(PYENV_ROOT.glob(f"versions/{version[0]}.{version[1]}.*/bin/python"))
    if not found:
        pytest.skip(f"no Python {version[0]}.{version[1]} on this machine (looked in {PYENV_ROOT}/versions)")
    return str(found[-1])


ENGINE_FILE = "workers/engine/mindspeed/transformer_impl.py"
UTIL_FILE = "models/mcore/util.py"
MEGATRON_ENGINE_FILE = "workers/engine/megatron/transformer_impl.py"
ROUTER_REPLAY_FILE = "utils/megatron/router_replay_utils.py"

VALUE_FORWARD = "MegatronEngineWithValueHead.forward_step"


def source_file(member: str) -> Path:
    spec = importlib.util.find_spec("verl")
    return Path(next(iter(spec.submodule_search_locations))) / member


def defined(path: Path, qualname: str) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    for name in qualname.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name), None)
        if node is None:
            return False
        body = node.body
    return True


TABLES: dict[str, tuple[str, str, KnownCode]] = {
    "KNOWN_INITS": (ENGINE_FILE, "MindspeedEngineWithLMHead.__init__", KNOWN_INITS),
    "VERL_0_8_0": (ENGINE_FILE, "_mindspeed_repatch", VERL_0_8_0),
    "VERL_0_9": (ENGINE_FILE, "_mindspeed_repatch", VERL_0_9),
    "npu_causal_mask.VERL_0_8_0": (UTIL_FILE, "_build_npu_attn_mask", MASK_0_8_0),
    "npu_causal_mask.WITH_7055": (UTIL_FILE, "_build_npu_attn_mask", WITH_7055),
    "vlm_mask_on_npu.WITHOUT_7372": (UTIL_FILE, "build_vlm_attn_mask_thd", WITHOUT_7372),
    "vlm_mask_on_npu.WITH_7372": (UTIL_FILE, "build_vlm_attn_mask_thd", WITH_7372),
    "megatron_critic.VERL_0_7_1": (MEGATRON_ENGINE_FILE, VALUE_FORWARD, CRITIC_0_7_1),
    "megatron_critic.WITH_5870": (MEGATRON_ENGINE_FILE, VALUE_FORWARD, WITH_5870),
    "megatron_critic.WITHOUT_THE_KEYWORD": (MEGATRON_ENGINE_FILE, VALUE_FORWARD, WITHOUT_THE_KEYWORD),
    "moe_layer_offset.VERL_0_7_1": (ROUTER_REPLAY_FILE, "get_moe_num_layers_to_build", ROUTER_0_7_1),
    "moe_layer_offset.WITH_5580": (ROUTER_REPLAY_FILE, "get_moe_num_layers_to_build", WITH_5580),
}
VERSIONS = sorted({version for _, _, table in TABLES.values() for version in table})


def names(releases: str) -> list[str]:
    return releases.split(", ")


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"py{v[0]}.{v[1]}")
@pytest.mark.parametrize("table_name", list(TABLES))
def test_a_table_knows_this_releases_function_exactly_when_it_names_this_release(table_name, version):
    member, function, table = TABLES[table_name]
    named = any(VERL in names(releases) for releases in table.get(version, {}).values())
    path = source_file(member)
    if not path.is_file() or not defined(path, function):
        assert not named, f"{table_name} names verl {VERL}, which has no {function}"
        return
    script = [str(ROOT / "scripts" / "fingerprints.py"), str(path), "--function", function, "--json"]
    completed = subprocess.run(
        [sys.executable, *script, "--python", interpreter(version)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ((printed_version, by_file),) = json.loads(completed.stdout).items()
    assert printed_version == f"{version[0]}.{version[1]}"
    known = table.get(version, {}).get(by_file[path.name])
    assert (known is not None and VERL in names(known)) is named, (table_name, known)
    assert named or known is None, f"{table_name} takes verl {VERL}'s {function} for {known}'s"
