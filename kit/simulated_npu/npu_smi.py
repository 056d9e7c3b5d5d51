"""A SIMULATED ``npu-smi`` (the console script of simulated-npu): the queries verl's rollout and tools make of it.

It answers ``info``, ``info -l``, ``info -m`` and ``info -t board -i N [-c C]`` for the simulated host's cards, in the
layout of the real tool's public output: ``info`` (a table; each card a row pair whose first column is its NPU ID,
then one row per chip, with its ``Phy-ID`` on a two-die card) and ``info -m`` (``NPU ID``, ``Chip ID``, ``Chip Logic
ID``, ``Chip Name`` columns, an ``Mcu`` row per card) as verbatim outputs of an 8-card 910B3 host and a two-die card
quoted in public code; ``info -l`` (``Total Count``, then an ``NPU ID`` / ``Chip Count`` block per card) and ``info -t
board`` (``Key : value`` lines, ``Software Version : 25.3.rc1.2`` among them, the line verl parses) as quoted in verl's
issues #6751-#6773 and verl's own parser. An NPU ID (or chip) the host lacks exits 215, as the real tool (verl #6773).

Which host (read at each call, from the environment): :data:`IDS_VARIABLE` lists the NPU IDs (``0``, ``4-7``,
``0,2,4-5``; default ``0-7``), :data:`CHIPS_VARIABLE` the compute chips (dies) of each card (``2``: an A3, whose die
``d`` is chip ``d % 2`` of card ``d // 2``), :data:`SOFTWARE_VARIABLE` the driver's ``Software Version``;
:data:`LOG_VARIABLE` names a file each call appends its arguments to (one line), to count calls.
Not modelled: every other query and option, the readings (power, temperature, memory: constants), the error texts (the
kit's own words; only the exit status is the real tool's), and what a container's device mounts hide.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

IDS_VARIABLE = "NPU_SHIM_SIM_NPU_IDS"
CHIPS_VARIABLE = "NPU_SHIM_SIM_NPU_CHIPS"
SOFTWARE_VARIABLE = "NPU_SHIM_SIM_NPU_SOFTWARE"
LOG_VARIABLE = "NPU_SHIM_SIM_NPU_SMI_LOG"
DEFAULT_IDS = "0-7"  # an Atlas 800 training server's eight cards
DEFAULT_SOFTWARE = "25.3.rc1.2"  # the version verl's parser quotes: IPC needs >= 25.3.rc1
MISSING_ID = 215  # the real tool's exit status for an NPU ID the host lacks (verl #6773)
USAGE = 2
WIDTH = 32  # the key column of ``info -l`` and the board query, and each column of ``info -m``


def card_ids(spec: str) -> list[int]:
    """The NPU IDs ``spec`` names: ``"0"``, ``"4-7"``, ``"0,2,4-5"`` (sorted, once each)."""
    ids: set[int] = set()
    for part in (part.strip() for part in spec.split(",")):
        if part:
            first, _, last = part.partition("-")
            ids.update(range(int(first), int(last or first) + 1))
    return sorted(ids)


def host() -> tuple[list[int], int, str]:
    """The simulated host: its NPU IDs, chips per card and driver version."""
    ids = card_ids(os.environ.get(IDS_VARIABLE, DEFAULT_IDS))
    return ids, int(os.environ.get(CHIPS_VARIABLE) or 1), os.environ.get(SOFTWARE_VARIABLE) or DEFAULT_SOFTWARE


def chip_name(chips: int) -> str:
    return "910C" if chips == 2 else "910B3"  # the names of the public outputs (not checked against an A3's own)


def bus_id(card: int, chip: int) -> str:
    return f"0000:{(0xC1 - 0x10 * card) % 0x100:02X}:00.{chip}"


def keyed(pairs: Sequence[tuple[str, object]]) -> str:
    return "".join(f"\t{key:<{WIDTH - 1}}: {value}\n" for key, value in pairs)


def table(ids: list[int], chips: int, software: str) -> str:
    rule, double = ("+".join(["", line * 27, line * 15, line * 52, ""]) for line in "-=")
    chip_header = "Chip  Phy-ID" if chips > 1 else "Chip"
    lines = [
        "+" + "-" * 96 + "+",
        f"| {'npu-smi ' + software:<33}{'Version: ' + software:<62}|",
        rule,
        f"| {'NPU   Name':<26}| {'Health':<14}| {'Power(W)    Temp(C)           Hugepages-Usage(page)':<51}|",
        f"| {chip_header:<26}| {'Bus-Id':<14}| {'AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)':<51}|",
        double,
    ]
    for card in ids:
        lines.append(f"| {card:<6}{chip_name(chips):<20}| {'OK':<14}| {'95.0        40                0    / 0':<51}|")
        for chip in range(chips):
            label = f"{chip:<6}{card * chips + chip}" if chips > 1 else str(chip)
            readings = "0           0    / 0          3000 / 65536"
            lines.append(f"| {label:<26}| {bus_id(card, chip):<14}| {readings:<51}|")
        lines.append(double)
    return "\n".join(lines) + "\n"


def listing(ids: list[int], chips: int) -> str:
    blocks = [keyed([("Total Count", len(ids))])]
    blocks += [keyed([("NPU ID", card), ("Chip Count", chips)]) for card in ids]
    return "\n".join(blocks)


def mapping(ids: list[int], chips: int) -> str:
    columns = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")
    rows = [columns]
    for card in ids:
        rows += [(card, chip, card * chips + chip, f"Ascend {chip_name(chips)}") for chip in range(chips)]
        rows.append((card, chips, "-", "Mcu"))
    return "".join("\t" + "".join(f"{cell!s:<{WIDTH - 1}}" for cell in row).rstrip() + "\n" for row in rows)


def board(card: int, chip: int | None, chips: int, software: str) -> str:
    pairs: list[tuple[str, object]] = [("NPU ID", card)]
    if chip is not None:
        pairs.append(("Chip ID", chip))
    pairs += [
        ("Software Version", software),
        ("Firmware Version", "7.7.0.6.236"),
        ("Compatibility", "OK"),
        ("Board ID", "0x02"),
        ("PCIe Bus Info", bus_id(card, chip or 0)),
        ("Chip Count", chips),
    ]
    return keyed(pairs)


def options(args: Sequence[str]) -> dict[str, str] | None:
    """``-t board -i 1 -c 0`` as ``{"-t": "board", "-i": "1", "-c": "0"}``; None where an option lacks its value."""
    if len(args) % 2:
        return None
    return dict(zip(args[::2], args[1::2], strict=True))


def answer(args: Sequence[str]) -> tuple[int, str, str]:
    """The exit status, output and error output of ``npu-smi *args``."""
    ids, chips, software = host()
    listings = {
        "": lambda: table(ids, chips, software),
        "-l": lambda: listing(ids, chips),
        "-m": lambda: mapping(ids, chips),
    }
    if args[:1] == ["info"] and " ".join(args[1:]) in listings:
        return 0, listings[" ".join(args[1:])](), ""
    given = options(args[1:]) if args[:1] == ["info"] else None
    if given is None or given.get("-t") != "board" or "-i" not in given or set(given) - {"-t", "-i", "-c"}:
        return USAGE, "", f"npu-smi (simulated by simulated_npu): not modelled: {' '.join(args)}\n"
    try:
        card, chip = int(given["-i"]), int(given["-c"]) if "-c" in given else None
    except ValueError:
        return USAGE, "", f"npu-smi (simulated by simulated_npu): not a number: {' '.join(args)}\n"
    if card not in ids or (chip is not None and not 0 <= chip < chips):
        where = f"NPU ID {card}" + (f", chip {chip}" if chip is not None else "")
        return MISSING_ID, "", f"npu-smi (simulated by simulated_npu): no {where} on this host (NPU IDs: {ids})\n"
    return 0, board(card, chip, chips, software), ""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    log = os.environ.get(LOG_VARIABLE)
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(" ".join(args) + "\n")
    status, out, err = answer(args)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
