"""SIMULATED torchair (simulated_npu): NOT Huawei's torchair, and no graph compiler behind it.

Real MindSpeed imports torchair (torch_npu's graph-mode companion) at the top of its op builders
(``mindspeed/op_builder/gmm_builder.py`` and others) and registers graph converters for its ops when it
builds them. This gives that import-time surface, so real MindSpeed's source imports on the kit: ``ge``
(``Tensor``, ``TensorSpec``, ``DataType``) and ``register_fx_node_ge_converter``, whose converters are kept
and never run (nothing here compiles graphs; ``ge.custom_op`` raises).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchair import ge

SIMULATED = True
converters: dict[Any, Callable[..., Any]] = {}

__all__ = ["converters", "ge", "register_fx_node_ge_converter"]


def register_fx_node_ge_converter(target: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(converter: Callable[..., Any]) -> Callable[..., Any]:
        converters[target] = converter
        return converter

    return register
