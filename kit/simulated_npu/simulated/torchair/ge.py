"""SIMULATED ``torchair.ge``: the graph-engine types MindSpeed's op builders name at import (see torchair)."""

from __future__ import annotations

import enum
from typing import Any, NoReturn


class DataType(enum.Enum):
    """The data type names the builders compare with (the values are the placeholder's own)."""

    DT_FLOAT = enum.auto()
    DT_FLOAT16 = enum.auto()
    DT_BF16 = enum.auto()
    DT_INT8 = enum.auto()
    DT_INT16 = enum.auto()
    DT_INT32 = enum.auto()
    DT_INT64 = enum.auto()
    DT_UINT8 = enum.auto()
    DT_UINT16 = enum.auto()
    DT_UINT32 = enum.auto()
    DT_UINT64 = enum.auto()
    DT_DOUBLE = enum.auto()
    DT_BOOL = enum.auto()


class Tensor:
    """A graph tensor: only a name for type hints here."""


class TensorSpec:
    """A graph tensor's spec: only a name for type hints here."""


def custom_op(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError("torchair.ge.custom_op: simulated torchair (simulated_npu) compiles no graphs")


def Const(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError("torchair.ge.Const: simulated torchair (simulated_npu) compiles no graphs")
