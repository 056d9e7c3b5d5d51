"""Train verl's Megatron critic and actor engines on a simulated NPU that computes; write a JSON report.

``train_probe.py MODE OUT [--roles critic,actor] [--steps N]`` runs in a fresh interpreter (see
:func:`start`), under one activation MODE of the shim (``probe.MODES``), with the simulated NPU in
compute mode (``NPU_SHIM_SIM_COMPUTE=1``: npu tensors compute on the CPU). Per role:

- ``critic``: ``EngineRegistry.new("value_model", "megatron", ...)`` with verl's own config classes
  (bf16, verl's defaults otherwise: the distributed optimizer on), ``initialize()``, ``infer_batch``
  (per-token values), then N ``train_batch`` steps with verl's ``value_loss`` on one fixed batch, each
  followed by an lr scheduler step, then ``infer_batch`` again;
- ``actor``: the same for ``language_model``: log-probs (and entropy), then verl's ``ppo_loss``
  (PPO clipped loss, old log-probs = the log-probs just inferred, fixed seeded advantages).

Where it runs (one mode of :func:`main`):

- one gloo rank (the default): the outputs are compared with a reference computed without verl: Hugging
  Face Qwen2 (Qwen3 on verl 0.6.x, see :func:`model_family`) on the plain CPU, with the weights the
  engine loaded from the model directory (the critic's value head is read out of the engine after
  ``initialize()``: the bridge initialises it);
- ``--rank R --world-size W --layouts tp2,pp2,cp2`` (each ``tp2``, ``pp2``, ``cp2``, or several joined by
  ``-``): one rank of W (one process per rank, MASTER_ADDR/MASTER_PORT from the environment, verl's
  TrainingWorker backends), each layout in turn, as a job of its own (:func:`as_a_new_job`); the test
  compares the outputs with the one-rank run's (outputs, losses and gradient norms exist on the last
  pipeline stage only);
- ``--save DIR [--save-after K]`` (``save_checkpoint`` after K of the N steps, then on to N) and
  ``--resume DIR`` (``load_checkpoint`` after ``initialize()``, then the N steps): a run that resumes, with
  verl's defaults and ``use_checkpoint_opt_param_scheduler`` (the lr scheduler's state restored too).

The report keeps the keys of ``probe.load_verl`` and adds ``layouts`` (layout -> role -> result) and, for one
layout, ``roles``; an error is reported with the stage it stopped at (and on stderr: a rank that stops early
can leave the others waiting).

verl 0.6.x differs (each difference is detected by what verl has, see :func:`legacy_engine` and
:func:`verl_utils`): its engine needs ``use_mbridge=True`` and a Qwen3 model, its engine config has no
micro-batch fields (the batch carries them), its fixed-size micro-batches fail on no-padding batches
(:func:`fixed_size_micro_batches`: dynamic ones instead), and its padding and loss helpers live in
``verl.workers.roles.utils``. It pairs with megatron-core 0.12.1 (MindSpeed ``2.3.0_core_r0.12.1``).

Why the results differ from the reference at all: the engine computes in bf16, the reference in
float32 on the same weights, so each of the engine's roundings to bf16 (a relative step of 2**-8)
shows; the per-token values and log-probs agree to within a few bf16 steps (``TOLERANCE``), not bit
for bit. Runs of the same engine with and without the shim are compared bit for bit through
``weights_sha256`` (the final weights), the losses and the gradient norms.

verl's entropy (``vocab_parallel_entropy``) calls a ``torch.compile``d helper; it runs eagerly here
because the MindSpeed stand-in replaces ``torch.compile`` with the function itself, as real
MindSpeed does on an NPU (Inductor would take the routed ``torch.cuda`` for a real CUDA and fail).

``--bridge mbridge|megatron-bridge`` (verl 0.9.x only, where ``McoreEngineConfig.vanilla_mbridge`` chooses): the
bridge verl converts the model with. ``mbridge`` (the default, ``vanilla_mbridge=True``) is what the matrix runs beside
Megatron 0.12 and 0.16; ``megatron-bridge`` (``vanilla_mbridge=False``, verl 0.9.x's own default) needs the
``megatron.bridge`` package, which the matrix installs beside Megatron 0.18, as verl's Ascend images do (mbridge 0.15.1
runs on Megatron 0.17 and later only adapted: :func:`adapt_mbridge_to_megatron`). The two want different checkpoints
for the critic (see :func:`write_model_dir`).

``--skip-fix NAME[,NAME]`` (with the shim loaded) makes those fixes of the shim stand aside in this process,
as if the shim did not carry them: to show what a fix is for (``megatron_critic`` on verl 0.7.1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import probe
from probe import MODES, ROOT, init_single_rank, load_verl

COMPUTE_VARIABLE = "NPU_SHIM_SIM_COMPUTE"
REFERENCE_FLAG = "--reference-for"  # the child that computes the reference (see reference())
ROLES = ("critic", "actor")
MODEL_TYPES = {"critic": "value_model", "actor": "language_model"}
SEED = 1234
VOCAB, HIDDEN, LAYERS = 256, 64, 2
PROMPT_LENGTH, RESPONSE_LENGTH = 6, 5
PAD = 0
LEARNING_RATE = 1e-4  # at 1e-3 Adam overshoots on this one batch (the critic's loss rises); 1e-4 descends
TOTAL_TRAINING_STEPS = 12  # the lr schedule's length: the same in every run, so that a resumed run can match
# The reference runs in float32 on the same (bf16) weights, so a difference is the engine's own bf16
# rounding. The outputs compared sit where one bf16 step is 2**-8 (values up to ~0.83; the logits behind
# the log-probs, which are taken in float32, are smaller): four such steps, 2**-6 ~= 0.0156, is the
# tolerance. Measured: 0.0053 / 0.0011 (critic / actor, verl 0.6.1, Qwen3), 0.0032 / 0.0009 (0.7.1-0.9.1). What it
# catches (measured on the reference itself): pads attended to move log-probs by 0.09. What it cannot: a
# position off by one moves them by only 0.001 with these small random weights.
TOLERANCE = 2**-6
# verl 0.9.x's two bridges (McoreEngineConfig.vanilla_mbridge True / False); earlier releases have mbridge only
MBRIDGE, MEGATRON_BRIDGE = "mbridge", "megatron-bridge"
BRIDGES = (MBRIDGE, MEGATRON_BRIDGE)


def start(
    mode: str, output: Path, *options: str, ahead: tuple[str, ...] = (), **variables: str
) -> subprocess.Popen[str]:
    """Run this file under one activation in a fresh interpreter, as ``probe.start`` does, in compute mode
    (``ahead``: folders before the kit's simulated packages, e.g. real MindSpeed's source)."""
    return probe.start(mode, output, *options, script=__file__, ahead=ahead, **{COMPUTE_VARIABLE: "1", **variables})


# --- the model directory and the batch ------------------------------------------------------------


def legacy_engine() -> bool:
    """verl 0.6.x's Megatron engine, told apart by what it has: ``use_mbridge`` off by default.

    That engine (before #4528, in 0.7.0) runs its legacy ``hf_to_mcore_config`` on every model, mbridge or not,
    and its non-mbridge model path imports ``flash_attn`` and ``apex`` for the value head (absent on an NPU).
    """
    from verl.workers.config import McoreEngineConfig

    use_mbridge = McoreEngineConfig.__dataclass_fields__.get("use_mbridge")
    return use_mbridge is not None and use_mbridge.default is False


def model_family() -> str:
    """Qwen2; Qwen3 on verl 0.6.x, whose legacy converter knows ``Qwen3ForTokenClassification`` but not Qwen2's."""
    return "Qwen3" if legacy_engine() else "Qwen2"


def write_model_dir(directory: Path, role: str, family: str | None = None, bridge: str = MBRIDGE) -> Path:
    """A tiny Qwen2 (or Qwen3) with seeded random weights (safetensors) and a word-level tokenizer; no download.

    The critic's checkpoint is the same causal LM's; what its config.json names depends on the bridge. mbridge builds
    from the config object and wants a token classifier there (``...ForTokenClassification``, ``num_labels=1``).
    Megatron-Bridge (verl 0.9.x's ``AutoBridge.from_hf_pretrained(path)``) reads config.json itself and refuses any
    architecture but ``...ForCausalLM`` / ``...ForConditionalGeneration``; verl then loads the causal LM's weights with
    ``allowed_mismatched_params=["output_layer.weight"]`` (the vocabulary-sized ``lm_head.weight`` is skipped, not
    missing) and its ``make_value_model`` hook puts the one-output value head in place: the causal LM as it is.
    """
    import torch
    import transformers
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    family = family or model_family()
    directory.mkdir(parents=True, exist_ok=True)
    heads = 4
    config = getattr(transformers, f"{family}Config")(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=heads,
        num_key_value_heads=2,
        max_position_embeddings=128,
        # mbridge 0.15.1 cannot load a value model from a tied checkpoint, on any verl (megatron_critic's notes)
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        pad_token_id=PAD,
        # Qwen3's head_dim defaults to 128 whatever the width; Qwen2 derives 16 (its config.json left as it was)
        **({"head_dim": HIDDEN // heads} if family == "Qwen3" else {}),
    )
    torch.manual_seed(SEED)
    model = getattr(transformers, f"{family}ForCausalLM")(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)
    if role == "critic" and bridge == MBRIDGE:  # verl makes a value model of what config.json calls a token classifier
        config_file = directory / "config.json"
        written = json.loads(config_file.read_text(encoding="utf-8"))
        written.update(architectures=[f"{family}ForTokenClassification"], num_labels=1)
        config_file.write_text(json.dumps(written, indent=2), encoding="utf-8")
    vocabulary = {f"t{index}": index for index in range(VOCAB)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocabulary, unk_token="t1")),
        pad_token="t0",
        unk_token="t1",
        eos_token="t2",
    )
    tokenizer.save_pretrained(directory)
    return directory


def padded_batch() -> dict[str, Any]:
    """Two sequences, left-padded prompts and right-padded responses, as verl's rollout hands them over."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    batch = 2
    prompts = torch.randint(3, VOCAB, (batch, PROMPT_LENGTH), generator=generator)
    responses = torch.randint(3, VOCAB, (batch, RESPONSE_LENGTH), generator=generator)
    prompt_mask = torch.ones(batch, PROMPT_LENGTH, dtype=torch.long)
    response_mask = torch.ones(batch, RESPONSE_LENGTH, dtype=torch.long)
    prompt_mask[0, :2] = 0  # sequence 0: two left pads in its prompt
    response_mask[1, -2:] = 0  # sequence 1: two right pads after its response
    prompts[prompt_mask == 0] = PAD
    responses[response_mask == 0] = PAD
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
    }


def role_tensors(role: str, padded: dict[str, Any]) -> dict[str, Any]:
    """What the trainer adds for training: returns (critic), advantages (actor)."""
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    shape = padded["response_mask"].shape
    if role == "critic":
        return {"returns": torch.randn(shape, generator=generator)}
    return {"advantages": torch.randn(shape, generator=generator)}


def engine_data(padded: dict[str, Any], extra: dict[str, Any], **non_tensor: Any) -> Any:
    """verl's no-padding TensorDict, built as the trainer builds it (``left_right_2_no_padding``)."""
    from verl.utils import tensordict_utils as tu

    left_right_2_no_padding = verl_utils("padding").left_right_2_no_padding
    data = tu.get_tensordict({**padded, **extra}, non_tensor_dict={"temperature": 1.0})
    data = left_right_2_no_padding(data)
    defaults = {
        "use_remove_padding": True,
        "use_dynamic_bsz": not fixed_size_micro_batches(),
        "micro_batch_size_per_gpu": 2,
        "max_token_len_per_gpu": 4096,
        "use_fused_kernels": False,
    }
    tu.assign_non_tensor(data, **{**defaults, **non_tensor})
    return data


def fixed_size_micro_batches() -> bool:
    """Whether verl can cut this batch into fixed-size micro-batches: not on 0.6.x (verl issue #4737).

    0.6.x cuts them with ``TensorDict.split``, which the jagged (no-padding) tensors refuse: ``RuntimeError:
    split_with_sizes(): not supported for NestedTensor on dim=0``, on any device. 0.7.0 cuts them with
    ``tensordict_utils.chunk_tensordict``. On 0.6.x the batch asks for dynamic micro-batches instead
    (``max_token_len_per_gpu`` holds both sequences: one micro-batch, as with the fixed size 2).
    """
    from verl.utils import tensordict_utils as tu

    return hasattr(tu, "chunk_tensordict")


def verl_utils(name: str) -> Any:
    """verl's ``padding`` or ``losses`` module: ``verl.workers.utils``; on 0.6.x ``verl.workers.roles.utils``."""
    import importlib
    from importlib.util import find_spec

    home = "verl.workers.utils" if find_spec("verl.workers.utils") is not None else "verl.workers.roles.utils"
    return importlib.import_module(f"{home}.{name}")


# --- the engines ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Megatron's model-parallel sizes of a run; every other rank is data parallel."""

    tensor: int = 1
    pipeline: int = 1
    context: int = 1

    @classmethod
    def parse(cls, text: str) -> Layout:
        """``tp2``, ``pp2``, ``cp2``, or several joined by ``-`` (``tp2-cp2``)."""
        names = {"tp": "tensor", "pp": "pipeline", "cp": "context"}
        sizes = {}
        for part in text.split("-"):
            kind, size = part[:2], part[2:]
            if kind not in names or not size.isdigit() or int(size) < 1:
                raise SystemExit(f"layout {text!r}: use tpN, ppN, cpN or several joined by '-', e.g. tp2-cp2")
            sizes[names[kind]] = int(size)
        return cls(**sizes)

    @property
    def size(self) -> int:
        return self.tensor * self.pipeline * self.context

    def __str__(self) -> str:
        sizes = {"tp": self.tensor, "pp": self.pipeline, "cp": self.context}
        return "-".join(f"{kind}{size}" for kind, size in sizes.items() if size > 1) or "one rank"


ONE_RANK = Layout()


def bridge_choice() -> bool:
    """Whether this verl chooses its bridge (``McoreEngineConfig.vanilla_mbridge``, 0.9.x): else mbridge only."""
    from verl.workers.config import McoreEngineConfig

    return "vanilla_mbridge" in McoreEngineConfig.__dataclass_fields__


def build_engine(role: str, model_dir: Path, layout: Layout = ONE_RANK, bridge: str = MBRIDGE) -> Any:
    import torch
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import HFModelConfig, McoreEngineConfig, McoreOptimizerConfig
    from verl.workers.engine import EngineRegistry

    model_config = HFModelConfig(path=str(model_dir))
    if hasattr(model_config, "model_type"):  # 0.8.0 on: verl's TrainingWorker tells the engine it is a critic
        model_config.model_type = MODEL_TYPES[role]
    options = {}
    if bridge_choice():
        # 0.9.x defaults to Megatron-Bridge (vanilla_mbridge=False): said either way (--bridge), never left to verl
        options["vanilla_mbridge"] = bridge == MBRIDGE
    if legacy_engine():
        # 0.6.x: mbridge is off by default, and the model path without it imports flash_attn and apex (the
        # value head's LinearForLastLayer), which NPU images do not have: a 0.6.x user turns mbridge on
        options["use_mbridge"] = True
    settings = {
        "micro_batch_size_per_gpu": 2,
        "infer_micro_batch_size_per_gpu": 2,
        "use_remove_padding": True,
        "sequence_parallel": False,
        "use_dist_checkpointing": False,
        "dtype": "bfloat16",
        "tensor_model_parallel_size": layout.tensor,
        "pipeline_model_parallel_size": layout.pipeline,
        "context_parallel_size": layout.context,
        **options,
    }
    # 0.6.x's engine config has no micro-batch or padding fields: the batch carries them (engine_data)
    engine_config = McoreEngineConfig(
        **{key: value for key, value in settings.items() if key in McoreEngineConfig.__dataclass_fields__}
    )
    # the lr scheduler's state is saved and restored with a checkpoint (verl's default restarts it)
    optimizer_config = McoreOptimizerConfig(
        lr=LEARNING_RATE,
        total_training_steps=TOTAL_TRAINING_STEPS,
        clip_grad=1.0,
        use_checkpoint_opt_param_scheduler=True,
    )
    torch.manual_seed(SEED)
    return EngineRegistry.new(
        MODEL_TYPES[role], "megatron", model_config, engine_config, optimizer_config, CheckpointConfig()
    )


def loss_function(role: str, model_config: Any) -> Any:
    from functools import partial

    from verl.workers.config import CriticConfig, McoreActorConfig

    losses = verl_utils("losses")
    ppo_loss, value_loss = losses.ppo_loss, losses.value_loss
    if role == "critic":
        # #5870 (0.8.0) renamed the critic's model_config field to model
        model_field = "model" if "model_config" not in CriticConfig.__dataclass_fields__ else "model_config"
        config = CriticConfig(
            strategy="megatron",
            ppo_micro_batch_size_per_gpu=2,
            rollout_n=1,
            cliprange_value=0.5,
            **{model_field: model_config},
        )
        return partial(value_loss, config=config)
    config = McoreActorConfig(
        strategy="megatron", ppo_micro_batch_size_per_gpu=2, rollout_n=1, use_kl_loss=False, model_config=model_config
    )
    return partial(ppo_loss, config=config)


def output_tensor(role: str, output: Any) -> Any:
    from verl.utils import tensordict_utils as tu

    model_output = output["model_output"]
    key = "values" if role == "critic" else "log_probs"
    return model_output[key] if isinstance(model_output, dict) else tu.get(model_output, key)


def weights(engine: Any) -> dict[str, Any]:
    """The engine's parameters by name, as CPU float32 copies (the simulated npu's inner tensors)."""
    found = {}
    for index, chunk in enumerate(engine.module):
        for name, parameter in chunk.named_parameters():
            found[f"{index}.{name}"] = parameter.detach().cpu().float().clone()
    return found


def digest(parameters: dict[str, Any]) -> str:
    sha = hashlib.sha256()
    for name in sorted(parameters):
        sha.update(name.encode())
        sha.update(parameters[name].numpy().tobytes())
    return sha.hexdigest()


def value_head(parameters: dict[str, Any]) -> Any:
    names = [name for name in parameters if name.endswith("output_layer.weight")]
    if len(names) != 1:
        raise RuntimeError(f"no single value head among the engine's parameters: {names}")
    return parameters[names[0]]


def core_attention(engine: Any) -> str | None:
    """The attention the model's layers run: its class, the function its forward is, and the Transformer Engine
    class underneath where the class is Megatron's wrapper of one (``... over transformer_engine...``)."""
    for module in engine.module[0].modules():
        if type(module).__name__.endswith("DotProductAttention") or hasattr(module, "softmax_scale"):
            forward = type(module).forward
            function = getattr(forward, "__wrapped__", forward)
            cls = type(module)
            found = f"{cls.__module__}.{cls.__qualname__} / {function.__module__}.{function.__qualname__}"
            engines = [base for base in cls.__mro__ if base.__module__.startswith("transformer_engine.")]
            return found + "".join(f" over {base.__module__}.{base.__qualname__}" for base in engines[:1])
    return None


def current_lr(engine: Any) -> float:
    return float(engine.optimizer.param_groups[0]["lr"])


# --- the reference, without verl ------------------------------------------------------------------


def causal_lm_class(model_dir: Path) -> Any:
    """Hugging Face's causal LM class of the model directory's family (a critic's config.json names a classifier)."""
    import importlib

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["model_type"]
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    return getattr(module, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])


def dtype_keyword() -> str:
    """``from_pretrained``'s keyword for the dtype: ``dtype`` from transformers 4.56, ``torch_dtype`` before (0.6.x)."""
    import transformers
    from packaging.version import Version

    return "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"


def reference(role: str, model_dir: Path, padded: dict[str, Any], head: Any | None) -> Any:
    """Per-token values (critic) or log-probs of each next token (actor), padded like verl's output.

    Computed in a child interpreter that never sees verl, the shim or the simulated NPU (PATH and HOME
    only): importing verl on an NPU patches Hugging Face's modules (0.6.x), and the simulated NPU routes
    ``torch.cuda`` (transformers 5 then computes otherwise, by a few bf16 steps, differently per process).
    """
    import torch

    exchange = model_dir / "reference.pt"
    torch.save({"role": role, "padded": padded, "head": head}, exchange)
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    command = [sys.executable, __file__, REFERENCE_FLAG, str(model_dir)]
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    if child.returncode != 0:
        raise RuntimeError(f"the reference interpreter failed:\n{child.stderr[-2000:]}")
    return torch.load(exchange)["expected"]


def reference_here(model_dir: Path) -> None:
    """The child's half of :func:`reference`: Hugging Face on the plain CPU, float32, the model directory's weights."""
    import torch

    exchange = model_dir / "reference.pt"
    request = torch.load(exchange)
    role, padded, head = request["role"], request["padded"], request["head"]
    model = causal_lm_class(model_dir).from_pretrained(
        model_dir, attn_implementation="eager", **{dtype_keyword(): torch.float32}
    )
    model.eval()
    input_ids, attention_mask = padded["input_ids"], padded["attention_mask"]
    with torch.no_grad():
        hidden = model.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=padded["position_ids"]
        ).last_hidden_state  # [B, S, H]
        if role == "critic":
            per_token = torch.nn.functional.linear(hidden, head.to(hidden.dtype)).squeeze(-1)  # [B, S]
        else:
            logits = model.lm_head(hidden).float()
            log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
            per_token = log_probs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            per_token = torch.nn.functional.pad(per_token, (0, 1))  # output at t scores token t+1
    # verl's no_padding_2_padding: the response's entries come from positions one before each response token
    shifted = per_token[:, PROMPT_LENGTH - 1 : PROMPT_LENGTH - 1 + RESPONSE_LENGTH]
    torch.save({**request, "expected": shifted * padded["response_mask"]}, exchange)


def to_padded(role: str, tensor: Any, data: Any) -> Any:
    return verl_utils("padding").no_padding_2_padding(tensor, data).float().cpu()


# --- one role -------------------------------------------------------------------------------------


def skip_fixes(names: list[str]) -> None:
    """Make the shim's fixes ``names`` stand aside in this process (before verl is imported, so before they apply)."""
    import dataclasses

    import npu_shim  # noqa: F401  (first, by its own name: importing a module of ours alone activates nothing)
    from npu_shim import catalogue
    from npu_shim.patcher import NOT_APPLICABLE, Outcome

    def standing_aside(name: str) -> Any:
        return lambda module: Outcome(name, NOT_APPLICABLE, "skipped by --skip-fix")

    unknown = set(names) - set(catalogue.fix_names())
    if unknown:
        raise SystemExit(f"--skip-fix: no such fix {sorted(unknown)}; the fixes are {catalogue.fix_names()}")
    catalogue.FIXES = tuple(
        dataclasses.replace(fix, judge=standing_aside(fix.name)) if fix.name in names else fix
        for fix in catalogue.FIXES
    )


def blank_result() -> dict[str, Any]:
    return {
        "stage": "build",
        "error": None,
        "output_shape": None,
        "output_device": None,
        "last_stage": None,
        "outputs_before": None,
        "outputs_after": None,
        "max_abs_diff": None,
        "tolerance_note": None,
        "losses": [],
        "grad_norms": None,
        "weights_changed": None,
        "weights_sha256": None,
        "lr": None,
        "seconds": None,
    }


@dataclass(frozen=True)
class Run:
    """Where a role runs and what it does besides training: the reference, a checkpoint saved or resumed from."""

    layout: Layout = ONE_RANK
    bridge: str = MBRIDGE  # verl's bridge (--bridge): mbridge or Megatron-Bridge
    save: Path | None = None  # save_checkpoint here (a folder per role) ...
    save_after: int | None = None  # ... after this many steps (default: all of them), training on after it
    resume: Path | None = None  # load_checkpoint from here before training

    @property
    def reference(self) -> bool:
        """Compare with Hugging Face: on one rank, where the value head is whole (several: with the one-rank run)."""
        return self.layout == ONE_RANK


def infer(role: str, engine: Any, padded: dict[str, Any], result: dict[str, Any]) -> Any:
    """``infer_batch`` as the trainer calls it: the output, padded to the responses, on every rank.

    The output exists on the last pipeline stage only; the other stages get it from there, as the trainer
    hands every rank the values (log-probs) the last stage computed.
    """
    import torch
    from megatron.core import parallel_state

    infer_data = engine_data(padded, {}, compute_loss=False, calculate_entropy=role == "actor")
    with engine.eval_mode():
        output = engine.infer_batch(infer_data, loss_function=None)
    ours = torch.zeros(padded["response_mask"].shape, dtype=torch.float32)
    if parallel_state.is_pipeline_last_stage():
        produced = output_tensor(role, output)
        result["output_device"] = str(produced.device)
        result["output_shape"] = list(produced.values().shape if produced.is_nested else produced.shape)
        ours = to_padded(role, produced, infer_data)
        if role == "actor":
            model_output = output["model_output"]
            result["entropy_computed"] = isinstance(model_output, dict) and model_output.get("entropy") is not None
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        source = parallel_state.get_pipeline_model_parallel_last_rank()
        torch.distributed.broadcast(ours, source, group=parallel_state.get_pipeline_model_parallel_group())
    return ours


def max_abs_gap(ours: Any, expected: Any, mask: Any) -> float:
    """The largest |ours - expected| where ``mask`` is True: above or below the reference alike."""
    return float((ours - expected).abs()[mask].max())


def compare_with_reference(
    role: str, ours: Any, model_dir: Path, padded: dict[str, Any], head: Any, result: dict[str, Any]
) -> None:
    expected = reference(role, model_dir, padded, head)
    mask = padded["response_mask"].bool()
    result["max_abs_diff"] = max_abs_gap(ours, expected, mask)
    result["reference_max_abs"] = float(expected.abs()[mask].max())
    result["tolerance"] = TOLERANCE
    result["tolerance_note"] = (
        f"max |verl on the simulated NPU (bf16) - Hugging Face on the CPU (float32)| over {int(mask.sum())} "
        f"valid response tokens; {TOLERANCE} is four bf16 steps at outputs under 1"
    )


def train(
    role: str,
    engine: Any,
    padded: dict[str, Any],
    inferred: Any,
    steps: int,
    result: dict[str, Any],
    after_step: Any = None,
) -> None:
    """``steps`` times ``train_batch`` on one batch with verl's loss, each followed by an lr scheduler step
    and ``after_step(steps done)``."""
    extra = role_tensors(role, padded)
    # the trainer's own order: old values / old log-probs are what the engine just inferred
    extra["values" if role == "critic" else "old_log_probs"] = inferred.clone()
    lr_before = lr_after = current_lr(engine)
    loss = loss_function(role, engine.model_config)
    grad_norms: list[float] = []
    for step in range(steps):
        data = engine_data(padded, extra, global_batch_size=2)
        with engine.train_mode():
            output = engine.train_batch(data, loss_function=loss)
        lr_after = float(engine.lr_scheduler_step())
        if "loss" in output:  # the last pipeline stage's
            result["losses"].append(float(sum(_as_float(value) for value in _as_list(output["loss"]))))
        metrics = output.get("metrics", {})
        if "grad_norm" in metrics:
            grad_norms.extend(_as_float(value) for value in _as_list(metrics["grad_norm"]))
        if after_step is not None:
            after_step(step + 1)
    result["grad_norms"] = grad_norms or None
    result["lr"] = [lr_before, lr_after]


def run_role(role: str, directory: Path, steps: int, run: Run) -> dict[str, Any]:
    import torch
    from megatron.core import parallel_state

    result = blank_result()
    began = time.perf_counter()
    try:
        model_dir = write_model_dir(directory / role, role, bridge=run.bridge)
        engine = build_engine(role, model_dir, run.layout, run.bridge)
        result["engine"] = f"{type(engine).__module__}.{type(engine).__qualname__}"
        result["stage"] = "initialize"
        engine.initialize()
        result["core_attention"] = core_attention(engine)
        result["last_stage"] = parallel_state.is_pipeline_last_stage()
        padded = padded_batch()
        result["stage"] = "infer"
        # before any checkpoint is loaded: the old values / log-probs of the batch, as the uninterrupted run has them
        inferred = infer(role, engine, padded, result)
        result["outputs_before"] = inferred.tolist()
        if run.reference:
            head = value_head(weights(engine)) if role == "critic" else None
            compare_with_reference(role, inferred, model_dir, padded, head, result)
        if run.resume is not None:
            result["stage"] = "load"
            engine.load_checkpoint(str(run.resume / role), del_local_after_load=False)
        before = weights(engine)
        result["stage"] = "train"

        def save_after(done: int) -> None:
            if run.save is not None and done == (run.save_after or steps):
                engine.save_checkpoint(str(run.save / role), global_step=done)
                result["saved_after"] = done

        train(role, engine, padded, inferred, steps, result, save_after)
        result["stage"] = "infer after training"
        result["outputs_after"] = infer(role, engine, padded, {}).tolist()
        after = weights(engine)
        result["weights_changed"] = any(not torch.equal(before[name], after[name]) for name in before)
        result["weights_sha256"] = digest(after)
        result["stage"] = "done"
    except Exception as error:  # reported, not raised: the caller's test says what was expected
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc().splitlines()[-12:]
        # on stderr too: a rank that stops early can leave the others waiting in a collective
        print(f"train_probe: {run.layout}, {role}: {result['stage']}: {traceback.format_exc()}", file=sys.stderr)
    result["seconds"] = round(time.perf_counter() - began, 2)
    return result


def separate_engines() -> None:
    """Megatron's parallel state torn down after a role, on verl 0.6.x only: as if each role had its own process.

    0.6.x's ``MegatronEngine._init_device_mesh`` initialises it unconditionally, so a second engine in the same
    process dies with ``AssertionError: data parallel group is already initialized`` (megatron-core 0.12.1), on
    any device; 0.7.0 returns when it is initialised. 0.6.x's trainer runs a Megatron critic through the legacy
    workers, so only custom code that builds two engines in one process meets this.
    """
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _as_float(value: Any) -> float:
    return float(value.item() if hasattr(value, "item") else value)


def as_a_new_job() -> None:
    """Between two layouts in one process: Megatron's parallel state torn down, MindSpeed as a new process has it.

    One process pair for several layouts costs one import of verl instead of one per layout. Only with
    simulated_npu's MindSpeed stand-in (the real one cannot be put back: one layout per process there), and
    not on megatron-core 0.12 (its destroy_model_parallel leaves the position-embedding ranks behind, and the
    next pipeline-parallel layout's gradients reduce over a group that is gone).
    """
    import gc
    from importlib.metadata import version

    import mindspeed.megatron_adaptor as megatron_adaptor  # noqa: PLR0402 - the submodule (MindSpeed 0.17+ binds MA there)
    from megatron.core import parallel_state

    if not getattr(megatron_adaptor, "SIMULATED", False) or version("megatron-core").startswith("0.12."):
        raise SystemExit("several layouts in one process need the MindSpeed stand-in and megatron-core 0.13 or later")
    gc.collect()
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    megatron_adaptor.simulate_fresh_process()


def main(
    mode: str,
    roles: list[str],
    steps: int,
    skipped: list[str],
    runs: tuple[Run, ...] = (Run(),),
    rank: int | None = None,
    world_size: int = 1,
    unadapted: bool = False,
) -> dict[str, Any]:
    import torch

    began = time.perf_counter()
    if skipped:
        sys.path.insert(0, str(ROOT))
        skip_fixes(skipped)
    report = load_verl(mode)
    compute = getattr(sys.modules.get("torch_npu"), "_compute", None)
    report["compute_mode"] = bool(compute is not None and compute.enabled())
    if not report["compute_mode"]:
        raise SystemExit("the simulated torch_npu is not in compute mode: was torch imported before this script ran?")
    report["skipped_fix"] = skipped
    report["bridge"] = sorted({run.bridge for run in runs})
    if report["bridge"] != [MBRIDGE] and not bridge_choice():
        raise SystemExit(
            f"--bridge {MEGATRON_BRIDGE}: verl {report['verl_version']} has no vanilla_mbridge: mbridge only"
        )
    # mbridge's adaptation only where mbridge runs: Megatron-Bridge never reads the name
    adapted = adapt_mbridge_to_megatron() if MBRIDGE in report["bridge"] else []
    report["test_adaptations"] = adapted + adapt_mindspeed_to_torch(adapt=not unadapted)
    if rank is None:
        init_single_rank()
    else:
        # as verl's TrainingWorker: "hccl" is the stand-in torch_npu's (gloo underneath) for npu tensors
        torch.distributed.init_process_group("cpu:gloo,npu:hccl", rank=rank, world_size=world_size)
        report["rank"] = rank
    report["layouts"] = {}
    with tempfile.TemporaryDirectory() as directory:
        for index, run in enumerate(runs):
            if index:
                as_a_new_job()
            results = report["layouts"][str(run.layout)] = {}
            for role in roles:
                results[role] = run_role(role, Path(directory), steps, run)
                if legacy_engine():
                    separate_engines()
    if len(runs) == 1:
        report["roles"] = results
    torch.distributed.destroy_process_group()
    report["seconds"] = round(time.perf_counter() - began, 2)
    return report


MBRIDGE_ADAPTATION = (
    "mbridge 0.15.1 on megatron-core >= 0.17: ModelType.encoder_and_decoder, a value no model type equals"
)


def adapt_mbridge_to_megatron() -> list[str]:
    """What this test layer changes so that verl's bridge runs on this Megatron (none where nothing is needed).

    mbridge 0.15.1 (PyPI's newest) compares the model type with ``ModelType.encoder_and_decoder``, which
    megatron-core 0.17 removed (``encoder_or_decoder`` is left): ``AttributeError`` in ``initialize()``, on any
    device. Where mbridge is asked for on such a Megatron (the real-MindSpeed layer's core_r0.18.0 runs: real
    MindSpeed there does not take Megatron-Bridge's model providers, docs/testing.md), the name is given a value no
    model type equals: every such comparison is ``False``, as it is for every model Megatron 0.17 and later build.
    Only where the name is missing and mbridge runs; reported, and asserted by the tests to be made exactly there.
    """
    from megatron.core.models.gpt.gpt_model import ModelType  # mbridge's (megatron.core.transformer.enums's)

    if hasattr(ModelType, "encoder_and_decoder"):
        return []
    ModelType.encoder_and_decoder = object()  # a new attribute, not a member: EnumType allows it
    return [MBRIDGE_ADAPTATION]


MINDSPEED_TORCH_ADAPTATION = (
    "MindSpeed's torch.cuda.get_device_capability (grouped-matmul feature) takes torch 2.13's device argument"
)
DEVICE_CAPABILITY = "mindspeed.core.fusions.grouped_matmul"


def adapt_mindspeed_to_torch(adapt: bool = True) -> list[str]:
    """What this test layer changes so that real MindSpeed's ``*_core_r0.12.1`` lines run on torch 2.13.

    Those lines' grouped-matmul feature patches ``torch.cuda.get_device_capability`` with a function of no
    parameter (it returns (9, 0)); torch 2.13's ``distributed_c10d.broadcast`` calls it with the tensor's device (an
    FP8 check that torch 2.8, the torch of those lines' images, does not make), so ``initialize()`` stops with a
    ``TypeError``, shim or not. The function MindSpeed registers (read from its module at every patch pass, so at
    every ``repatch``) is replaced by one that takes the argument, ignores it as MindSpeed's ignores the device, and
    returns what MindSpeed's returns: only where that function takes no parameter, reported, and asserted by
    tests/real_mindspeed to be needed there and nowhere else. ``adapt=False`` (``--unadapted``) reports it as due but
    leaves it out, to show that the run needs it. The kit's MindSpeed stand-in has no such module: nothing to do.
    """
    import inspect

    module = sys.modules.get(DEVICE_CAPABILITY)  # imported by MindSpeed's first patch pass (verl's engine import)
    original = getattr(module, "get_device_capability", None)
    if original is None or inspect.signature(original).parameters:
        return []
    if not adapt:
        return [f"{MINDSPEED_TORCH_ADAPTATION} (due, left out: --unadapted)"]
    import torch

    def get_device_capability(device: Any = None) -> Any:
        return original()

    get_device_capability.__wrapped__ = original
    module.get_device_capability = get_device_capability
    if torch.cuda.get_device_capability is original:  # the patch pass at import has bound it already
        torch.cuda.get_device_capability = get_device_capability
    return [MINDSPEED_TORCH_ADAPTATION]


def start_ranks(
    mode: str,
    directory: Path,
    layouts: str,
    *options: str,
    world_size: int = 2,
    ahead: tuple[str, ...] = (),
    **variables: str,
) -> list[tuple[subprocess.Popen[str], Path]]:
    """``world_size`` rank processes of one activation, running ``layouts`` in turn, and their outputs."""
    outputs = [directory / f"{mode}-{layouts.replace(',', '_')}-rank{rank}.json" for rank in range(world_size)]
    ranks = ("--world-size", str(world_size), "--layouts", layouts, *options)
    return probe.start_group(
        outputs,
        lambda rank, output, address: start(
            mode, output, "--rank", str(rank), *ranks, ahead=ahead, **address, **variables
        ),
    )


if __name__ == "__main__" and sys.argv[1:2] == [REFERENCE_FLAG]:
    reference_here(Path(sys.argv[2]))
elif __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("output", nargs="?", help="write the JSON report here instead of printing it")
    parser.add_argument("--roles", default=",".join(ROLES), help="comma-separated: critic, actor")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--skip-fix", metavar="NAMES", default="", help="comma-separated: fixes that stand aside")
    parser.add_argument("--rank", type=int, help="this process's rank (MASTER_ADDR/MASTER_PORT from the environment)")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument(
        "--layouts", default="", help="with --rank, comma-separated, in turn: tp2, pp2, cp2, or several joined by '-'"
    )
    parser.add_argument("--save", type=Path, metavar="DIR", help="save a checkpoint here after training")
    parser.add_argument("--save-after", type=int, metavar="N", help="with --save: after N steps, then train on")
    parser.add_argument("--resume", type=Path, metavar="DIR", help="load the checkpoint saved here before training")
    parser.add_argument(
        "--bridge", choices=BRIDGES, default=MBRIDGE, help="verl 0.9.x's bridge (vanilla_mbridge True / False)"
    )
    parser.add_argument(
        "--unadapted", action="store_true", help="leave out adapt_mindspeed_to_torch's change (to show it is needed)"
    )
    arguments = parser.parse_args()
    chosen = [role.strip() for role in arguments.roles.split(",") if role.strip()]
    unknown = sorted(set(chosen) - set(ROLES))
    if unknown:
        raise SystemExit(f"unknown roles {unknown}: use {', '.join(ROLES)}")
    # torch loads the stand-in torch_npu at `import torch`, which reads the variable: set it before that
    os.environ[COMPUTE_VARIABLE] = "1"
    if arguments.skip_fix and arguments.mode == "none":
        raise SystemExit("--skip-fix needs the shim: use a mode other than none")
    skipped = [name for name in arguments.skip_fix.split(",") if name]
    layouts = [Layout.parse(text.strip()) for text in arguments.layouts.split(",") if text.strip()] or [ONE_RANK]
    if (arguments.rank is None) != (layouts == [ONE_RANK]):
        raise SystemExit("--layouts and --rank go together (one process per rank of a group)")
    unfilled = [str(layout) for layout in layouts if layout.size != arguments.world_size]
    if unfilled:
        raise SystemExit(f"layouts {unfilled} do not fill --world-size {arguments.world_size} (data parallel size 1)")
    if arguments.save and arguments.resume:
        raise SystemExit("--save and --resume are two runs: give one")
    if arguments.save_after is not None and not (arguments.save and 0 < arguments.save_after <= arguments.steps):
        raise SystemExit(f"--save-after needs --save and a step from 1 to --steps ({arguments.steps})")
    checkpoints = {"save": arguments.save, "save_after": arguments.save_after, "resume": arguments.resume}
    runs = tuple(Run(layout, arguments.bridge, **checkpoints) for layout in layouts)
    ranks = (arguments.rank, arguments.world_size)
    result = main(arguments.mode, chosen, arguments.steps, skipped, runs, *ranks, arguments.unadapted)
    # where Megatron-LM's own training package came from, if anything imported it (real MindSpeed master patches it),
    # and megatron.core (a namespace package: Megatron-LM's source ahead of PyPI's megatron-core brings its own)
    training = sys.modules.get("megatron.training")
    result["megatron_training_files"] = [training.__file__] if training is not None else []
    result["megatron_core_file"] = getattr(sys.modules.get("megatron.core"), "__file__", None)
    result["mindspeed_adaptor_imported"] = "mindspeed.megatron_adaptor" in sys.modules
    text = json.dumps(result, indent=2, default=str)
    if arguments.output:
        Path(arguments.output).write_text(text)
    else:
        print(text)
