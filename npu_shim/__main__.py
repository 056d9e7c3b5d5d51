"""``python -m npu_shim`` (or ``npu-shim``): ``bootstrap-dir`` and ``doctor``.

Imports stay lazy: ``bootstrap-dir`` runs in a shell's ``$(...)`` and must not
import wrapt, torch or verl.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-shim",
        description="Backports verl's MindSpeed value-head engine (verl #6135) to verl 0.6.x/0.7.x on Ascend NPUs.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser(
        "bootstrap-dir",
        help="print the directory to put on PYTHONPATH so that every interpreter activates the shim",
        description="Print the directory to put on PYTHONPATH so that every interpreter activates the shim, "
        "e.g. export PYTHONPATH=$(python -m npu_shim bootstrap-dir):$PYTHONPATH",
    )
    doctor = commands.add_parser(
        "doctor",
        help="report the verl layout, the shim's fixes and the engine registry; exit 1 if an NPU critic would fail",
        description="Import verl.workers.engine (nothing runs on a device) and report what npu_shim did to it. "
        "Exit status 1 when verl sees an NPU and (value_model, megatron) does not resolve.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object (keys: see npu_shim.doctor)")
    return parser


def emit(text: str) -> None:
    """Print ``text`` and a newline; a reader that went away (``| head -1``) is not worth a traceback."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that this flush cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status is kept when stdout is closed early."""
    args = _parser().parse_args(argv)
    if args.command == "bootstrap-dir":
        import npu_shim

        emit(npu_shim.bootstrap_dir())
        return 0
    from npu_shim import doctor

    text, status = doctor.main(as_json=args.json)
    emit(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
