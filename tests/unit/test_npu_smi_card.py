"""verl #6762 (``npu_smi_card``): which card the rollout's IPC probe asks, how often, and what it decides.

No verl, torch or npu-smi: a host is a set of NPU IDs answered by a stand-in ``run`` (``subprocess.run``'s
signature), and verl's code is a synthetic ``verl.utils.device`` whose ``get_npu_versions`` asks card 1 as every
release does. verl's own code on the kit's ``npu-smi``: tests/matrix/test_npu_smi_card.py.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from types import ModuleType
from typing import Any

import pytest

from npu_shim.fixes import npu_smi_card as fix
from npu_shim.patcher import NOT_APPLICABLE, Writer

SOFTWARE = "25.3.rc1.2"


class Host:
    """``subprocess.run`` for a host whose npu-smi knows ``cards``: records each call's arguments."""

    def __init__(self, *cards: int, chips: int = 1, software: str = SOFTWARE) -> None:
        self.cards, self.chips, self.software, self.calls = cards, chips, software, []

    def __call__(self, args: list[str], *, check: bool = False, **options: Any) -> subprocess.CompletedProcess:
        self.calls.append(" ".join(args[1:]))
        if args[1:] == ["info", "-l"]:
            blocks = "".join(f"\tNPU ID : {card}\n\tChip Count : {self.chips}\n\n" for card in self.cards)
            return subprocess.CompletedProcess(args, 0, f"\tTotal Count : {len(self.cards)}\n\n{blocks}", "")
        if int(args[-1]) not in self.cards:
            if check:
                raise subprocess.CalledProcessError(215, args, "", "")
            return subprocess.CompletedProcess(args, 215, "", "")
        board = f"\tNPU ID : {args[-1]}\n\tSoftware Version : {self.software}\n"
        return subprocess.CompletedProcess(args, 0, board, "")


def no_npu_smi(args: list[str], **options: Any) -> subprocess.CompletedProcess:
    raise FileNotFoundError(2, "No such file or directory", "npu-smi")


@pytest.mark.parametrize(
    "environ, cards",
    [
        ({}, []),
        ({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}, ["4", "2"]),  # then 4 // 2, A3's card of die 4
        ({"ASCEND_RT_VISIBLE_DEVICES": "0"}, ["0"]),
        ({"ASCEND_VISIBLE_DEVICES": "5"}, ["5", "2"]),  # Kubernetes' variable, as verl 0.8.0+ reads it
        ({"ASCEND_RT_VISIBLE_DEVICES": "6", "ASCEND_VISIBLE_DEVICES": "1"}, ["6", "3", "1", "0"]),
        ({"ASCEND_RT_VISIBLE_DEVICES": " 3 ,4"}, ["3", "1"]),
        ({"ASCEND_RT_VISIBLE_DEVICES": "npu0"}, []),  # not an ID: left to the listing
    ],
)
def test_the_cards_asked_first_are_those_the_variables_name(environ, cards):
    assert fix.visible_cards(environ) == cards


ASKED_7 = ["info -t board -i 7", "info -t board -i 3"]  # a variable naming a card the host lacks, and its half


@pytest.mark.parametrize(
    "host, environ, calls, card",
    [
        (Host(0), {}, ["info -l", "info -t board -i 0"], "0"),  # verl #6773's host
        (Host(4, 5, 6, 7), {}, ["info -l", "info -t board -i 4"], "4"),
        (Host(4, 5, 6, 7), {"ASCEND_RT_VISIBLE_DEVICES": "5,6"}, ["info -t board -i 5"], "5"),
        (Host(2, chips=2), {"ASCEND_RT_VISIBLE_DEVICES": "5"}, ["info -t board -i 5", "info -t board -i 2"], "2"),
        (Host(0, 1), {"ASCEND_RT_VISIBLE_DEVICES": "7"}, [*ASKED_7, "info -l", "info -t board -i 0"], "0"),
    ],
)
def test_the_board_query_asks_once_a_card_the_host_has(host, environ, calls, card):
    board = fix.BoardQuery(environ, host)
    verl_asks = ["npu-smi", "info", "-t", "board", "-i", "1"]
    answers = [board.run(verl_asks, capture_output=True, text=True, check=True) for _ in range(20)]
    assert host.calls == calls and board.card == card
    assert all(answer is answers[0] for answer in answers) and f"NPU ID : {card}" in answers[0].stdout


def test_other_calls_are_subprocess_own():
    host = Host(0)
    assert fix.BoardQuery({}, host).run(["npu-smi", "info", "-l"]).returncode == 0
    assert host.calls == ["info -l"]


@pytest.mark.parametrize(
    "run, raised, failure",
    [
        (Host(), subprocess.CalledProcessError, "no NPU answered npu-smi's board query (asked: none)"),
        (no_npu_smi, FileNotFoundError, "npu-smi could not be run"),
    ],
)
def test_where_no_card_answers_the_same_error_is_raised_each_time_without_asking_again(run, raised, failure):
    board = fix.BoardQuery({}, run)
    for _ in range(3):  # verl 0.8.0+ asks again in its handler: the same error, no new process
        with pytest.raises(raised):
            board.run(["npu-smi", "info", "-t", "board", "-i", "1"], capture_output=True, text=True, check=True)
    assert board.failure.startswith(failure)
    assert not isinstance(run, Host) or run.calls == ["info -l"]


DEVICE = """
import subprocess

is_cuda_available, is_npu_available = False, True


def get_npu_versions():
    result = subprocess.run(["npu-smi", "info", "-t", "board", "-i", "1"], capture_output=True, text=True, check=True)
    line = next(line for line in result.stdout.split("\\n") if "Software Version" in line)
    return line.split(":")[1].strip().lower(), "8.3.rc1"


def check_ipc_version_support(software_version, cann_version):
    return software_version >= "25.3"
"""


@pytest.fixture
def device(monkeypatch) -> ModuleType:
    """A synthetic ``verl.utils.device`` (0.7.1's shape: two values, no A5), as the imported module."""
    module = ModuleType(fix.WATCHES)
    exec(compile(textwrap.dedent(DEVICE), "<synthetic device.py>", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, fix.WATCHES, module)
    return module


@pytest.mark.parametrize("software, ipc", [(SOFTWARE, True), ("25.2.0", False)])
def test_the_decision_is_verls_own_comparison_of_the_versions_the_card_answered(device, software, ipc, caplog):
    decision = fix.decide(device, {}, Host(4, 5, software=software))
    assert decision == fix.Decision(ipc, "4", f"npu-smi's board of NPU 4: Software Version {software}, CANN 8.3.rc1")
    assert device.subprocess is subprocess  # verl's module keeps its own: only that call read the stand-in
    assert caplog.records == []


def test_where_nothing_can_be_read_the_decision_is_shared_memory_with_one_warning(device, caplog):
    with caplog.at_level(logging.WARNING, "npu_shim"):
        decision = fix.decide(device, {}, no_npu_smi)
    assert decision.ipc is False and decision.card == "" and decision.why.startswith("npu-smi could not be run")
    assert [record.getMessage() for record in caplog.records] == [
        f"npu_shim: the NPU's versions could not be read ({decision.why}): {fix.WHY_LINE}"
    ]


def test_the_decision_is_made_once_a_process(device, monkeypatch):
    host = Host(0)
    monkeypatch.setattr(fix, "decide", lambda module: fix.Decision(bool(host(["npu-smi", "info", "-l"])), "0", ""))
    fix.decision.cache_clear()
    try:
        assert [fix.is_support_ipc() for _ in range(20)] == [True] * 20 and len(host.calls) == 1
        device.is_cuda_available = True  # on CUDA verl's own function answers, and npu-smi is never asked
        device.is_support_ipc = lambda: "verl's own"
        assert fix.is_support_ipc() == "verl's own"
    finally:
        fix.decision.cache_clear()


def test_a_release_without_the_probe_is_not_applicable(device, monkeypatch):
    monkeypatch.delattr(device, "get_npu_versions")
    outcome = fix.FIX.apply(device, Writer())
    assert outcome.verdict == NOT_APPLICABLE and "get_npu_versions" in outcome.reason
