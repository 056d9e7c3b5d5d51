"""Run one verl release on a simulated NPU under one activation of npu_shim; print a JSON report.

Used by the matrix tests (one subprocess per activation, since verl decides at
import time whether there is an NPU) and by ``demo.py``. Modes:

- ``none``: the shim is not loaded at all;
- ``sitecustomize``: the caller put the checkout on PYTHONPATH;
- ``import-before``: ``import npu_shim`` before verl;
- ``import-after``: ``import npu_shim`` after ``verl.workers.engine``.

The simulated NPU (``simulated_npu``'s stand-ins) must be on PYTHONPATH.

``probe.py MODE OUT`` runs on one gloo rank. ``probe.py MODE OUT --rank R
--world-size 2`` (with MASTER_ADDR/MASTER_PORT set, one process per rank) builds
both engines with context parallelism 2 and reports the ring state the
MindSpeed stand-in built on this rank.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
MODES = ("none", "sitecustomize", "import-before", "import-after")
MINDSPEED_LINE_VARIABLE = "NPU_SHIM_SIM_MINDSPEED"
Name = TypeVar("Name")  # what finish() knows a child by


def verl_files_digest() -> str:
    """A hash of every file of the installed verl, bytecode caches aside (Python writes those itself)."""
    spec = importlib.util.find_spec("verl")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def testing_kit() -> Any:
    """The kit, installed in the environment as a user installs it (``pip install ./kit``, noxfile)."""
    import simulated_npu

    return simulated_npu


def start(
    mode: str, output: Path, *options: str, script: str = __file__, ahead: tuple[str, ...] = (), **variables: str
) -> subprocess.Popen[str]:
    """Run ``script`` (this file) under one activation in a fresh interpreter with a clean environment; wait for it
    with :func:`finish`.

    PATH and HOME only, plus ``variables``; the simulated NPU on PYTHONPATH, ``ahead`` before it (real
    MindSpeed's source, tests/real_mindspeed), and the checkout before those for ``sitecustomize``.
    """
    kept = ("PATH", "HOME", MINDSPEED_LINE_VARIABLE)  # the line the MindSpeed stand-in simulates (noxfile)
    env = {name: os.environ[name] for name in kept if name in os.environ}
    if ahead:
        env["PYTHONPATH"] = os.pathsep.join(ahead)
    # the simulated NPU, and MegatronAdaptor's stand-in on the lines that import it (simulated_npu_env)
    env = testing_kit().simulated_npu_env(env)
    if mode == "sitecustomize":
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
    env.update(variables)
    return launch([sys.executable, script, mode, str(output), *options], env, cwd=output.parent)


def launch(
    command: list[str], env: dict[str, str], cwd: Path | None = None, stdout: Any = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """Start ``command`` with its stderr in a temporary file (``stderr_log``), which :func:`finish` reads and closes."""
    # stderr into a file, not a pipe: a child that writes more than a pipe holds blocks until it is read, and a
    # caller waiting on another rank first, which waits on this one in a collective, would wait for ever (real
    # MindSpeed core_r0.18.0's patch pass makes transformers warn some hundred kB at import)
    log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by finish()
    child = subprocess.Popen(command, env=env, cwd=cwd, stdout=stdout, stderr=log, text=True)
    child.stderr_log = log
    return child


def finish(children: dict[Name, subprocess.Popen[str]], timeout: float = 600) -> dict[Name, tuple[int, str]]:
    """Wait for every child at once, ``timeout`` s in all: (exit status, stderr) by name. A child that fails ends the
    others of its group (the same ``rendezvous``: :func:`start_group`), which would wait for it until the timeout;
    children of no group, or of another, go on. Each child the test ended (those too at the deadline) is reported as
    failed, with a line saying why at the end of its stderr."""
    deadline = time.monotonic() + timeout
    ended: dict[Name, str] = {}  # name -> why the test ended it
    results = {}
    try:
        running = set(children)
        while running:
            exited = {name for name in running if children[name].poll() is not None}
            running -= exited
            for name in exited:
                failed, group = children[name], getattr(children[name], "rendezvous", None)
                if failed.returncode and group is not None:  # its peers wait for it in a collective, or at the store
                    for peer in running:
                        if getattr(children[peer], "rendezvous", None) is group:
                            ended.setdefault(peer, f"rank {failed.rank} of its group failed")
            if time.monotonic() > deadline:
                for name in running:
                    ended.setdefault(name, f"still running after {timeout:.0f} s")
            for name in running & ended.keys():
                children[name].kill()
                children[name].wait()
            running -= ended.keys()
            if running:
                time.sleep(0.2)
        for name, child in children.items():
            child.stderr_log.seek(0)
            note = f"\n[ended by the test: {ended[name]}]" if name in ended else ""
            results[name] = (child.returncode, child.stderr_log.read() + note)
    finally:
        for child in children.values():
            child.kill()
            child.wait()
            child.stderr_log.close()
    return results


def start_group(
    outputs: list[Path], start_rank: Callable[[int, Path, dict[str, str]], subprocess.Popen[str]]
) -> list[tuple[subprocess.Popen[str], Path]]:
    """A process per rank, ``start_rank(rank, output, address)``, all meeting at one ``rendezvous`` (the kit's):
    the processes and their outputs. The store lives as long as the processes are waited for (:func:`finish`, which
    ends a group's other ranks when one fails)."""
    store, address = testing_kit().rendezvous(len(outputs))
    ranks = [(start_rank(rank, output, address), output) for rank, output in enumerate(outputs)]
    for rank, (process, _) in enumerate(ranks):
        process.rendezvous, process.rank = store, rank
    return ranks


def start_ranks(mode: str, directory: Path, world_size: int = 2) -> list[tuple[subprocess.Popen[str], Path]]:
    """``world_size`` rank processes of one activation (context parallelism over all of them), and their outputs."""
    outputs = [directory / f"{mode}-rank{rank}.json" for rank in range(world_size)]
    options = ("--world-size", str(world_size))
    return start_group(
        outputs, lambda rank, output, address: start(mode, output, "--rank", str(rank), *options, **address)
    )


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def qualified(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def fresh_mindspeed() -> list[dict[str, Any]]:
    """The MindSpeed stand-in as a new process has it; its (emptied) list of repatch calls.

    Used directly rather than through simulated_npu: npu_shim is not on sys.path in every mode.
    """
    import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

    megatron_adaptor.simulate_fresh_process()
    megatron_adaptor.calls.clear()
    return megatron_adaptor.calls


def attention() -> str:
    """Which attention Megatron's layers get: ``DotProductAttention`` as looked up now, and its forward."""
    from megatron.core.transformer import dot_product_attention

    cls = dot_product_attention.DotProductAttention
    return f"{qualified(cls)} / {qualified_function(cls.forward)}"


def build_engine(
    model_type: str, override: dict, model_dir: Path, context_parallel_size: int = 1, colocated: bool = False
) -> dict[str, Any]:
    """Build one engine for real with verl's own config classes; report its repatch calls and ring state.

    MindSpeed is put back as a new worker process has it first, and Megatron's parallel state
    destroyed: a worker that builds one engine. ``colocated``: neither, as when verl builds
    colocated roles' engines one after the other in one process (the first one initialises
    Megatron's parallel state, and MindSpeed keeps every argument any of them set).
    """
    from megatron.core import parallel_state
    from mindspeed.core.context_parallel import model_parallel_utils
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import HFModelConfig, McoreEngineConfig, McoreOptimizerConfig
    from verl.workers.engine import EngineRegistry

    architecture = "Qwen2ForTokenClassification" if model_type == "value_model" else "Qwen2ForCausalLM"
    model_path = testing_kit().tiny_model_dir(model_dir / architecture, architecture)  # config only: no weights
    model_config = HFModelConfig(path=model_path, load_tokenizer=False)
    engine_config = McoreEngineConfig(context_parallel_size=context_parallel_size, override_transformer_config=override)
    user_config_before = copy.deepcopy(engine_config.override_transformer_config)
    optimizer_config = McoreOptimizerConfig(lr=1e-6)
    checkpoint_config = CheckpointConfig()

    if colocated:
        import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)

        calls = megatron_adaptor.calls
        calls.clear()
    else:
        parallel_state.destroy_model_parallel()
        calls = fresh_mindspeed()
    report: dict[str, Any] = {"override": override}
    try:
        engine = EngineRegistry.new(
            model_type, "megatron", model_config, engine_config, optimizer_config, checkpoint_config
        )
    except Exception as error:  # reported, not raised: the test says what was expected
        report["error"] = f"{type(error).__name__}: {error}"
        report["repatch_calls"] = jsonable(calls)
        return report
    report["engine"] = qualified(type(engine))
    report["parallel_state_initialized_after"] = parallel_state.model_parallel_is_initialized()
    report["context_parallel_ranks"] = list(parallel_state.get_context_parallel_global_ranks())
    report["ring_state"] = model_parallel_utils.ring_state()
    report["attention"] = attention()  # the class MindSpeed left in place, and which forward patch is on
    report["repatch_calls"] = jsonable(calls)
    report["user_config_unchanged"] = engine_config.override_transformer_config == user_config_before
    report["user_config_after"] = jsonable(engine_config.override_transformer_config)
    return report


def resolve(model_type: str) -> dict[str, Any]:
    from verl.workers.engine import EngineRegistry

    try:
        cls = EngineRegistry.get_engine_cls(model_type, "megatron")
    except (AssertionError, ValueError) as error:  # verl 0.9 raises ValueError for an unknown device
        return {"error": f"{type(error).__name__}: {error}"}
    from verl.workers.engine.megatron import transformer_impl as megatron_impl

    base = (
        megatron_impl.MegatronEngineWithValueHead
        if model_type == "value_model"
        else megatron_impl.MegatronEngineWithLMHead
    )
    return {
        "class": qualified(cls),
        "subclass_of_verl_base": issubclass(cls, base),
        "added_by_npu_shim": getattr(cls, "__npu_shim__", False),
        "own_init_device_mesh": qualified_function(cls.__dict__.get("_init_device_mesh")),
        "own_init": "__init__" in cls.__dict__,
    }


def qualified_function(function: Any) -> str | None:
    return None if function is None else f"{function.__module__}.{function.__qualname__}"


def exports() -> dict[str, Any]:
    names = {
        "verl.workers.engine": ["MindspeedEngineWithValueHead", "MegatronEngineWithValueHead"],
        "verl.workers.engine.mindspeed": ["MindspeedEngineWithValueHead"],
        "verl.workers.engine.megatron": ["MegatronEngineWithValueHead"],
        "verl.workers.engine.mindspeed.transformer_impl": ["MindspeedEngineWithValueHead", "_mindspeed_repatch"],
    }
    found = {}
    for module_name, wanted in names.items():
        module = sys.modules[module_name]
        for name in wanted:
            value = getattr(module, name, None)
            found[f"{module_name}.{name}"] = {
                "present": value is not None,
                "in_all": name in module.__all__ if hasattr(module, "__all__") and not name.startswith("_") else None,
                "defined_in": getattr(value, "__module__", None),
            }
    return found


def direct_repatch_with_context_parallel() -> dict[str, Any]:
    """``_mindspeed_repatch`` with CP=2 called directly, on one rank (the engines are built on two elsewhere)."""
    from verl.workers.config import McoreEngineConfig
    from verl.workers.engine.mindspeed import transformer_impl

    config = McoreEngineConfig(context_parallel_size=2, override_transformer_config={"use_flash_attn": True})
    calls = fresh_mindspeed()
    transformer_impl._mindspeed_repatch(config)
    return {"repatch_calls": jsonable(calls)}


WARNINGS: list[str] = []  # what npu_shim warned in this process, in order


class WarningRecorder(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            WARNINGS.append(record.getMessage())


def load_verl(mode: str) -> dict[str, Any]:
    """Import verl under one activation of the shim; report what it resolves."""
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}, not {mode!r}")
    if mode.startswith("import"):
        sys.path.insert(0, str(ROOT))
    report: dict[str, Any] = {"mode": mode, "warnings": WARNINGS}
    logging.getLogger("npu_shim").addHandler(WarningRecorder())
    if mode == "import-before":
        import npu_shim

    import verl
    import verl.workers.engine
    from verl.utils.device import get_device_name

    if mode == "import-after":
        import npu_shim

    report["verl_version"] = verl.__version__
    adaptor = sys.modules.get("mindspeed.megatron_adaptor")
    simulated = getattr(adaptor, "SIMULATED", False)
    # a real MindSpeed (tests/real_mindspeed) has no line profile
    report["mindspeed_line"] = importlib.import_module("mindspeed.lines").current().name if simulated else None
    # which MindSpeed ran: the stand-in's package or a real source tree (tests/real_mindspeed)
    report["mindspeed_file"] = getattr(sys.modules.get("mindspeed"), "__file__", None)
    report["torch_npu_simulated"] = getattr(sys.modules.get("torch_npu"), "SIMULATED", False)
    report["device"] = get_device_name()
    report["shim_loaded"] = "npu_shim" in sys.modules
    if report["shim_loaded"]:
        import npu_shim
        from npu_shim import hook

        report["activated_via"] = npu_shim.activated_via()
        report["outcomes"] = [outcome.__dict__ for outcome in hook.outcomes]
    return report


ENGINE_CASES = {
    "defaults": {},
    "attention_backend": {"attention_backend": "flash"},
    "batch_invariant": {"use_flash_attn_npu_batch_invariant": True},
}
BATCH_INVARIANT = ENGINE_CASES["batch_invariant"]
# Colocated roles, in the order verl builds their engines in one worker process: critic, ref, actor.
CRITIC, REF, ACTOR = ("critic", "value_model"), ("ref", "language_model"), ("actor", "language_model")
COLOCATED = {
    # verl's shipped YAML: the ref inherits the actor's override_transformer_config, the critic does not
    "stock": [(*CRITIC, {}), (*REF, BATCH_INVARIANT), (*ACTOR, BATCH_INVARIANT)],
    # the key set on the critic only: the actor and ref inherit MindSpeed's argument
    "key_on_critic_only": [(*CRITIC, BATCH_INVARIANT), (*REF, {}), (*ACTOR, {})],
}


def build_colocated(roles: list[tuple[str, str, dict]], model_dir: Path) -> dict[str, Any]:
    """Every role's engine in this one process, in verl's order, MindSpeed's state carried from one to the next."""
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    fresh_mindspeed()
    first_warning = len(WARNINGS)
    builds = {
        role: build_engine(model_type, override, model_dir, colocated=True) for role, model_type, override in roles
    }
    return {"builds": builds, "warnings": WARNINGS[first_warning:]}


SINGLE_RANK_STORES: list[Any] = []


def init_single_rank() -> None:
    """A one-rank gloo group, its store hosted in this process (``rendezvous``)."""
    import torch

    store, address = testing_kit().rendezvous(1)
    os.environ.update(address)
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    SINGLE_RANK_STORES.append(store)  # for as long as the group lives


def main(mode: str) -> dict[str, Any]:
    """One gloo rank: resolution, exports, and every engine case."""
    import torch

    digest_before = verl_files_digest()
    report = load_verl(mode)
    report["verl_digest_before"] = digest_before
    report["value_model"] = resolve("value_model")
    report["language_model"] = resolve("language_model")
    report["exports"] = exports()

    init_single_rank()
    engines: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as model_dir:
        for model_type in ("value_model", "language_model"):
            for case, override in ENGINE_CASES.items():
                engines[f"{model_type}/{case}"] = build_engine(model_type, override, Path(model_dir))
        report["colocated"] = {name: build_colocated(roles, Path(model_dir)) for name, roles in COLOCATED.items()}
    report["engines"] = engines
    if hasattr(sys.modules["verl.workers.engine.mindspeed.transformer_impl"], "_mindspeed_repatch"):
        report["context_parallel"] = direct_repatch_with_context_parallel()
    torch.distributed.destroy_process_group()
    report["verl_digest_after"] = verl_files_digest()
    return report


def main_context_parallel(mode: str, rank: int, world_size: int) -> dict[str, Any]:
    """One rank of ``world_size``: both engines with context parallelism over every rank."""
    import torch

    report = load_verl(mode)
    report["rank"] = rank
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    engines: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as model_dir:
        for model_type in ("value_model", "language_model"):
            for case in ("defaults", "batch_invariant"):
                engines[f"{model_type}/{case}"] = build_engine(
                    model_type, ENGINE_CASES[case], Path(model_dir), context_parallel_size=world_size
                )
    report["engines"] = engines
    torch.distributed.destroy_process_group()
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("output", nargs="?", help="write the JSON report here instead of printing it")
    parser.add_argument("--rank", type=int, help="this process's rank (MASTER_ADDR/MASTER_PORT from the environment)")
    parser.add_argument("--world-size", type=int, default=2)
    arguments = parser.parse_args()
    if arguments.rank is None:
        result = main(arguments.mode)
    else:
        result = main_context_parallel(arguments.mode, arguments.rank, arguments.world_size)
    text = json.dumps(result, indent=2, default=str)
    if arguments.output:
        Path(arguments.output).write_text(text)
    else:
        print(text)
