"""Each fix that rebinds one verl function gives, on each release's code, the verdict docs/fixes.md's table gives.

The matrix holds the same table to the real releases (tests/matrix/test_upstream_fixes.py), minutes per release;
this holds the fixes' own decisions to it in a second. No verl code is copied: the function of a release is one of
ours that the table of fingerprints is made to name as that release's (every release with the same code included),
so the fix decides from its declaration and the table's groups of releases, as at run time. Megatron's part of a
decision (#5580: whether ``get_transformer_layer_offset`` takes ``vp_stage``/``pp_rank``) is a stand-in with the
signature of that column's megatron-core.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from helpers import fixes_by_release

from npu_shim.fingerprint import function_fingerprint
from npu_shim.fixes import megatron_critic, mindspeed_line_repatch, moe_layer_offset, npu_causal_mask, vlm_mask_on_npu
from npu_shim.patcher import APPLIED, Fix, Writer, is_ours
from npu_shim.recognition import KnownFunction, known_code

COLUMNS = fixes_by_release()
FIXES = [
    fix.FIX for fix in (npu_causal_mask, vlm_mask_on_npu, moe_layer_offset, megatron_critic, mindspeed_line_repatch)
]
# get_transformer_layer_offset as each megatron-core of the table has it: 0.12.1 takes neither keyword (#5580)
OFFSET = {
    "0.12.1": "def get_transformer_layer_offset(config):\n    return 0\n",
    "later": "def get_transformer_layer_offset(config, vp_stage=None, pp_rank=None):\n    return 0\n",
}


def declared(fix: Fix) -> KnownFunction:
    (known,) = fix.known
    return known


def load(path: Path, text: str) -> dict[str, Any]:
    path.write_text(text)
    namespace: dict[str, Any] = {}
    exec(compile(text, str(path), "exec"), namespace)  # from a file: the fix reads its source, as verl's
    return namespace


def verl_as_released(fix: Fix, release: str, megatron: str, tmp_path: Path) -> tuple[Any, Any]:
    """(what ``fix.apply`` takes, the owner of the function) for that release's code beside that megatron-core."""
    known = declared(fix)
    module = ModuleType(known.rebound_in[0])  # the module the fix judges
    offset = OFFSET["0.12.1" if megatron == "0.12.1" else "later"]
    module.get_transformer_layer_offset = load(tmp_path / "offset.py", offset)["get_transformer_layer_offset"]
    module.repatch = lambda config: None  # MindSpeed's, bound by verl's module: the simulated NPU has MindSpeed
    owner: Any = module
    if "." in known.qualname:
        owner = type(known.qualname.partition(".")[0], (), {})
        setattr(module, owner.__name__, owner)
    if known_code()[known.source].get(release) is not None:
        function = load(tmp_path / "code.py", f"def {known.attribute}(*args, **kwargs):\n    return args\n")
        setattr(owner, known.attribute, function[known.attribute])
    return module, owner


@pytest.mark.parametrize("column", list(COLUMNS))
@pytest.mark.parametrize("fix", FIXES, ids=lambda fix: fix.name)
def test_the_fix_on_a_releases_code_does_what_the_table_says(fix, column, tmp_path, monkeypatch):
    release, _, megatron = column.partition(", megatron-core ")
    known = declared(fix)
    module, owner = verl_as_released(fix, release, megatron, tmp_path)
    shipped = vars(owner).get(known.attribute)
    table = dict(known_code())
    released = table[known.source].get(release)
    if shipped is not None:  # our function stands for this release's code, and every release's with the same code
        ours = function_fingerprint(shipped)
        table[known.source] = {other: ours if code == released else code for other, code in table[known.source].items()}
    monkeypatch.setattr("npu_shim.recognition.known_code", lambda: table)
    monkeypatch.setitem(sys.modules, "verl", SimpleNamespace(__version__=release))
    monkeypatch.delitem(sys.modules, vlm_mask_on_npu.UTIL, raising=False)  # (vlm_mask_on_npu's second name for it)
    monkeypatch.setitem(sys.modules, module.__name__, module)  # where the fix reads it: imported, as at run time
    changes = Writer()
    try:
        outcome = fix.apply(module, changes)
        assert outcome.verdict == COLUMNS[column][fix.name], outcome.reason
        now = vars(owner).get(known.attribute)
        assert is_ours(now) == (outcome.verdict == APPLIED), "rebound exactly where applied"
        assert (now is shipped) == (outcome.verdict != APPLIED)
    finally:
        changes.revert()
    assert vars(owner).get(known.attribute) is shipped
