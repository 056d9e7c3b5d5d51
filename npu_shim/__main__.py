"""``python -m npu_shim`` (or ``npu-shim``): ``bootstrap-dir``, ``doctor`` and ``runtime-env``. Imports stay lazy:
``bootstrap-dir`` runs in a shell's ``$(...)`` and must not import wrapt, torch or verl.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from npu_shim import __version__


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-shim",
        description="Carries verl's later Ascend-NPU engine fixes (the MindSpeed value-head engine of #6135 and "
        "the ones after it) to verl 0.6.x to 0.9.x, at import time, without editing verl.",
    )
    parser.add_argument("--version", action="version", version=f"npu-shim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bootstrap = commands.add_parser(
        "bootstrap-dir",
        help="print the directory to put on PYTHONPATH so that every interpreter activates the shim",
        # raw: the example is a command to copy, which the default formatter would break inside a word
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print the directory to put on PYTHONPATH so that every interpreter activates the shim, e.g.\n\n"
        '  export PYTHONPATH="$(python -m npu_shim bootstrap-dir)${PYTHONPATH:+:$PYTHONPATH}"',
    )
    doctor = commands.add_parser(
        "doctor",
        help="will new interpreters and Ray workers from here get the shim? exit 1 if an NPU critic would fail",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the exit codes are a list
        description="Start a fresh interpreter with this environment as given (or, with --ray, a task on a running "
        "Ray cluster),\nimport verl.workers.engine there (nothing runs on a device) and report which route gave it "
        "the shim,\nor why none did, and what the shim did to verl.",
        epilog="exit status:\n"
        "  0  ok; not judged (verl sees no NPU there: use --device npu); not applicable (no verl)\n"
        "  1  problem: where verl sees an NPU (or --device npu), the Megatron critic's engine does not resolve,\n"
        "     a fix it needs is turned off or meets code it does not know, Megatron-Bridge (verl's default)\n"
        "     does not import, or MindSpeed is missing; anywhere, verl is installed but does not import,\n"
        "     MindSpeed is installed but does not import, or MegatronAdaptor is installed without a\n"
        "     TransformerEngineNPU that imports; with --device npu, verl is missing; with --strict (or\n"
        "     NPU_SHIM_STRICT=1), NPU_SHIM_DISABLED_FIXES names no fix\n"
        "  2  no verdict: the probe gave no report (--timeout, no Ray cluster), the probed interpreter has no\n"
        "     npu_shim of this release and its critic's lookup does not fail on an NPU, or bad arguments",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object (keys: see npu_shim.doctor.report)")
    doctor.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="probe a worker of the running Ray cluster at ADDRESS (default: auto) instead of a fresh interpreter",
    )
    doctor.add_argument(
        "--device",
        choices=["npu"],
        help="judge as on a host where verl sees this device, on a machine without one (an image build): verl's "
        "engines are looked up for it, with the same exit status",
    )
    doctor.add_argument(
        "--strict",
        action="store_true",
        help="a name in NPU_SHIM_DISABLED_FIXES that is no fix's is a problem (exit 1), as NPU_SHIM_STRICT=1 makes it",
    )
    doctor.add_argument(
        "--timeout",
        type=_seconds,
        default=600,
        help="seconds to wait for the probe, connecting to Ray included (default: 600 s)",
    )
    runtime_env = commands.add_parser(
        "runtime-env",
        help="print the Ray runtime_env that gives verl's workers the shim",
        description="Print the runtime_env for `ray job submit --runtime-env-json` and verl's "
        "+ray_kwargs.ray_init.runtime_env=... override, for the npu_shim that interpreters started elsewhere "
        "import (as bootstrap-dir does).",
    )
    runtime_env.add_argument("--json", action="store_true", help="print only the runtime_env, as JSON")
    runtime_env.add_argument(
        "--route",
        choices=["VERL_USE_EXTERNAL_MODULES", "PYTHONPATH"],
        help="VERL_USE_EXTERNAL_MODULES (default for an installed shim) or PYTHONPATH (default for a checkout)",
    )
    for command in (bootstrap, doctor, runtime_env):  # what it was given wrong is told with its own usage
        command.set_defaults(command_parser=command)
    return parser


def emit(text: str) -> None:
    """Print ``text`` and a newline; a reader that went away (``| head -1``) is not worth a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that this flush cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def package_dir_for_workers() -> str | None:
    """The directory of the npu_shim package that interpreters started elsewhere import (None: this one): ``python
    -m`` puts the current directory first on sys.path, which Ray workers and other directories do not see."""
    from importlib.machinery import PathFinder

    try:
        cwd = os.getcwd()
    except OSError:  # started from a deleted directory, which '' and relative entries would stand for
        elsewhere = [entry for entry in sys.path if os.path.isabs(entry)]
    else:
        elsewhere = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != cwd]
    spec = PathFinder.find_spec("npu_shim", elsewhere)
    locations = list(spec.submodule_search_locations or []) if spec and spec.origin else []  # not a namespace
    return locations[0] if locations else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status is kept when stdout is closed early."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would answer with the top-level usage, even for the doctor's options
        before_the_command = argv.index(unknown[0]) < argv.index(args.command)
        (parser if before_the_command else args.command_parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in ("bootstrap-dir", "runtime-env"):
        from npu_shim import propagation

        package_dir = package_dir_for_workers()
        if args.command == "bootstrap-dir":
            emit(propagation.bootstrap_dir(package_dir))
        else:
            route = args.route or propagation.default_route(package_dir)
            emit(propagation.render(route, as_json=args.json, package_dir=package_dir))
        return 0
    from npu_shim.doctor import command

    text, status = command.main(
        as_json=args.json,
        ray_address=None if args.ray == "auto" else args.ray,
        use_ray=args.ray is not None,
        timeout=args.timeout,
        device=args.device,
        strict=args.strict,
    )
    emit(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
