"""SIMULATED ``mindspeed.core.optimizer`` (see adamw)."""
