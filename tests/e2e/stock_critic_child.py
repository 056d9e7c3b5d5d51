"""A child of tests/e2e/test_verl_workers.py, on the simulated NPU (no arguments): verl's stock
``main_ppo.TaskRunner.add_critic_worker`` for a Megatron critic; prints the role and the worker class it maps, as JSON.
Nothing is started."""

from __future__ import annotations

import json

from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunner

runner = TaskRunner()
runner.add_critic_worker(OmegaConf.create({"critic": {"strategy": "megatron"}, "trainer": {}}))
((role, remote),) = runner.role_worker_mapping.items()
worker = remote.__ray_actor_class__  # what ray.remote(...) wraps; nothing is started
print(json.dumps([str(role), f"{worker.__module__}.{worker.__qualname__}"]))
