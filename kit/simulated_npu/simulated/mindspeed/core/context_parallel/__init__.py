"""SIMULATED ``mindspeed.core.context_parallel`` (see model_parallel_utils)."""
