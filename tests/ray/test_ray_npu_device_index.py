"""verl #7507 in verl's own Ray workers: Ray's NPU ids are physical where Ray leaves ASCEND_RT_VISIBLE_DEVICES alone.

A local cluster whose environment has ``ASCEND_RT_VISIBLE_DEVICES=6,4,7,5`` (four NPUs of eight, not in order: a
device's index is its place in the list, not its id less the smallest) and
``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1`` (as verl's SGLang-on-NPU guide sets it), the simulated NPU,
whose ``set_device`` refuses an index at or past the visible count as torch_npu does; verl's ``RayWorkerGroup``
spawns two bare ``Worker``s (the child: device_index_driver_child.py). Without the shim each worker dies in
``__init__``: verl sets device 4 or more of four. With it (the checkout on PYTHONPATH) each sets the place of its
id in the list, and ``LOCAL_RANK`` says the same. Whatever verl release the environment has (0.6.x to 0.8.0 read the id
under one code, 0.9.x another): ``NPU_SHIM_TEST_VERL=X .cache/envs/verl-X-*/bin/python -m pytest`` this file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, clean_env, run_in_session

from simulated_npu import simulated_npu_env

DRIVER = Path(__file__).with_name("device_index_driver_child.py")
VISIBLE = "6,4,7,5"
WORKERS = 2


@pytest.fixture(scope="module", params=["shim", "none"])
def drive(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    env = clean_env(
        [ROOT] if request.param == "shim" else [],
        ASCEND_RT_VISIBLE_DEVICES=VISIBLE,
        RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES="1",
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
    )
    tmp = tmp_path_factory.mktemp(request.param)
    run = run_in_session([sys.executable, str(DRIVER), str(WORKERS)], simulated_npu_env(env), tmp, 420)
    assert run.returncode == 0, run.stderr[-4000:]
    return request.param, run.report


def test_each_worker_sets_the_place_of_its_npu_in_the_visible_list_with_the_shim_and_dies_without(drive):
    mode, report = drive
    if mode == "none":
        assert "reports" not in report, "verl as it ships sets Ray's physical id as the index"
        assert "Invalid device ID" in report["error"], report["error"]
        assert "in _setup_env_cuda_visible_devices" in report["error"], "where verl sets it"
        return
    reports = report["reports"]
    assert len(reports) == WORKERS, report
    visible = VISIBLE.split(",")
    ids = [device["npu_ids"] for device in reports]
    assert sorted(len(one) for one in ids) == [1] * WORKERS and len({one[0] for one in ids}) == WORKERS, ids
    for device in reports:
        (npu_id,) = device["npu_ids"]
        index = visible.index(npu_id)  # Ray's id is physical: one of the list, never the index itself here
        assert device["visible"] == VISIBLE, "Ray left every worker the whole list"
        assert device["verdict"] == "applied", device
        assert device["current_device"] == index, device
        assert device["local_rank"] == str(index), device
    assert any(device["current_device"] != 0 for device in reports), "not every worker on the first device"
