"""SIMULATED TENPU ``transformer_engine.common``: the recipes Megatron subclasses at import."""

from transformer_engine.common import recipe  # noqa: F401
