"""The kit's ``npu-smi`` (its console script, run as a process) and its CANN install info file.

What the real tool prints is quoted in kit/simulated_npu/npu_smi.py; here, that each query reads the way its
readers read it: verl's ``get_npu_versions`` (``Software Version`` after the first ``:``), the shim's card listing
(``npu_shim.fixes.npu_smi_card.listed_cards``), and ``info -m``'s four columns.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_shim.fixes.npu_smi_card import listed_cards
from simulated_npu import npu_smi, simulated_cann_home

NPU_SMI = Path(sys.executable).parent / "npu-smi"


def npu_smi_run(*args: str, **host: str) -> subprocess.CompletedProcess:
    if not NPU_SMI.exists():
        pytest.fail(f"no {NPU_SMI}: reinstall the kit, whose console script it is")
    env = {"PATH": os.environ.get("PATH", ""), **host}
    return subprocess.run([str(NPU_SMI), *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def software_version(output: str) -> str | None:
    """What verl's get_npu_versions reads of a board query (its own words: the first line naming it)."""
    line = next((line for line in output.split("\n") if "Software Version" in line), "")
    parts = line.split(":")
    return parts[1].strip().lower() if len(parts) > 1 else None


@pytest.mark.parametrize(
    "spec, ids", [("0", [0]), ("4-7", [4, 5, 6, 7]), ("0,2,4-5", [0, 2, 4, 5]), (" 3 , 1", [1, 3]), ("", [])]
)
def test_which_npu_ids_the_host_has(spec, ids):
    assert npu_smi.card_ids(spec) == ids


def test_a_card_the_host_has_answers_the_board_query_with_its_software_version():
    run = npu_smi_run("info", "-t", "board", "-i", "5", NPU_SHIM_SIM_NPU_IDS="4-7", NPU_SHIM_SIM_NPU_SOFTWARE="25.5.0")
    assert run.returncode == 0 and software_version(run.stdout) == "25.5.0", run
    assert "NPU ID                         : 5" in run.stdout


@pytest.mark.parametrize(
    "args, host",
    [
        (["-i", "1"], {"NPU_SHIM_SIM_NPU_IDS": "0"}),  # verl #6773's host
        (["-i", "1"], {"NPU_SHIM_SIM_NPU_IDS": "4-7"}),
        (["-i", "4", "-c", "1"], {"NPU_SHIM_SIM_NPU_IDS": "4-7"}),  # one chip a card: no chip 1
    ],
)
def test_an_id_the_host_lacks_exits_215(args, host):
    run = npu_smi_run("info", "-t", "board", *args, **host)
    assert run.returncode == npu_smi.MISSING_ID == 215 and run.stdout == "", run


def test_an_a3_card_answers_for_each_of_its_two_dies():
    host = {"NPU_SHIM_SIM_NPU_IDS": "2", "NPU_SHIM_SIM_NPU_CHIPS": "2"}
    codes = [npu_smi_run("info", "-t", "board", "-i", "2", "-c", chip, **host).returncode for chip in "012"]
    assert codes == [0, 0, 215]
    rows = [line.split() for line in npu_smi_run("info", "-m", **host).stdout.splitlines()[1:]]
    assert rows == [["2", "0", "4", "Ascend", "910C"], ["2", "1", "5", "Ascend", "910C"], ["2", "2", "-", "Mcu"]]


def test_the_listing_names_the_cards_and_the_table_starts_each_with_its_id():
    listing = npu_smi_run("info", "-l", NPU_SHIM_SIM_NPU_IDS="4-7").stdout
    assert listing.splitlines()[0].split(":")[1].strip() == "4"  # Total Count
    assert listed_cards(listing) == ["4", "5", "6", "7"]
    table = npu_smi_run("info", NPU_SHIM_SIM_NPU_IDS="0,6").stdout.splitlines()
    first_columns = [line.strip("|").split()[:2] for line in table if line.startswith("| ") and "910B3" in line]
    assert first_columns == [["0", "910B3"], ["6", "910B3"]]


def test_each_call_is_logged_and_an_unmodelled_query_says_so(tmp_path):
    log = tmp_path / "calls"
    assert npu_smi_run("info", "-t", "usages", "-i", "0", NPU_SHIM_SIM_NPU_SMI_LOG=str(log)).returncode == 2
    assert npu_smi_run("info", "-l", NPU_SHIM_SIM_NPU_SMI_LOG=str(log)).returncode == 0
    assert log.read_text().splitlines() == ["info -t usages -i 0", "info -l"]


def test_the_cann_info_file_is_where_verl_reads_it(tmp_path):
    import platform

    home = simulated_cann_home(tmp_path, version="8.5.0")
    info = Path(home) / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"
    assert [line for line in info.read_text().splitlines() if line.startswith("version=")] == ["version=8.5.0"]
