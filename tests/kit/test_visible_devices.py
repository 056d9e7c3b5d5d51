"""The simulated NPU's ``set_device`` takes an index among the visible devices, as torch_npu does.

``ASCEND_RT_VISIBLE_DEVICES`` chooses the visible devices where it is set (``4,5,6,7``: four, indices 0 to 3), else
the simulated host has eight. An index at or past their count raises torch_npu's ``Invalid device ID``; what raises
sets nothing. In both modes; in the default mode ``current_device()`` answers the index set (compute mode keeps its
one device, ``npu:0``, where its tensors live).
"""

from __future__ import annotations

import pytest
from helpers import clean_env, run_python

from simulated_npu import simulated_npu_env

CHILD = """
import json, os
import torch
import torch_npu  # noqa: F401

def attempt(listed, device):
    if listed is None:
        os.environ.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    else:
        os.environ["ASCEND_RT_VISIBLE_DEVICES"] = listed
    try:
        torch.npu.set_device(device)
    except RuntimeError as error:
        return ["raised", str(error), torch.npu.current_device()]
    return ["set", torch.npu.current_device()]

cases = [["4,5,6,7", 1], ["4,5,6,7", 5], ["4,5,6,7", 4], ["4,5,6,7", "npu:3"], ["6", 0], ["6", 6], [None, 7], [None, 8]]
print(json.dumps([attempt(listed, device) for listed, device in cases]))
"""


@pytest.mark.parametrize("compute", [False, True], ids=["default-mode", "compute-mode"])
def test_set_device_refuses_an_index_at_or_past_the_visible_count(tmp_path, compute):
    results = run_python(CHILD, simulated_npu_env(clean_env(), compute=compute), cwd=tmp_path).report
    current = (lambda index: 0) if compute else (lambda index: index)
    set_one, five, four, three, only, six, seven, eight = results
    assert set_one == ["set", current(1)]
    for refused, index, seen, before in ((five, 5, "4,5,6,7", 1), (four, 4, "4,5,6,7", 1), (six, 6, "6", 0)):
        assert refused[0] == "raised", refused
        assert "Invalid device ID" in refused[1] and "error code is 107001" in refused[1], refused
        assert f"invalid device={index}, input visible devices:{seen}" in refused[1], refused
        assert refused[2] == current(before), "what raises sets nothing"
    assert three == ["set", current(3)], "a device's name takes its index"
    assert only == ["set", current(0)], "one visible device: index 0"
    assert seven == ["set", current(7)], "no list: the host's eight"
    assert eight[0] == "raised" and "invalid device=8, 8 devices on the host" in eight[1], eight
