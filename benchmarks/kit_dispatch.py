"""What an op on the simulated device costs against the same op on the CPU (simulated_npu's compute mode).

Why: every matrix, Ray and end-to-end test that trains runs its model on npu tensors, so the kit's dispatch (unwrap,
run on the CPU, wrap again, torch's ``return_and_correct_aliasing``) is most of their time. This prints what one
small training step costs on npu tensors and on CPU tensors, in paired rounds in one process (the two halves of a
round run back to back, in alternating order), and the median of the per-round ratios npu / cpu.

The step: a matmul, an in-place relu, a view, an in-place add on the view, an ``out=`` op, a backward pass and an
SGD update in place (what a layer and its optimizer do, small enough that dispatch dominates).

Run it with ``.cache/tools/bin/nox -s bench_kit [-- --rounds 15 --steps 200]``, or with an environment the test
command built (it needs torch; compute mode is switched on here)::

    .cache/envs/verl-0.7.1-????????????/bin/python benchmarks/kit_dispatch.py [--rounds 15] [--steps 200]

Machines are shared and noisy: read the medians and the ratio, never one round. Exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200, help="training steps per half of a round")
    options = parser.parse_args()
    if options.rounds < 1 or options.steps < 1:
        parser.error("--rounds and --steps must be at least 1")

    os.environ["NPU_SHIM_SIM_COMPUTE"] = "1"  # read when the stand-in torch_npu is imported, below
    import simulated_npu  # installed beside torch (pip install ./kit), as the tests install it

    sys.path.insert(0, simulated_npu.SIMULATED_DIR)
    import torch
    import torch_npu

    if not torch_npu._compute.enabled():
        print("the simulated torch_npu is not in compute mode: was torch imported before this script ran?")
        return 1

    def make_step(device: str) -> Callable[[], None]:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(64, 64, generator=generator).to(device)
        weight = torch.randn(64, 64, generator=generator).to(device).requires_grad_()
        scratch = torch.empty(64 * 64, device=device)

        def step() -> None:
            hidden = (x @ weight).relu_()
            head = hidden.detach().clone().view(-1)[:100].add_(1.0)
            torch.mul(hidden.detach().view(-1), 0.5, out=scratch)
            (hidden * 2).sum().add(head.sum()).backward()
            with torch.no_grad():
                weight.sub_(weight.grad, alpha=1e-3)
            weight.grad = None

        return step

    steps = {"cpu": make_step("cpu"), "npu": make_step("npu")}
    for step in steps.values():  # warm-up: torch's schema caches, the allocator
        for _ in range(20):
            step()

    times: dict[str, list[float]] = {"cpu": [], "npu": []}
    for round_number in range(options.rounds):
        order = ("cpu", "npu") if round_number % 2 == 0 else ("npu", "cpu")
        for device in order:
            began = time.perf_counter()
            for _ in range(options.steps):
                steps[device]()
            times[device].append((time.perf_counter() - began) / options.steps)

    ratios = [npu / cpu for npu, cpu in zip(times["npu"], times["cpu"], strict=True)]
    print(f"torch {torch.__version__}, {options.rounds} rounds of {options.steps} steps")
    for device in ("cpu", "npu"):
        print(f"  {device}: median {statistics.median(times[device]) * 1e6:8.1f} us per step")
    spread = f"min {min(ratios):.2f}, max {max(ratios):.2f}"
    print(f"  npu / cpu: median paired ratio {statistics.median(ratios):.2f} ({spread})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
