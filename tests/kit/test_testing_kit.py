"""simulated_npu, the simulated-NPU kit, used as documented: pytest fixtures and a plain script."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import ROOT, clean_env, run_python_file

from simulated_npu import read_repatch_log, rendezvous, simulated_npu_env

pytest_plugins = ["simulated_npu.pytest_plugin"]
HERE = Path(__file__).parent  # the plain scripts: plain_script_child.py, hccl_process_group_child.py


def test_fixtures_give_verl_an_npu_and_record_repatch(simulated_npu, repatch_calls):
    import torch
    import torch_npu
    from verl.utils.device import get_device_name

    assert torch_npu.SIMULATED is True
    assert torch.npu.is_available()
    assert get_device_name() == "npu"
    with pytest.raises(RuntimeError, match="simulated NPU"):
        torch_npu.npu_fusion_attention()
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from verl.workers.engine.mindspeed import transformer_impl

    megatron_forward = DotProductAttention.forward
    transformer_impl.repatch({"use_flash_attn": True})  # the name verl bound: the stand-in, acting on Megatron
    assert DotProductAttention.forward is not megatron_forward
    layer = SimpleNamespace(attn_mask_type=None, config=None)  # what MindSpeed's generate-mask wrapper reads
    with pytest.raises(RuntimeError, match="npu_fusion_attention: simulated NPU"):
        DotProductAttention.forward(layer, None, None, None, "a mask")
    assert repatch_calls == [
        {"config": {"use_flash_attn": True}, "parallel_state_initialized": False, "pid": os.getpid()}
    ]


def test_a_plain_script_and_its_children(tmp_path):
    log = tmp_path / "repatch.jsonl"
    child = HERE / "plain_script_child.py"
    completed = run_python_file(child, clean_env(), str(ROOT), str(log), cwd=tmp_path, timeout=300)
    assert completed.stdout.split() == ["npu"]
    calls = read_repatch_log(log)
    assert [call["config"] for call in calls] == [{"context_parallel_size": 2}]


def test_simulated_npu_env_keeps_the_callers_environment():
    env = simulated_npu_env({"PATH": "/bin", "PYTHONPATH": "/mine"})
    assert env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == "/mine"


def test_verl_workers_process_group_runs_on_the_simulated_hccl(tmp_path):
    """verl's workers call init_process_group("cpu:gloo,npu:hccl"): the stand-in torch_npu registers hccl."""
    _store, address = rendezvous(1)  # the store lives until the child has ended
    child = HERE / "hccl_process_group_child.py"
    completed = run_python_file(child, clean_env(**address), str(ROOT), cwd=tmp_path, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == "cpu:gloo,npu:hccl [1.0, 1.0]"
