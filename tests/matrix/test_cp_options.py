"""MindSpeed ``core_r0.18.0``'s double-ring options at CP = 2: refused before the device mesh, with one clear error.

With ``cp_window_size != 1`` or ``use_cp_send_recv_overlap`` at context parallelism above 1, MindSpeed 0.18's
``repatch`` wraps ``TEDotProductAttention.__init__`` to read Megatron-LM's ``megatron.training.get_args()``, which
verl never initialises: verl as it ships builds the engine and its mesh, then the model build dies (with mbridge:
``AssertionError: args is not initialized.`` from inside the wrapper; with Megatron-Bridge, verl 0.9.x's default, its
provider refuses the key first). The shim's repatch refuses the pair right after MindSpeed's ``repatch``, before
the mesh (``npu_shim.mindspeed_line.refuse_training_arguments``); without the keys CP = 2 builds as before.

Runs where the kit's stand-in simulates ``core_r0.18.0`` (environment ``0.9.1-py312-mcore0.18``): two ranks of
``cp_options_child.py`` per activation, the actor's engine built and initialised for each case. Real MindSpeed
``core_r0.18.0``'s source does the same: tests/real_mindspeed/test_cp_options.py.
"""

from __future__ import annotations

import os
from typing import Any

import cp_options_child
import pytest
import train_probe

LINE = os.environ.get("NPU_SHIM_SIM_MINDSPEED", "")
BRIDGE = os.environ.get("NPU_SHIM_TEST_BRIDGE", train_probe.MBRIDGE)
WRAPPER = "te_dot_product_attention_init_wrapper.<locals>.wrapper"  # the code MindSpeed 0.18's wrapper runs
NOT_INITIALISED = "AssertionError: args is not initialized."
TAIL = (
    ": MindSpeed hands these double-ring options to TransformerEngineNPU by wrapping TEDotProductAttention.__init__ "
    "to read Megatron-LM's training arguments (megatron.training.get_args(); here: AssertionError: args is not "
    "initialized.), which verl never initialises, so the model build would fail. Under verl leave cp_window_size "
    "at 1 and use_cp_send_recv_overlap off: context parallelism works without them."
)
OVERLAP = "override_transformer_config.use_cp_send_recv_overlap=True"
WINDOW = "override_transformer_config.cp_window_size=2"
KEPT = " (from an earlier engine in this process: MindSpeed keeps it)"


def refused(*keys: str) -> str:
    return f"ValueError: {' and '.join(keys)} with context_parallel_size=2{TAIL}"


# job -> what each engine of it gives: where it stopped, and the error (None: built and initialised)
WITH_THE_SHIM = {
    "defaults": [("done", None)],
    "overlap": [("build", refused(OVERLAP))],
    "window": [("build", refused(WINDOW))],
    # colocated: the next engine without the key still has it in MindSpeed's arguments, and is refused too
    "overlap-defaults": [("build", refused(OVERLAP)), ("build", refused(OVERLAP + KEPT))],
}


def stops(report: dict[str, Any], job: str) -> list[tuple[str, str | None]]:
    return [(build["stage"], build.get("error")) for build in report["jobs"][job]]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    if LINE != "core_r0.18.0":
        pytest.skip(f"MindSpeed {LINE or '(unset)'} wraps no TEDotProductAttention.__init__: core_r0.18.0 only")
    return cp_options_child.run_pairs(
        {
            "shim": ("sitecustomize", ",".join(WITH_THE_SHIM), ("--bridge", BRIDGE)),
            # verl as it ships, on the bridge that reaches MindSpeed's wrapper (Megatron-Bridge refuses the key first)
            "no shim": ("none", "overlap", ("--bridge", train_probe.MBRIDGE)),
        },
        tmp_path_factory.mktemp("cp_options"),
    )


def test_the_double_ring_options_are_refused_before_the_device_mesh_with_one_error(pairs):
    for rank, report in enumerate(pairs["shim"]):
        assert report["shim_loaded"] and report["rank"] == rank
        assert {job: stops(report, job) for job in WITH_THE_SHIM} == WITH_THE_SHIM, rank
        for job in ("overlap", "window", "overlap-defaults"):
            for build in report["jobs"][job]:
                assert build["parallel_state_initialized"] is False, (job, rank)  # before the mesh
                # refused for what MindSpeed did: its wrapper is in place
                assert build["te_attention_init"] == {"wrapped": True, "code": WRAPPER}, (job, rank)


def test_without_the_keys_context_parallelism_builds_and_te_attention_is_not_wrapped(pairs):
    for rank, report in enumerate(pairs["shim"]):
        (build,) = report["jobs"]["defaults"]
        assert build["te_attention_init"]["wrapped"] is False, rank
        assert build["parallel_state_initialized"] is True, rank
        assert build["core_attention"].startswith("megatron.core.extensions.transformer_engine.TEDotProductAttention")


def test_without_the_shim_the_model_build_dies_in_mindspeeds_wrapper_after_the_mesh(pairs):
    """What the refusal spares users: MindSpeed's wrapper fails inside Megatron's model build, mesh and all built."""
    for rank, report in enumerate(pairs["no shim"]):
        assert not report["shim_loaded"]
        (build,) = report["jobs"]["overlap"]
        assert build["stage"] == "initialize" and build["error"].startswith(NOT_INITIALISED), (rank, build["error"])
        assert build["parallel_state_initialized"] is True and build["te_attention_init"]["code"] == WRAPPER, rank
