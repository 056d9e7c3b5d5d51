"""A child of tests/kit/test_parallel_kit.py, in compute mode (no arguments): prints one JSON report.

Where user code goes wrong on the simulated device as on a real one (npu and CPU tensors mixed), and what it does
as one: what an op gives back (its argument, a view of it), saving and loading npu tensors, autocast, memory figures,
deep copies, dropout's generator.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import torch
import torch.nn.functional as F
import torch_npu  # noqa: F401 - the simulated device
from child_report import attempt, gap, npu

report: dict[str, Any] = {}
torch.manual_seed(0)
a, b = torch.randn(4, 3), torch.randn(4, 3)
on = npu(a)
attempt(report, "add_cpu", lambda: str((on + b).device))
attempt(report, "cat_cpu", lambda: str(torch.cat([on, b]).device))
attempt(report, "cpu_linear", lambda: str(torch.nn.Linear(3, 2)(on).device))
attempt(report, "zero_dim_cpu", lambda: [str((on * torch.tensor(2.0)).device), gap(on * torch.tensor(2.0), a * 2)])
attempt(report, "cpu_index", lambda: [str(on[torch.tensor([0, 2])].device), gap(on[torch.tensor([0, 2])], a[[0, 2]])])
attempt(report, "to_cpu", lambda: [str(on.cpu().device), gap(on.cpu(), a)])


# what an op gives back, as on any device: an in-place or out= op its argument; a view its base's memory; an
# in-place view op the argument with the sizes and strides the CPU gives it
def gives_back() -> list[Any]:
    grid, out = npu(torch.arange(6.0).reshape(2, 3)), npu(torch.empty(2, 3))
    row = grid.view(-1)
    row[0] = 100.0
    return [
        grid.add_(1) is grid, torch.add(grid, grid, out=out) is out, row._base is grid,
        row.untyped_storage().data_ptr() == grid.untyped_storage().data_ptr(), grid[0, 0].item(),
        torch._C._is_alias_of(row, grid), torch._C._is_alias_of(grid.clone(), grid),
    ]  # fmt: skip


attempt(report, "gives_back", gives_back)
IN_PLACE_VIEWS = {
    "t_": lambda x: x.t_(),
    "transpose_": lambda x: x.transpose_(0, 1),
    "unsqueeze_": lambda x: x.unsqueeze_(0),
    "squeeze_": lambda x: x.unsqueeze_(1).squeeze_(1),
    "as_strided_": lambda x: x.as_strided_((3,), (2,)),
}
for name, op in IN_PLACE_VIEWS.items():

    def in_place_view(op=op) -> list[Any]:
        on_cpu, on_npu = torch.arange(6.0).reshape(2, 3), npu(torch.arange(6.0).reshape(2, 3))
        returned, reference = op(on_npu), op(on_cpu)
        return [
            returned is on_npu, list(on_npu.shape) == list(reference.shape), on_npu.stride() == reference.stride(),
            gap(on_npu.contiguous(), reference.contiguous()),
        ]  # fmt: skip

    attempt(report, name, in_place_view)
attempt(report, "resize_", lambda: npu(torch.zeros(2, 3)).resize_(10).shape)
attempt(report, "resize_same", lambda: list(npu(torch.zeros(2, 3)).resize_(2, 3).shape))
attempt(report, "out_of_another_size", lambda: torch.add(npu(torch.ones(2)), 1, out=npu(torch.empty(3))).shape)

# saved npu tensors: torch.load's defaults (weights_only=True), and map_location
buffer = io.BytesIO()
torch.save({"tensor": on, "parameter": torch.nn.Parameter(npu(b)), "view": on[1:3]}, buffer)


def load(**options: Any) -> list[Any]:
    buffer.seek(0)
    loaded = torch.load(buffer, **options)
    parameter = loaded["parameter"]
    return [
        str(loaded["tensor"].device), isinstance(parameter, torch.nn.Parameter), str(parameter.device),
        gap(loaded["tensor"], a), gap(parameter, b), gap(loaded["view"], a[1:3]),
    ]  # fmt: skip


attempt(report, "load_defaults", load)
attempt(report, "load_to_cpu", lambda: load(map_location="cpu"))

with torch.autocast("npu", dtype=torch.bfloat16):
    product = on @ npu(b).T
    report["autocast"] = [
        str(product.dtype), str(torch.softmax(product, -1).dtype), str((on + 1).dtype),
        gap(product.float(), (a.bfloat16() @ b.bfloat16().T).float()),
    ]  # fmt: skip
report["autocast_off"] = str((on @ npu(b).T).dtype)

# memory figures: the bytes npu tensors hold, a storage counted once, the peak kept
start = torch.npu.memory_allocated()
held = torch.empty(1000, device="npu")
view = held[10:20]
grown = torch.npu.memory_allocated() - start
free_while_held = torch.npu.mem_get_info()[0]
del held
still_viewed = torch.npu.memory_allocated() - start
del view
report["memory"] = [
    grown, still_viewed, torch.npu.memory_allocated() - start,
    torch.npu.max_memory_allocated() >= start + 4000, free_while_held < torch.npu.mem_get_info()[1],
]  # fmt: skip
torch.npu.reset_peak_memory_stats()
report["peak_reset"] = torch.npu.max_memory_allocated() == torch.npu.memory_allocated()

# a deep copy owns its memory; dropout draws from the device's generator and moves it on
original = npu(torch.ones(3))
copied = copy.deepcopy(original)
original.add_(1)
report["deepcopy"] = [str(copied.device), copied.cpu().tolist()]
torch.npu.manual_seed(0)
state, cpu_state = torch.npu.get_rng_state(), torch.random.get_rng_state()
first, second = (F.dropout(npu(torch.ones(64)), 0.5) for _ in range(2))
report["dropout"] = [
    not torch.equal(torch.npu.get_rng_state(), state), not torch.equal(first.cpu(), second.cpu()),
    torch.equal(torch.random.get_rng_state(), cpu_state),
]  # fmt: skip
torch.npu.set_rng_state(state)
report["dropout_replayed"] = torch.equal(F.dropout(npu(torch.ones(64)), 0.5).cpu(), first.cpu())
print(json.dumps(report))
