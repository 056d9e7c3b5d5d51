"""npu_shim.testing, the simulated-NPU kit, used as documented: pytest fixtures and a plain script."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT, clean_env

from npu_shim.testing import read_repatch_log, simulated_npu_env

pytest_plugins = ["npu_shim.testing.pytest_plugin"]


def test_fixtures_give_verl_an_npu_and_record_repatch(simulated_npu, repatch_calls):
    import torch
    import torch_npu
    from verl.utils.device import get_device_name

    assert torch_npu.SIMULATED is True
    assert torch.npu.is_available()
    assert get_device_name() == "npu"
    with pytest.raises(RuntimeError, match="simulated NPU"):
        torch_npu.npu_fusion_attention()
    from verl.workers.engine.mindspeed import transformer_impl

    transformer_impl.repatch({"use_flash_attn": True})  # the name verl bound: the recording stand-in
    assert repatch_calls == [
        {"config": {"use_flash_attn": True}, "parallel_state_initialized": False, "pid": os.getpid()}
    ]


def test_a_plain_script_and_its_children(tmp_path):
    log = tmp_path / "repatch.jsonl"
    script = f"""
    import subprocess, sys
    sys.path.insert(0, {str(ROOT)!r})
    from npu_shim.testing import simulate_npu, simulated_npu_env
    simulate_npu()
    from verl.utils.device import get_device_name
    print(get_device_name())
    child = "from mindspeed.megatron_adaptor import repatch; repatch({{'context_parallel_size': 2}})"
    env = simulated_npu_env(repatch_log={str(log)!r})
    subprocess.run([sys.executable, "-c", child], env=env, check=True)
    """
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert completed.stdout.split() == ["npu"]
    calls = read_repatch_log(log)
    assert [call["config"] for call in calls] == [{"context_parallel_size": 2}]


def test_simulated_npu_env_keeps_the_callers_environment():
    env = simulated_npu_env({"PATH": "/bin", "PYTHONPATH": "/mine"})
    assert env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == "/mine"
