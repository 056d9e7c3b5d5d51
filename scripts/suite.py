"""`make test`: noxfile.py's sessions side by side on every core (``nox --parallel auto``), and an ending to read.

nox runs the sessions: each in its own process, its output printed as one block when it ends (never two sessions'
lines interleaved), the longest first (``nox.options.sessions``). What nox does not do is written here, by hand:
after nox's own output, each session's seconds and result (from its ``--report``), then the whole block of each
session that failed, was aborted, or was skipped where it must run (under CI every session must run), so a failure
is read at the bottom of a long log. The exit status is nox's, or 1 for such a skip. Standard library only: it runs
in the tool environment, beside nox. Arguments go to nox (``-s unit lint``, ``-f other_noxfile.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# nox's line before a session's block: "========== ✓ unit: success, 38 seconds ==========" (ASCII "+" where the console
# cannot print the check mark).
BLOCK_HEADER = re.compile(r"^={10} \S+ (?P<session>.+): (?P<status>[a-z]+)(, [^=]*)? ={10}$")
BLOCK_END = ("Starting session ", "nox > Ran ")  # nox's own lines between blocks, and its summary
MUST_PASS = ("success",)
MAY_SKIP = ("success", "skipped")  # outside CI: the real-MindSpeed layer without ../shared's archives


def run_nox(arguments: list[str], report: Path) -> tuple[int, dict[str, list[str]]]:
    """Run nox, passing its output through as it comes; its exit status and each session's block, by name."""
    command = [sys.executable, "-m", "nox", "--parallel", "auto", "--no-color", "--report", str(report), *arguments]
    blocks: dict[str, list[str]] = {}
    block: list[str] | None = None
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="backslashreplace"
    ) as nox:
        assert nox.stdout is not None
        for line in nox.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            header = BLOCK_HEADER.match(line.rstrip("\n"))
            if header:
                block = blocks[header["session"]] = [line]
            elif line.startswith(BLOCK_END):
                block = None
            elif block is not None:
                block.append(line)
    return nox.returncode, blocks


def main(arguments: list[str]) -> int:
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        status, blocks = run_nox(arguments, report)
        if not report.is_file():
            print(f"\nnox wrote no report (exit status {status}): no session ran, its output above says why")
            return status or 1
        sessions = json.loads(report.read_text())["sessions"]
    accepted = MUST_PASS if os.environ.get("CI") else MAY_SKIP
    minutes, seconds = divmod(round(time.monotonic() - start), 60)
    print(f"\n=== {len(sessions)} sessions in {minutes} min {seconds} s, {os.cpu_count()} cores ===")
    print(f"{'seconds':>9}  {'result':<8} session")
    unaccepted = []
    for session in sorted(sessions, key=lambda session: -session["duration"]):
        name = (session["signatures"] or [session["name"]])[0]
        print(f"{session['duration']:9.1f}  {session['result']:<8} {name}")
        if session["result"] not in accepted:
            unaccepted.append((name, session["result"]))
    for name, result in unaccepted:
        why = " (CI is set: every session must run)" if result == "skipped" else ""
        print(f"\n=== the whole log of {name}: {result}{why} ===")
        print("".join(blocks.get(name, ["(nox printed no output for it)\n"])), end="")
    if unaccepted:
        print(f"\n=== not passed: {', '.join(name for name, _ in unaccepted)} ===")
    return status or (1 if unaccepted else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
