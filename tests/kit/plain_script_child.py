"""A child of tests/kit/test_testing_kit.py: ``plain_script_child.py CHECKOUT LOG``, the kit as a plain script uses it.

The checkout ``CHECKOUT`` on sys.path, ``simulate_npu()`` for this process, verl's device name printed, and a child
interpreter given ``simulated_npu_env(repatch_log=LOG)`` that calls MindSpeed's ``repatch`` (the test reads LOG).
"""

from __future__ import annotations

import subprocess
import sys

sys.path.insert(0, sys.argv[1])
from simulated_npu import simulate_npu, simulated_npu_env

simulate_npu()
from verl.utils.device import get_device_name  # noqa: E402

print(get_device_name())
child = "from mindspeed.megatron_adaptor import repatch; repatch({'context_parallel_size': 2})"
env = simulated_npu_env(repatch_log=sys.argv[2])
subprocess.run([sys.executable, "-c", child], env=env, check=True)
