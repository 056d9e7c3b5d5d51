"""A child of tests/kit/test_testing_kit.py: ``hccl_process_group_child.py CHECKOUT``.

With the checkout ``CHECKOUT`` on sys.path and ``simulate_npu()``, verl's ``initialize_global_process_group_ray`` on one
rank at the store the environment names (``init_process_group("cpu:gloo,npu:hccl")``) and an all-reduce over a new
group; prints the backend and the reduced values.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, sys.argv[1])
from simulated_npu import simulate_npu

simulate_npu()
import torch  # noqa: E402
from verl.utils.distributed import initialize_global_process_group_ray  # noqa: E402

os.environ.update(RANK="0", WORLD_SIZE="1")
initialize_global_process_group_ray()
values = torch.ones(2)
torch.distributed.all_reduce(values, group=torch.distributed.new_group([0]))
print(torch.distributed.get_backend(), values.tolist())
