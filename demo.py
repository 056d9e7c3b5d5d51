"""The demonstration `make demo` runs: verl 0.7.1 on a SIMULATED Ascend NPU, without and with npu_shim.

Run it with ``make demo`` (builds the verl 0.7.1 environment on first use). Every check runs twice, in fresh
interpreters: without the shim, and with it as the README's "Install and turn on" sets it up for verl 0.6-0.8
(pip-installed, here into a temporary folder on PYTHONPATH, and ``VERL_USE_EXTERNAL_MODULES=npu_shim``, so that verl's
own ``import verl`` activates it). tests/matrix/probe.py builds verl's Megatron critic and actor engines for real,
with real megatron-core, on one gloo rank, then on two ranks with context parallelism 2; the NPU is
simulated_npu's stand-in torch_npu, and MindSpeed its stand-in, which records each time it is set up
(``repatch``) and, as MindSpeed does, sets up context-parallel attention (its ring) only if that came before
Megatron's parallel state. tests/matrix/train_probe.py trains the critic and actor with the simulated NPU
computing: the critic's values against a Hugging Face reference and its value loss over the steps; the actor on
two ranks with context parallelism 2, its log-probs against the one-rank actor's.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "matrix"))  # probe.py: runs verl under one activation and reports

import probe  # noqa: E402
import train_probe  # noqa: E402

from npu_shim.catalogue import FIXES  # noqa: E402  (by its full name: reading the catalogue activates nothing here)
from npu_shim.patcher import APPLIED  # noqa: E402

STEPS = 3
GIVEN = probe.ENGINE_CASES["defaults"]  # the actor's override_transformer_config in probe.py's builds
WIDTH = 120
ROUTE = "pip install npu-shim (this checkout, into a temporary folder); VERL_USE_EXTERNAL_MODULES=npu_shim"
RUNS = ("without", "with")
Started = list[tuple[subprocess.Popen[str], Path]]  # processes, each with the file it writes its report to
Children = dict[str, Started]
Reports = dict[str, list[dict[str, Any]]]


def install_shim(directory: Path) -> Path:
    """The shim pip-installed (not editable) into ``directory/site``, offline, from a copy of the checkout's top-level
    files, its package and the build backend pyproject.toml names (what a user's checkout holds, without the rest)."""
    source, site = directory / "source", directory / "site"
    for folder in ("npu_shim", "npu_shim_bootstrap", "build_backend"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, source / path.name)
    if importlib.util.find_spec("pip"):
        installer = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-cache-dir"]
    else:
        uv = ROOT / ".cache" / "tools" / "bin" / "uv"
        installer = [str(uv), "pip", "install", "--quiet", "--offline", "--no-cache", "--python", sys.executable]
    subprocess.run([*installer, "--no-deps", "--no-build-isolation", "--target", site, source], check=True)
    return site


def probe_ranks(directory: Path, ahead: tuple[str, ...] = (), **variables: str) -> Started:
    """probe.py on two ranks, context parallelism 2: ``probe.start_ranks`` with the run's environment."""
    outputs = [directory / f"cp2-rank{rank}.json" for rank in range(2)]
    ranks = ("--world-size", "2")
    return probe.start_group(
        outputs,
        lambda rank, output, address: probe.start(
            "none", output, "--rank", str(rank), *ranks, ahead=ahead, **address, **variables
        ),
    )


def run_all(directory: Path) -> dict[str, Reports] | None:
    """Every probe without and with the shim: phase -> run -> its processes' reports; None if one failed."""
    site = install_shim(directory / "install")
    # mode "none": the probe adds no route of its own; "with" has the installed shim importable and verl told to
    # import it, nothing more
    setups: dict[str, dict[str, Any]] = {
        "without": {},
        "with": {"ahead": (str(site),), "VERL_USE_EXTERNAL_MODULES": "npu_shim"},
    }
    folders = {run: directory / run for run in RUNS}
    for folder in folders.values():
        folder.mkdir()
    options = ("--steps", str(STEPS))

    def alone(start: Callable[..., subprocess.Popen[str]], name: str, *options: str) -> Callable[[str], Started]:
        """One process of a run: ``start`` writing its report to ``name``."""
        return lambda run: [(start("none", folders[run] / name, *options, **setups[run]), folders[run] / name)]

    def actor_cp2(run: str) -> Started:
        return train_probe.start_ranks("none", folders[run], "cp2", "--roles", "actor", *options, **setups[run])

    phases: dict[str, Callable[[str], Started]] = {
        "build": alone(probe.start, "build.json"),
        "build_cp2": lambda run: probe_ranks(folders[run], **setups[run]),
        "train": alone(train_probe.start, "train.json", *options),
        "train_cp2": actor_cp2,
    }
    results = {}
    for phase, start in phases.items():
        results[phase] = collect({run: start(run) for run in RUNS})
        if not results[phase]:
            return None
    return results


def collect(children: Children) -> Reports:
    """run -> the reports of its processes; empty if one failed (said on stderr)."""
    reports: Reports = {}
    flat = {(run, index): child for run, runs in children.items() for index, (child, _) in enumerate(runs)}
    finished = probe.finish(flat, timeout=900)
    for run, runs in children.items():
        for index, (_, output) in enumerate(runs):
            status, stderr = finished[(run, index)]
            if status != 0:
                print(f"a run {run} npu_shim failed:\n{stderr}", file=sys.stderr)
                return {}
            reports.setdefault(run, []).append(json.loads(output.read_text()))
    return reports


# --- what each check shows, in plain words; (line, whether it worked) ---------------------------------------------


def error_line(error: str, where: str = "") -> str:
    """``fails[ where]: Kind: the message's first line``."""
    kind, _, message = error.partition(": ")
    return f"fails{where}: {kind}: {message.partition(chr(10))[0]}"


def times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def lookup(report: dict[str, Any]) -> tuple[str, bool]:
    value = report["value_model"]
    if "error" in value:
        return error_line(value["error"]), False
    added = " (added by npu_shim)" if value.get("added_by_npu_shim") else ""
    return f"{value['class'].rsplit('.', 1)[1]}{added}", True


def build(engine: dict[str, Any]) -> tuple[str, bool]:
    if "error" in engine:
        return error_line(engine["error"]), False
    calls = engine["repatch_calls"]
    if not calls:
        return "built; MindSpeed never set up", False
    when = sorted({"after" if call["parallel_state_initialized"] else "before" for call in calls})
    return f"built; MindSpeed set up {times(len(calls))}, {' and '.join(when)} Megatron's parallel state", True


def user_config(engine: dict[str, Any]) -> tuple[str, bool]:
    if "error" in engine:
        return "not built", False
    if engine["user_config_unchanged"]:
        return "left as you gave it", True
    after = engine["user_config_after"]  # the report's "override" is the same dict, written to as well
    written = [f"{key}={value}" for key, value in after.items() if GIVEN.get(key, object()) != value]
    return f"verl wrote {', '.join(written) or 'to it'} into your override_transformer_config", False


def verl_files(reports: list[dict[str, Any]]) -> tuple[str, bool]:
    unchanged = all(report["verl_digest_before"] == report["verl_digest_after"] for report in reports)
    return ("unchanged (same hash before and after)", True) if unchanged else ("CHANGED", False)


def ring(ranks: list[dict[str, Any]], engine: str) -> tuple[str, bool]:
    builds = [report["engines"][f"{engine}/defaults"] for report in ranks]
    if "error" in builds[0]:
        return error_line(builds[0]["error"]), False
    rings = {str(build["ring_state"]["inter_window_kv"]) for build in builds}
    if rings == {"None"}:
        return "built, but context-parallel attention not set up (MindSpeed came after the device mesh)", False
    if "None" in rings:
        return "built, context-parallel attention set up on one rank only", False
    return f"built; context-parallel attention set up on both ranks (ring over ranks {' / '.join(sorted(rings))})", True


def train_critic(report: dict[str, Any]) -> tuple[str, bool]:
    critic = report["roles"]["critic"]
    if critic["error"]:
        return error_line(critic["error"], "" if critic["stage"] == "build" else f" at {critic['stage']}"), False
    first, *_, last = critic["losses"]
    values = f"values on {critic['output_device']} within {critic['max_abs_diff']:.4f} of a Hugging Face reference"
    return f"{values}; value loss {first:.3f} -> {last:.3f}", True


def train_actor_cp(ranks: list[dict[str, Any]], one_rank: dict[str, Any]) -> tuple[str, bool]:
    actor = ranks[0]["layouts"]["cp2"]["actor"]
    if actor["error"]:
        kind, _, message = actor["error"].partition(": ")
        if message.startswith("Context parallel ranks for ring"):  # MindSpeed's, from its CP attention's forward
            return f"fails at its first forward: {kind} (context-parallel attention was not set up)", False
        return error_line(actor["error"], f" at {actor['stage']}"), False
    reference = one_rank["roles"]["actor"]["outputs_before"]
    pairs = zip(actor["outputs_before"], reference, strict=True)
    difference = max(abs(a - b) for row, other in pairs for a, b in zip(row, other, strict=True))
    first, *_, last = actor["losses"]
    return f"log-probs within {difference:.4f} of the one-rank actor's; policy loss {first:.3f} -> {last:.3f}", True


def checks(results: dict[str, Reports]) -> list[tuple[str, str, dict[str, tuple[str, bool]]]]:
    """(key, what is checked, run -> (what happened, whether it worked)), in the order printed."""
    one = {run: results["build"][run][0] for run in RUNS}
    value, language = (
        {run: one[run]["engines"][f"{model}/defaults"] for run in RUNS} for model in ("value_model", "language_model")
    )
    cp2, trained = results["build_cp2"], {run: results["train"][run][0] for run in RUNS}
    new = 'EngineRegistry.new("{}", "megatron", ...) on one rank'
    rows = [
        ("lookup", 'verl looks up the critic\'s engine: get_engine_cls("value_model", "megatron")', lookup, one),
        ("critic", f"critic: {new.format('value_model')}", build, value),
        ("actor", f"actor: {new.format('language_model')}", build, language),
        ("user_config", f"actor: your override_transformer_config (you gave {GIVEN})", user_config, language),
        ("verl_files", "verl's files on disk", lambda report: verl_files([report]), one),
        ("critic_cp2", "critic, context parallelism 2 on 2 ranks", lambda ranks: ring(ranks, "value_model"), cp2),
        ("actor_cp2", "actor, context parallelism 2 on 2 ranks", lambda ranks: ring(ranks, "language_model"), cp2),
        ("critic_steps", f"critic: {STEPS} PPO steps on one rank (the simulated NPU computes)", train_critic, trained),
    ]
    checked = [(key, title, {run: show(inputs[run]) for run in RUNS}) for key, title, show, inputs in rows]
    actor_steps = {run: train_actor_cp(results["train_cp2"][run], trained[run]) for run in RUNS}
    return [*checked, ("actor_cp2_steps", f"actor: {STEPS} PPO steps, context parallelism 2 on 2 ranks", actor_steps)]


def claims(shown: dict[str, dict[str, bool]], activated: bool) -> list[tuple[str, bool]]:
    """What the run set out to show, each with whether its results bear it out."""
    without, with_ = ({key: worked[run] for key, worked in shown.items()} for run in RUNS)
    critic = ("lookup", "critic", "critic_cp2", "critic_steps")
    return [
        ("without npu_shim a Megatron critic on an NPU fails", not any(without[key] for key in critic)),
        ("with npu_shim the critic builds and trains", all(with_[key] for key in critic)),
        (
            "the actor's context-parallel attention is set up and trains only with npu_shim",
            not without["actor_cp2"] and with_["actor_cp2"] and with_["actor_cp2_steps"],
        ),
        ("your override_transformer_config is left as you gave it", with_["user_config"]),
        ("verl's files were not changed", without["verl_files"] and with_["verl_files"]),
        ("verl's own import activated npu_shim", activated),
    ]


def wrapped(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=" " * len(indent) + "  ")


def fix_lines(outcomes: list[dict[str, str]]) -> list[str]:
    """Every fix of npu_shim's catalogue, in its order, from the ``outcomes`` of one process with the shim: each
    applied one with what the shim said of it, then the others by verdict, then those it never judged there (a fix
    is judged when the module it watches is imported, and that process imported none of theirs)."""
    said = {outcome["fix"]: outcome for outcome in outcomes}
    lines: list[str] = []
    others: dict[str, list[str]] = {}
    unjudged: list[str] = []
    for fix in FIXES:
        outcome = said.get(fix.name)
        if outcome is None:
            unjudged.append(f"{fix.name} (watches {fix.watches})")
        elif outcome["verdict"] == APPLIED:
            lines += wrapped(f"{fix.name}: {outcome['reason']}", "  ")
        else:
            others.setdefault(outcome["verdict"], []).append(fix.name)
    for verdict, names in others.items():
        lines += wrapped(f"{verdict} here: {', '.join(names)}", "  ")
    if unjudged:
        lines += wrapped(
            f"not judged here (nothing in the build imported what it watches): {', '.join(unjudged)}", "  "
        )
    return lines


def render(results: dict[str, Reports]) -> list[str]:
    """The report, no line over WIDTH columns."""
    reports = {run: [report for phase in results.values() for report in phase[run]] for run in RUNS}
    every = [*reports["without"], *reports["with"]]
    versions = ", ".join(sorted({report["verl_version"] for report in every}))
    devices = ", ".join(sorted({report["device"] for report in every}))
    routes = Counter(str(report.get("activated_via")) for report in reports["with"])
    loaded_without = sum(report["shim_loaded"] for report in reports["without"])
    activated = routes == {"VERL_USE_EXTERNAL_MODULES": len(reports["with"])} and not loaded_without
    via = ", ".join(f"{route} in {count}" for route, count in routes.items())
    lines = [
        f"verl {versions} saw device {devices} in all {len(every)} processes.",
        *wrapped(f"npu_shim was activated via {via} of the {len(reports['with'])} processes with it (by verl's own "
                 f"import), and loaded in {loaded_without} of the {len(reports['without'])} without it."),
    ]  # fmt: skip
    shown: dict[str, dict[str, bool]] = {}
    seen: set[str] = set()
    for key, title, outcomes in checks(results):
        lines += ["", *wrapped(title)]
        for run in RUNS:
            text = outcomes[run][0]
            if text.startswith("fails: ") and text in seen:
                text = f"fails: the same {text.split(':')[1].strip()} as above"
            seen.add(text)
            lines += wrapped(text, f"  {run + ' npu_shim:':<18}")
        shown[key] = {run: outcomes[run][1] for run in RUNS}
    lines += ["", "npu_shim's fixes on this verl, in its own words:"]
    lines += fix_lines(results["build"]["with"][0].get("outcomes", []))
    held = claims(shown, activated)
    shown_claims = "; ".join(claim for claim, ok in held if ok) or "none of what it set out to"
    lines += ["", *wrapped(f"Shown on verl {versions}: {shown_claims}.")]
    if missing := [claim for claim, ok in held if not ok]:
        lines += wrapped("NOT shown (see above): " + "; ".join(missing) + ".")
    return lines


def main() -> int:
    print(f"npu_shim demo: verl {metadata.version('verl')} from PyPI, real megatron-core, gloo ranks on this CPU.")
    print("The Ascend NPU is SIMULATED (simulated_npu's stand-ins for torch_npu and MindSpeed).")
    print("without npu_shim: verl as installed")
    print(f"with npu_shim:    {ROUTE}")
    print("Building verl's critic and actor engines, then training them, each way in fresh interpreters ...")
    with tempfile.TemporaryDirectory() as tmp:
        results = run_all(Path(tmp))
    if results is None:
        return 1
    print()
    for line in render(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
