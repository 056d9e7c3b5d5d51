"""verl #6751/#6756/#6762/#6773 (closed, unfixed in every release): the rollout's IPC probe asks ``npu-smi`` of card 1.

Mirrors: what the issues ask: the IPC decision from a card the host has, read once.
Missing when: ``get_npu_versions`` and the IPC decision are a release's: a host without the NPU it asks (card 1, or the
first of ``ASCEND_VISIBLE_DEVICES`` and its half), or with no readable version, fails the rollout (docs/fixes.md).
Does: rebinds the decision (``is_support_ipc``; 0.9.x ``PlatformNPU.is_ipc_supported``) to :func:`decide`'s, once.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from types import ModuleType
from typing import Any

from npu_shim.patcher import MISSING, UNRECOGNISED, Fix, Outcome, Writer, get_original, with_globals
from npu_shim.recognition import KnownFunction, Rebinding

NAME = "npu_smi_card"
WATCHES = "verl.utils.device"  # on 0.9.x its import has imported the platform module too (platform_manager does)
BOARD_QUERY = ["npu-smi", "info", "-t", "board", "-i"]  # then the NPU ID: verl's only use of npu-smi
VISIBLE = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")  # docker's and Ray's, then Kubernetes'
A5_NAMES = ("Ascend910_95", "Ascend950")  # what verl 0.9.1 looks for in torch_npu's chip name
WHY_LINE = "the vLLM rollout takes shared memory (IPC off)"

logger = logging.getLogger("npu_shim")


@dataclass(frozen=True)
class Decision:
    """The rollout's IPC decision in this process, and where it came from."""

    ipc: bool
    card: str  # the NPU ID whose board answered ("" where none did, or none was asked)
    why: str  # how it was decided: the versions read, A5, or why nothing could be read


def visible_cards(environ: Any = os.environ) -> list[str]:
    """The NPU IDs to ask first: the first entry of each variable that is set, then A3's card of it (die ``d`` is on
    card ``d // 2``), once each, in that order."""
    cards: list[str] = []
    for variable in VISIBLE:
        first = environ.get(variable, "").split(",")[0].strip()
        if first.isdigit():
            cards += [str(int(first)), str(int(first) // 2)]
    return list(dict.fromkeys(cards))


def listed_cards(listing: str) -> list[str]:
    """The NPU IDs of ``npu-smi info -l``'s output (``NPU ID : 4`` lines), in its order."""
    ids = []
    for line in listing.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "NPU ID" and value.strip().isdigit():
            ids.append(value.strip())
    return ids


class BoardQuery:
    """``subprocess`` for verl's ``get_npu_versions``: its board query asks, once, a card the host has (those of
    :func:`visible_cards`, then the first ``npu-smi info -l`` lists); every other call is ``subprocess``'s own."""

    def __init__(self, environ: Any = os.environ, run: Callable[..., Any] = subprocess.run) -> None:
        self._environ, self._run = environ, run
        self._answer: Any = None
        self.card = ""  # the NPU ID that answered
        self.asked: list[str] = []
        self.failure = ""  # why no card answered

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def run(self, args: Sequence[str], *more: Any, **options: Any) -> Any:
        if list(args[: len(BOARD_QUERY)]) != BOARD_QUERY:
            return self._run(args, *more, **options)
        if self._answer is None:  # verl 0.8.0+ asks again after a failure: the same answer, no new process
            self._answer = self._ask(options)
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer

    def _ask(self, options: dict[str, Any]) -> Any:
        failed: Any = None
        try:
            for card in self._cards(options):
                self.asked.append(card)
                try:
                    answer = self._run([*BOARD_QUERY, card], **options)
                except subprocess.CalledProcessError as error:
                    failed = error
                    continue
                self.card = card
                return answer
        except OSError as error:  # no npu-smi at all
            self.failure = f"npu-smi could not be run ({error})"
            return error
        asked = ", ".join(self.asked) or "none"
        self.failure = f"no NPU answered npu-smi's board query (asked: {asked})"
        return failed or subprocess.CalledProcessError(1, [*BOARD_QUERY, "?"], "", self.failure)

    def _cards(self, options: dict[str, Any]) -> Any:
        yield from visible_cards(self._environ)
        listing = self._run(["npu-smi", "info", "-l"], **{**options, "check": False})
        for card in listed_cards(listing.stdout or "")[:1]:
            if card not in self.asked:
                yield card


def names_an_a5() -> bool:
    """Whether torch_npu names an A5 chip, as verl 0.9.1 reads the name."""
    try:
        import torch_npu

        name = str(torch_npu.npu.get_device_name())
    except Exception:  # verl 0.9.1 takes any failure here as "not known"
        return False
    return any(part in name for part in A5_NAMES)


def decide(device: ModuleType, environ: Any = os.environ, run: Callable[..., Any] = subprocess.run) -> Decision:
    """The IPC decision, from verl's own code in ``device`` (``verl.utils.device``), asking a card the host has."""
    a5 = getattr(getattr(device, "AscendHardwareVersion", None), "A5", None)  # 0.9.1's, which answers an A5 as IPC
    if a5 is not None and names_an_a5():
        return Decision(True, "", "an A5 (torch_npu's chip name): IPC, as verl 0.9.1 decides, without npu-smi")
    board = BoardQuery(environ, run)
    try:
        *hardware, software, cann = with_globals(get_original(device, "get_npu_versions"), subprocess=board)()
        answered_a5 = bool(a5 is not None and hardware and hardware[0] == a5)
        ipc = answered_a5 or device.check_ipc_version_support(software, cann)
    except Exception as error:  # whatever verl's reading raises, the rollout takes shared memory
        why = board.failure or f"{type(error).__name__}: {error}"
        logger.warning("npu_shim: the NPU's versions could not be read (%s): %s", why, WHY_LINE)
        return Decision(False, board.card, why)
    return Decision(ipc, board.card, f"npu-smi's board of NPU {board.card}: Software Version {software}, CANN {cann}")


@cache  # made at the first call (two threads may both make it)
def decision() -> Decision:
    """This process's decision: made once, by :func:`decide` (``decision.cache_clear()``: again at the next call)."""
    return decide(sys.modules[WATCHES])


def is_support_ipc() -> bool:
    """verl 0.7.1's and 0.8.0's ``is_support_ipc``, decided once from a card the host has (on CUDA: verl's own)."""
    device = sys.modules[WATCHES]
    if device.is_cuda_available or not device.is_npu_available:
        return get_original(device, "is_support_ipc")()
    return decision().ipc


def is_ipc_supported(self: Any) -> bool:
    """verl 0.9.x's ``PlatformNPU.is_ipc_supported``, decided once from a card the host has."""
    return decision().ipc


is_ipc_supported.__qualname__ = "PlatformNPU.is_ipc_supported"

CHANGE = "verl #6762 (closed unfixed)"
DOES = "now decides IPC once, from a card the host has"
PLATFORM_NPU = "verl/plugin/platform/platform_npu.py:PlatformNPU"
IF_LEFT = "the vLLM rollout fails to start on a host without NPU 1 or without a readable version"
PROBE = KnownFunction(
    fix=NAME,
    source="verl/utils/device.py:get_npu_versions",
    missing_in=("0.7.1", "0.8.0", "0.9.0", "0.9.1"),
    change=CHANGE,
    if_left=IF_LEFT,
)
# The releases' IPC decisions. 0.7.1's and 0.8.0's callers bind is_support_ipc by name, after the hook rebinds it.
_decider = partial(Rebinding, fix=NAME, change=CHANGE, if_left=IF_LEFT, applied=DOES)
DECIDERS = (
    _decider(source="verl/utils/device.py:is_support_ipc", missing_in=("0.7.1", "0.8.0"), replacement=is_support_ipc),
    _decider(source=f"{PLATFORM_NPU}.is_ipc_supported", missing_in=("0.9.0", "0.9.1"), replacement=is_ipc_supported),
)


def judge(module: ModuleType) -> Outcome:
    """The probe's verdict unless it is a release's; else the missing decider's (or the unrecognised, or the last)."""
    probe = PROBE.judge(PROBE.owner())
    if not probe.missing:
        return probe
    verdicts = [decider.judge(decider.owner()) for decider in DECIDERS]
    return next(
        (verdict for verdict in verdicts if verdict.missing),
        next((verdict for verdict in verdicts if verdict.verdict == UNRECOGNISED), verdicts[-1]),
    )


def edit(module: ModuleType, writer: Writer) -> None:
    for decider in DECIDERS:
        if decider.judge(decider.owner()).verdict == MISSING:
            writer.bind(decider.owner(), decider.attribute, decider.replacement)


FIX = Fix(name=NAME, judge=judge, edit=edit, applied=DOES, watches=WATCHES, known=(PROBE, *DECIDERS))
