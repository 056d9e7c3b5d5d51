"""What npu_shim costs at start-up, at ``import verl.workers.engine`` and per registry call.

Why: the shim is loaded by a ``sitecustomize.py`` on PYTHONPATH, so *every*
interpreter in a container pays for it (pip, ray's helpers, shell one-liners),
not only the ones that train. Its start-up half is standard library only and
defers wrapt (~50 ms) until verl is imported; these figures show whether that
holds and what is left.

What is measured (all in child processes started with ``sys.executable``, a
clean environment of PATH, HOME and only the PYTHONPATH a variant needs, and a
temporary empty working directory):

1. Interpreter start-up, ``python -c pass``. Every round runs each variant once,
   in a shuffled order:

   - ``bare``: no PYTHONPATH;
   - ``empty-sc``: an empty ``sitecustomize.py``, the floor of any sitecustomize shim;
   - ``shim-sc``: PYTHONPATH=<checkout>, the checkout's ``sitecustomize.py``;
   - ``shim-bootstrap``: the installed entry point, ``<site>/npu_shim_bootstrap`` with ``<site>`` (a
     directory holding a copy of the package, as pip installs it) on sys.path too, as site-packages is;
   - ``other-env``: the same bootstrap in an interpreter whose sys.path lacks ``<site>`` (another
     environment's), where it activates nothing;
   - ``import-shim``: ``-c "import npu_shim"`` with no sitecustomize (that copy of the package);
   - ``naive-wrapt``: a ``sitecustomize.py`` that does ``import wrapt``, the design the lazy one avoids;
   - ``empty-sc-site``: ``empty-sc`` with ``<site>`` on PYTHONPATH too, the floor for ``shim-bootstrap``.

   Goal: the median of the per-round ratios shim-sc / empty-sc, and shim-bootstrap /
   empty-sc-site, is <= 1.01.
   Before timing, each variant is checked once (torch, verl and wrapt not
   loaded; npu_shim loaded and activated where it should be), and the two routes load exactly
   the modules their floors load: the shim's start-up imports nothing.
   What the environment itself runs at start-up (its ``.pth`` files' import lines) is printed
   first: every variant pays it, the floors included, so the ratios compare like with like.

   The variants run twice, each time over fresh copies of the files they start
   from: once with bytecode cached (``__pycache__`` written by an untimed round),
   once where it cannot be (``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__``,
   as in a read-only image without precompiled bytecode), where every interpreter
   compiles the start-up files anew. Goal there: <= 1.03.
2. ``python -c "import verl.workers.engine"`` with the shim (PYTHONPATH=<checkout>)
   and without it (an empty sitecustomize), both with the simulated NPU of
   ``simulated_npu`` on PYTHONPATH so that the shim really injects its
   engine; paired rounds in alternating order. Goal: median paired ratio <= 1.02.
3. ``EngineRegistry.get_engine_cls("language_model", "megatron")`` per call,
   with ``timeit`` after ``import verl.workers.engine``, in children with and
   without the shim (one process cannot hold both); a few pairs of children in
   alternating order, since a busy neighbour can halve one child's speed. The
   shim wraps nothing in the registry, so the ratio should be ~1.0.

Machines are shared and noisy, so the script reports medians and paired
ratios and asserts nothing about time: it always exits 0 once its sanity checks
pass (a failed sanity check exits 1, since the figures would be meaningless).

Usage (with the verl 0.7.1 environment's python; ``make bench`` does the same)::

    .cache/envs/verl-0.7.1-????????????/bin/python benchmarks/startup.py             # everything: ~4 min idle, 9 busy
    .cache/envs/verl-0.7.1-????????????/bin/python benchmarks/startup.py --skip-verl # start-up only
    .cache/envs/verl-0.7.1-????????????/bin/python benchmarks/startup.py --rounds 500 --import-rounds 11

To see where start-up time goes, ``--instructions`` counts each variant's
instructions under valgrind (the same count every run, whatever else the machine
does), and ``valgrind --tool=callgrind`` of one variant against its floor, through
``callgrind_annotate --inclusive=yes``, says in which of CPython's functions they
go (docs/costs.md has the breakdown).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
PACKAGE = CHECKOUT / "npu_shim"
SIMULATED = CHECKOUT / "kit" / "simulated_npu" / "simulated"  # the kit's stand-ins, read from the checkout

STARTUP_GOAL = 1.01
STARTUP_GOAL_NO_BYTECODE = 1.03
IMPORT_GOAL = 1.02
CALL_REPEATS = 7
HEAVY = ("torch", "verl", "wrapt")

# Printed by every start-up variant in the sanity check, after the variant's own code.
# npu_shim's sitecustomize activates without importing npu_shim: its finder in sys.meta_path says so.
PROBE = (
    "import sys, json; s = sys.modules.get('npu_shim'); "
    f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), 'modules': sorted(sys.modules), "
    "'npu_shim': s is not None, 'via': s.activated_via() if s else 'sitecustomize' "
    "if [f for f in sys.meta_path if hasattr(f, 'npu_shim_waiting')] else None}))"
)

IMPORT_ENGINE = "import verl.workers.engine"
# Run once per variant of part 2 before timing: did the shim inject (or not)?
ENGINE_PROBE = f"""
import json, time
t = time.perf_counter(); {IMPORT_ENGINE}; t = time.perf_counter() - t
from verl.utils.device import get_device_name
from verl.workers.engine import EngineRegistry
try:
    value = EngineRegistry.get_engine_cls("value_model", "megatron").__name__
except AssertionError:
    value = None
print(json.dumps({{"device": get_device_name(), "value_model": value, "import_s": t}}))
"""
CALLS_PROBE = """
import json, sys, timeit
{import_engine}
from verl.workers.engine import EngineRegistry

def per_call_ns():
    timer = timeit.Timer('get("language_model", "megatron")', globals={{"get": EngineRegistry.get_engine_cls}})
    return [t / {number} * 1e9 for t in timer.repeat(repeat={repeat}, number={number})]

runs, late = per_call_ns(), None
if "npu_shim" not in sys.modules:  # activate the shim now, after verl: the same process, patched
    sys.path.insert(0, {checkout!r})
    import npu_shim
    EngineRegistry.get_engine_cls("value_model", "megatron")  # raises unless the shim injected
    late = per_call_ns()
print(json.dumps({{"runs": runs, "late": late}}))
"""


@dataclass
class Variant:
    """One way of starting an interpreter: its PYTHONPATH entries and its ``-c`` code."""

    name: str
    what: str
    pythonpath: list[Path]
    code: str = "pass"
    expect: dict[str, object] = field(default_factory=dict)
    times_ns: list[int] = field(default_factory=list)
    bytecode: bool = True

    def env(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/")}
        if not self.bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(map(str, self.pythonpath))
        return env


class SanityError(RuntimeError):
    pass


def run(variant: Variant, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` the way ``variant`` starts; a non-zero exit is a sanity failure."""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=variant.env(), cwd=cwd, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SanityError(f"{variant.name}: exit {proc.returncode}\n{proc.stderr}")
    return proc


def timed(variant: Variant, code: str, cwd: Path) -> int:
    """Wall-clock nanoseconds of one ``subprocess.run``."""
    start = time.perf_counter_ns()
    run(variant, code, cwd)
    return time.perf_counter_ns() - start


def make_startup_variants(tmp: Path, bytecode: bool) -> list[Variant]:
    """The start-up variants, over their own copies (in ``tmp``) of everything the shim runs at start-up."""
    empty_sc = tmp / "empty-sc"
    wrapt_sc = tmp / "wrapt-sc"
    checkout = tmp / "checkout"
    link_dir = tmp / "site"
    for directory in (empty_sc, wrapt_sc, checkout):
        directory.mkdir(parents=True)
    (empty_sc / "sitecustomize.py").write_text("")
    (wrapt_sc / "sitecustomize.py").write_text("import wrapt\n")
    # copies, not links: every import through a symlinked directory pays for resolving it
    no_bytecode = shutil.ignore_patterns("__pycache__")
    for link in ("sitecustomize.py", "_npu_shim_chain.py"):
        shutil.copy2(CHECKOUT / link, checkout)  # the file its symlink names
    shutil.copytree(PACKAGE, checkout / "npu_shim", ignore=no_bytecode)
    shutil.copytree(PACKAGE, link_dir / "npu_shim", ignore=no_bytecode)
    shutil.copytree(CHECKOUT / "npu_shim_bootstrap", link_dir / "npu_shim_bootstrap", ignore=no_bytecode)
    unloaded = {"heavy": [], "npu_shim": False, "via": None}
    variants = [
        Variant("bare", "no PYTHONPATH", [], expect=unloaded),
        Variant("empty-sc", "empty sitecustomize.py", [empty_sc], expect=unloaded),
        Variant("empty-sc-site", "empty sitecustomize.py, and <site>", [empty_sc, link_dir], expect=unloaded),
        Variant(
            "shim-sc",
            "checkout sitecustomize",
            [checkout],
            expect={"heavy": [], "npu_shim": False, "via": "sitecustomize"},  # npu_shim comes with verl
        ),
        Variant(
            "shim-bootstrap",
            "installed-style: <site>/npu_shim_bootstrap, <site>",
            [link_dir / "npu_shim_bootstrap", link_dir],
            expect={"heavy": [], "npu_shim": False, "via": "sitecustomize"},
        ),
        Variant(
            "other-env",
            "another environment's <site>/npu_shim_bootstrap",
            [link_dir / "npu_shim_bootstrap"],
            expect=unloaded,
        ),
        Variant(
            "import-shim",
            "-c 'import npu_shim'",
            [link_dir],
            "import npu_shim",
            {"heavy": [], "npu_shim": True, "via": "import"},
        ),
        Variant("naive-wrapt", "sitecustomize: import wrapt", [wrapt_sc], expect={"heavy": ["wrapt"]}),
    ]
    for variant in variants:
        variant.bytecode = bytecode
    return variants


def bytecode_written(tmp: Path) -> list[str]:
    return sorted(str(path.relative_to(tmp)) for path in tmp.rglob("__pycache__"))


# Each route and its floor (an empty sitecustomize with the same PYTHONPATH entries but the shim's).
PAIRS = (("shim-sc", "empty-sc"), ("shim-bootstrap", "empty-sc-site"))


def check_startup(variants: Sequence[Variant], cwd: Path) -> None:
    """Fail loudly unless each variant loads what it should (and nothing heavy), and each route loads exactly
    its floor's modules; also warms caches."""
    modules = {}
    for variant in variants:
        proc = run(variant, f"{variant.code}; {PROBE}", cwd)
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        modules[variant.name] = seen.pop("modules")
        wrong = {key: seen[key] for key, want in variant.expect.items() if seen[key] != want}
        if wrong or proc.stderr:
            raise SanityError(f"{variant.name}: expected {variant.expect}, got {seen}; stderr: {proc.stderr!r}")
        print(f"  ok {variant.name:<15} {seen}")
    for shim, floor in PAIRS:
        extra, missing = set(modules[shim]) - set(modules[floor]), set(modules[floor]) - set(modules[shim])
        if extra or missing:
            raise SanityError(f"{shim} imports {sorted(extra)} and not {sorted(missing)}, against {floor}")
        print(f"  ok {shim:<15} loads the {len(modules[shim])} modules {floor} loads, no other")


def startup_pth_lines() -> list[str]:
    """The import lines of this environment's .pth files: code every interpreter here runs at start-up."""
    import site

    lines = []
    for directory in dict.fromkeys([*site.getsitepackages(), site.getusersitepackages()]):
        for pth in sorted(Path(directory).glob("*.pth")) if Path(directory).is_dir() else ():
            for line in pth.read_text(errors="replace").splitlines():
                if line.startswith(("import ", "import\t")):
                    lines.append(f"{pth.name}: {line.strip()[:100]}")
    return lines


def time_startup(variants: Sequence[Variant], rounds: int, cwd: Path) -> None:
    shuffler = random.Random(0x5EED)
    order = list(variants)
    for variant in variants:  # one untimed round: bytecode caches written, files in the page cache
        run(variant, variant.code, cwd)
    for _ in range(rounds):
        shuffler.shuffle(order)
        for variant in order:
            variant.times_ns.append(timed(variant, variant.code, cwd))


def paired(numerator: Sequence[int], denominator: Sequence[int]) -> list[float]:
    return [a / b for a, b in zip(numerator, denominator, strict=True)]


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return q1, q2, q3


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def verdict(ratio: float, goal: float) -> str:
    return "PASS" if ratio <= goal else "MISS"


def report_startup(variants: Sequence[Variant], rounds: int, bytecode: bool) -> None:
    by_name = {variant.name: variant for variant in variants}
    bare, floor = by_name["bare"].times_ns, by_name["empty-sc"].times_ns
    goal = STARTUP_GOAL if bytecode else STARTUP_GOAL_NO_BYTECODE
    how = "bytecode cached" if bytecode else "no bytecode: PYTHONDONTWRITEBYTECODE=1, no __pycache__"
    print(
        f"\n### 1{'a' if bytecode else 'b'}. Interpreter start-up, `python -c pass`, {how} ({rounds} shuffled rounds)\n"
    )
    print("| variant | what | median ms | /bare | /empty-sc | /empty-sc q1-q3 |")
    print("|---|---|---:|---:|---:|---:|")
    for variant in variants:
        vs_bare = statistics.median(paired(variant.times_ns, bare))
        q1, vs_floor, q3 = quartiles(paired(variant.times_ns, floor))
        print(
            f"| {variant.name} | {variant.what} | {ms(statistics.median(variant.times_ns))} "
            f"| {vs_bare:.3f} | {vs_floor:.3f} | {q1:.3f}-{q3:.3f} |"
        )
    # The installed bootstrap is compared with an empty sitecustomize that has the same second entry.
    for shim, base in PAIRS:
        shim_ns, base_ns = by_name[shim].times_ns, by_name[base].times_ns
        ratio = statistics.median(paired(shim_ns, base_ns))
        extra = statistics.median([s - f for s, f in zip(shim_ns, base_ns, strict=True)])
        print(
            f"\nGoal {shim} within {goal - 1:.0%} of {base}: median paired ratio {ratio:.3f} "
            f"(median paired extra {ms(extra)} ms) -> {verdict(ratio, goal)}"
        )


def instructions(variant: Variant, cwd: Path) -> int:
    """Instructions one ``python -c`` of ``variant`` executes (valgrind's callgrind, hash seed fixed)."""
    env = {**variant.env(), "PYTHONHASHSEED": "0"}  # dict and set orders, hence their work, alike every run
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", variant.code]
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    counted = [line.rpartition(":")[2] for line in proc.stderr.splitlines() if "Collected :" in line]
    if proc.returncode != 0 or not counted:
        raise SanityError(f"{variant.name}: valgrind exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return int(counted[-1].strip())


def report_instructions(variants: Sequence[Variant], cwd: Path, bytecode: bool) -> None:
    """Instructions per variant (bytecode as the timed rounds left it) and the routes' ratios to their floors."""
    if shutil.which("valgrind") is None:
        raise SanityError("--instructions needs valgrind on PATH")
    counts = {variant.name: instructions(variant, cwd) for variant in variants if variant.name != "naive-wrapt"}
    print(f"\nInstructions (callgrind, one run each, {'bytecode cached' if bytecode else 'no bytecode'}):\n")
    print("| variant | instructions | /empty-sc |")
    print("|---|---:|---:|")
    for name, count in counts.items():
        print(f"| {name} | {count:,} | {count / counts['empty-sc']:.4f} |")
    for shim, base in PAIRS:
        print(f"\n{shim} / {base}: {counts[shim] / counts[base]:.4f} ({counts[shim] - counts[base]:+,} instructions)")


def make_verl_variants(empty_sc: Path) -> tuple[Variant, Variant]:
    shim = Variant("with shim", "PYTHONPATH=<checkout>:<simulated>", [CHECKOUT, SIMULATED])
    base = Variant("without", "PYTHONPATH=<empty-sc>:<simulated>", [empty_sc, SIMULATED])
    return shim, base


def check_verl(shim: Variant, base: Variant, cwd: Path) -> None:
    """Both see the simulated NPU; only the shim's registry resolves the NPU value-model engine."""
    for variant, injected in ((shim, True), (base, False)):
        seen = json.loads(run(variant, ENGINE_PROBE, cwd).stdout.strip().splitlines()[-1])
        if seen["device"] != "npu" or (seen["value_model"] is not None) != injected:
            raise SanityError(f"{variant.name}: expected device npu and injected={injected}, got {seen}")
        print(f"  ok {variant.name:<10} {seen}")


def time_verl_import(shim: Variant, base: Variant, rounds: int, cwd: Path) -> None:
    for index in range(rounds):
        for variant in (shim, base) if index % 2 == 0 else (base, shim):
            variant.times_ns.append(timed(variant, IMPORT_ENGINE, cwd))


def report_verl_import(shim: Variant, base: Variant, rounds: int) -> None:
    print(f"\n### 2. `python -c {IMPORT_ENGINE!r}`, simulated NPU ({rounds} paired rounds, alternating order)\n")
    print("| variant | PYTHONPATH | median ms | min ms |")
    print("|---|---|---:|---:|")
    for variant in (shim, base):
        print(
            f"| {variant.name} | {variant.what.removeprefix('PYTHONPATH=')} "
            f"| {ms(statistics.median(variant.times_ns))} | {ms(min(variant.times_ns))} |"
        )
    ratios = paired(shim.times_ns, base.times_ns)
    q1, ratio, q3 = quartiles(ratios)
    print(
        f"\nGoal with/without within {IMPORT_GOAL - 1:.0%}: median paired ratio {ratio:.3f} "
        f"(q1-q3 {q1:.3f}-{q3:.3f}) -> {verdict(ratio, IMPORT_GOAL)}"
    )


CallRuns = dict[str, list[list[float]]]


def time_calls(shim: Variant, base: Variant, number: int, pairs: int, cwd: Path) -> CallRuns:
    """Per-call ns of each timeit repeat, per child; children of the two variants alternate.

    The children without the shim then ``import npu_shim`` (which patches the
    already imported verl at once) and time again: a same-process comparison,
    free of the differences between processes. Those runs are under ``late``.
    """
    code = CALLS_PROBE.format(import_engine=IMPORT_ENGINE, number=number, repeat=CALL_REPEATS, checkout=str(CHECKOUT))
    runs: CallRuns = {shim.name: [], base.name: [], "late": []}
    for index in range(pairs):
        for variant in (shim, base) if index % 2 == 0 else (base, shim):
            result = json.loads(run(variant, code, cwd).stdout.strip().splitlines()[-1])
            runs[variant.name].append(result["runs"])
            if result["late"] is not None:
                runs["late"].append(result["late"])
    return runs


def report_calls(shim: Variant, base: Variant, runs: CallRuns, number: int) -> None:
    pairs = len(runs[shim.name])
    print(
        f"\n### 3. `EngineRegistry.get_engine_cls('language_model', 'megatron')` "
        f"({pairs} alternating pairs of children, each {CALL_REPEATS} x {number:,} calls per variant)\n"
    )
    print("| variant | min ns/call | median ns/call |")
    print("|---|---:|---:|")
    rows = ((shim.name, shim.name), (base.name, base.name), ("without, then `import npu_shim` (same child)", "late"))
    for label, key in rows:
        every = [ns for child in runs[key] for ns in child]
        print(f"| {label} | {min(every):.1f} | {statistics.median(every):.1f} |")
    across = [min(a) / min(b) for a, b in zip(runs[shim.name], runs[base.name], strict=True)]
    within = [min(a) / min(b) for a, b in zip(runs["late"], runs[base.name], strict=True)]
    print(
        f"\nmedian ratio of per-child minima (~1.0 expected): with/without across children "
        f"{statistics.median(across):.3f}; after/before activation within a child {statistics.median(within):.3f}"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="start-up rounds, each runs every variant once")
    parser.add_argument("--import-rounds", type=int, default=7, help="paired rounds of `import verl.workers.engine`")
    parser.add_argument("--calls", type=int, default=200_000, help="get_engine_cls calls per timeit repeat")
    parser.add_argument("--call-pairs", type=int, default=3, help="pairs of children timing get_engine_cls")
    parser.add_argument("--skip-verl", action="store_true", help="measure interpreter start-up only")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each start-up variant's instructions under valgrind (callgrind): a figure free of the "
        "machine's noise, for finding where the time goes",
    )
    args = parser.parse_args(argv)
    if min(args.rounds, args.import_rounds, args.calls, args.call_pairs) < 1:
        parser.error("--rounds, --import-rounds, --calls and --call-pairs must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"# {shlex.join([sys.executable, *sys.argv])}\n"
        f"# Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    )
    print("# what this environment runs at start-up, floors included (.pth import lines):")
    for line in startup_pth_lines() or ["(nothing)"]:
        print(f"#   {line}")
    with tempfile.TemporaryDirectory(prefix="npu_shim-bench-") as name:
        tmp = Path(name)
        cwd = tmp / "cwd"
        cwd.mkdir()
        try:
            for bytecode in (True, False):
                files = tmp / ("cached" if bytecode else "uncached")
                variants = make_startup_variants(files, bytecode)
                print(f"\nsanity (start-up variants, bytecode {'cached' if bytecode else 'not written'}):")
                check_startup(variants, cwd)
                time_startup(variants, args.rounds, cwd)
                if not bytecode and bytecode_written(files):
                    raise SanityError(f"bytecode was written: {bytecode_written(files)}")
                report_startup(variants, args.rounds, bytecode)
                if args.instructions:
                    report_instructions(variants, cwd, bytecode)
            if args.skip_verl:
                return 0
            shim, base = make_verl_variants(tmp / "cached" / "empty-sc")
            print("\nsanity (verl, simulated NPU):")
            check_verl(shim, base, cwd)
            time_verl_import(shim, base, args.import_rounds, cwd)
            report_verl_import(shim, base, args.import_rounds)
            report_calls(shim, base, time_calls(shim, base, args.calls, args.call_pairs, cwd), args.calls)
        except SanityError as error:
            print(f"\nSANITY CHECK FAILED, no figures are reported: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
