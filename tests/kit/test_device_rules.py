"""The simulated device refuses what torch refuses for two devices, and Megatron's Adam on it resumes from a checkpoint
as torch's AdamW does (the child: tests/kit/device_rules_child.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import clean_env, run_in_session

from simulated_npu import simulated_npu_env

CHILD = Path(__file__).with_name("device_rules_child.py")
SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"
TOLERANCE = 1e-5  # float32, as tests/kit/test_parallel_kit.py holds the optimizer to torch's AdamW


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    run = run_in_session([sys.executable, str(CHILD)], simulated_npu_env(clean_env(), compute=True), None, 300)
    assert run.returncode == 0, run.stderr
    return run.report


@pytest.mark.parametrize("cpu", ["one-element 1-d", "1-d"])
def test_an_op_mixing_npu_and_cpu_tensors_raises_as_torch_does_for_any_two_devices(report, cpu):
    """Only a 0-dim CPU tensor is a scalar beside another device: one element in one dimension is still a tensor."""
    mixed = report["mixed"][cpu]
    assert mixed["meta"][0] == "RuntimeError", "torch's own rule (in its meta device's words)"
    assert mixed["npu"][0] == "RuntimeError" and SAME_DEVICE in mixed["npu"][1], mixed["npu"]


def test_a_0_dim_cpu_tensor_is_a_scalar_on_the_device(report):
    assert report["mixed"]["0-dim"] == {"npu": ["ran", "npu:0"], "meta": ["ran", "meta"]}


def test_megatrons_adam_resumes_from_its_state_dict_with_the_restored_group(report):
    """The step count and the lr a scheduler set live in the parameter group that load_state_dict restores."""
    adam = report["adam"]
    assert adam["resumed_vs_uninterrupted"] == 0.0, adam["class"]
    assert adam["resumed_vs_torch"] <= TOLERANCE, adam["class"]
