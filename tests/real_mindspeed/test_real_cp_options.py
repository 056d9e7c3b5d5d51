"""Real MindSpeed ``core_r0.18.0``'s double-ring options at CP = 2: the shim refuses them before the device mesh.

As tests/matrix/test_cp_options.py on the kit's stand-in, with real MindSpeed's source ahead of the kit's simulated
packages (``tests/real_mindspeed``'s way): its ``repatch`` wraps ``TEDotProductAttention.__init__`` (``mindspeed/
core/context_parallel/tenpu_adaptor.py``) to read ``megatron.training.get_args()``. Two ranks per activation, one
job per process (real MindSpeed cannot be put back), on mbridge (the one bridge real core_r0.18.0 builds with here,
test_real_mindspeed.py). Without the keys real core_r0.18.0 builds and trains at CP = 2 under the shim:
``test_at_cp2_real_ring_attention_trains_as_the_stand_ins_bit_for_bit`` in the same session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import cp_options_child
import mindspeed_source
import pytest
import train_probe
from test_cp_options import KEPT, NOT_INITIALISED, OVERLAP, WINDOW, WRAPPER, refused

LINE = os.environ.get("NPU_SHIM_SIM_MINDSPEED", "")
VERL = os.environ.get("NPU_SHIM_TEST_VERL", "")
EXTRAS = os.environ.get("NPU_SHIM_TEST_MINDSPEED_EXTRAS", "")
MBRIDGE = ("--bridge", train_probe.MBRIDGE)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    if (LINE, VERL) != ("core_r0.18.0", "0.9.1"):
        pytest.skip(f"only MindSpeed core_r0.18.0 (with verl 0.9.1) wraps TEDotProductAttention.__init__, not {LINE}")
    if not EXTRAS:
        pytest.fail("NPU_SHIM_TEST_MINDSPEED_EXTRAS is unset: run this layer through `nox -s real_mindspeed`")
    try:
        source = mindspeed_source.prepare(LINE)
    except mindspeed_source.SourceMissing as missing:
        pytest.fail(str(missing))
    reports = cp_options_child.run_pairs(
        {
            # the second engine of the process has no key of its own: MindSpeed keeps the first one's
            "shim": ("sitecustomize", "overlap-window", MBRIDGE),
            "no shim": ("none", "overlap", MBRIDGE),
        },
        tmp_path_factory.mktemp("real_cp_options"),
        ahead=(str(source), EXTRAS),
    )
    for name, ranks in reports.items():
        for report in ranks:
            assert Path(report["mindspeed_file"]).is_relative_to(source), (name, report["mindspeed_file"])
    return reports


def test_real_core_r0_18_0s_double_ring_options_are_refused_before_the_device_mesh(pairs):
    expected = [("build", refused(OVERLAP)), ("build", refused(WINDOW, OVERLAP + KEPT))]
    for rank, report in enumerate(pairs["shim"]):
        builds = report["jobs"]["overlap-window"]
        assert [(build["stage"], build.get("error")) for build in builds] == expected, rank
        for build in builds:
            assert build["parallel_state_initialized"] is False, rank
            assert build["te_attention_init"] == {"wrapped": True, "code": WRAPPER}, rank  # real MindSpeed's wrapper


def test_without_the_shim_real_core_r0_18_0_dies_in_its_wrapper_in_the_model_build(pairs):
    for rank, report in enumerate(pairs["no shim"]):
        (build,) = report["jobs"]["overlap"]
        assert build["stage"] == "initialize" and build["error"].startswith(NOT_INITIALISED), (rank, build["error"])
        assert build["parallel_state_initialized"] is True and build["te_attention_init"]["code"] == WRAPPER, rank
