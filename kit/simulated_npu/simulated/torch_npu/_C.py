"""SIMULATED ``torch_npu._C`` (simulated_npu): the names real MindSpeed reads from torch_npu's extension module.

``_distributed_c10d.ProcessGroupHCCL.Options``: the options MindSpeed builds for its HCCL process groups
(``hccl_config`` and friends). The stand-in's ``hccl`` backend is gloo underneath and reads none of them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class _ProcessGroupHCCL:
    """Only what is read of HCCL's process group class: its options."""

    class Options:
        def __init__(self) -> None:
            self.hccl_config: dict[str, Any] = {}
            self.is_high_priority_stream = False
            self.global_ranks_in_group: list[int] = []
            self.group_id = ""


_distributed_c10d = SimpleNamespace(ProcessGroupHCCL=_ProcessGroupHCCL)
