"""Backport of verl #5870 ("[megatron] fix: support critic model", in 0.8.0): the critic's forward keyword.

Mirrors: ``MegatronEngineWithValueHead.forward_step`` as #5870 left it: the model's forward is asked
for ``data_format="thd"`` (``use_remove_padding``) or ``"bshd"``, as the LM engine's is.
Missing when: ``forward_step`` is exactly verl 0.7.1's (PyPI, and the ``release/v0.7.1`` branch that
verl's v0.7.1 Ascend image installs: the same code). It passes ``enable_mtp=`` to
``gptmodel_forward_no_padding``, which takes ``mtp_enable_train=``: every value forward dies with
``TypeError: gptmodel_forward_no_padding() got an unexpected keyword argument 'enable_mtp'``, on any
device, so the critic the value engine fix builds cannot compute a value. 0.6.x and 0.7.0 pass
neither keyword (not applicable); 0.8.0 and later have #5870 (native).
Does: sets :func:`value_forward_step` on ``MegatronEngineWithValueHead`` (so on every engine derived
from it, npu_shim's ``MindspeedEngineWithValueHead`` included). MTP is a language-model head: a value
model never trains one.

Not carried from #5870, and why (README, "Not carried"):
- ``tie_word_embeddings = False`` for value models before the model is built. With mbridge 0.15.1
  (PyPI's newest) a critic from a tied checkpoint fails in ``initialize()`` with the same
  ``ValueError: Weights set() not found in safetensors files`` on 0.7.1 with the shim and on 0.8.0,
  which has the change: mbridge fixes its weight mapping when the bridge is made, before the engine
  unties (mbridge PR 115, not released on PyPI). Untying alone changes nothing a test here shows;
  it matters at pipeline parallelism > 1.
- The bshd change for PP > 1 is in ``postprocess_bshd_engine``, which 0.7.1 does not have.
- The critic config's move to ``HFModelConfig`` is the trainer's, which 0.7.1's legacy critic avoids.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from npu_shim import fingerprint
from npu_shim.changes import ChangeSet
from npu_shim.fixes import ALREADY_APPLIED, APPLIED, NATIVE, NOT_APPLICABLE, Outcome, is_ours, mark_as_ours
from npu_shim.layout import VerlLayout

NAME = "megatron_critic"
CLASS_NAME = "MegatronEngineWithValueHead"
FORWARD = "forward_step"
# `scripts/fingerprints.py <wheels> --member verl/workers/engine/megatron/transformer_impl.py
#  --function MegatronEngineWithValueHead.forward_step`; release/v0.7.1's file prints as 0.7.1.
VERL_0_7_1: fingerprint.KnownCode = {
    (3, 10): {"1a144b1a5e915f81d3e03e7d1702b0b3": "0.7.1"},
    (3, 11): {"abc55be5e223c7adfc3cdd00b9aa7f04": "0.7.1"},
    (3, 12): {"749ae2410676c6c4728a1c5c1d21abcb": "0.7.1"},
    (3, 13): {"fee5a2de38ac7d588ecb415645d0c5b7": "0.7.1"},
}
WITHOUT_THE_KEYWORD: fingerprint.KnownCode = {
    (3, 10): {"09d880b3e2da888cb0311719d39d2437": "0.6.1", "2482fec45eae04f974b8459b496f61c6": "0.7.0"},
    (3, 11): {"100d9d70bae88834eccc7561cd41274e": "0.6.1", "e8900a21632f959eb5d2537d92954a20": "0.7.0"},
    (3, 12): {"6087cb27b19f4cf55731e669aba7f277": "0.6.1", "9d4f291d3ea986750fb1ad91ed12f30d": "0.7.0"},
    (3, 13): {"84cc03aa5e623851d95afcc322761313": "0.6.1", "5c01522f2949406a4676f3f3bc2b2aa9": "0.7.0"},
}
WITH_5870: fingerprint.KnownCode = {
    (3, 10): {"3a6b5791dece5fc68959de849f24f15c": "0.8.0", "e14d71d9a6ba4c8a92372910de771819": "0.9.0, 0.9.1"},
    (3, 11): {"5e9006422dec35287992816a4a7eb9e7": "0.8.0", "805e3e485f5d0fbdfef4b74f637fa509": "0.9.0, 0.9.1"},
    (3, 12): {"cf4615908496b5265e28dcafec8b4948": "0.8.0", "c1daf44f27e81f0874ee6390542fe20f": "0.9.0, 0.9.1"},
    (3, 13): {"1d47b60bc37603aea479740b76325f48": "0.8.0", "254f92ca1955503c91c7947a7e0207bc": "0.9.0, 0.9.1"},
}


def value_forward_step(self: Any, batch_iter: Any, model: Any, postprocess_micro_batch_func: Any) -> tuple[Any, Any]:
    """One micro-batch through the value model, in the layout the engine was configured for."""
    from verl.models.mcore import get_mcore_forward_no_padding_fn
    from verl.utils.device import get_device_id

    batch = next(batch_iter).to(get_device_id())
    inputs = self.prepare_model_inputs(batch)
    hf_config = self.model_config.hf_config
    forward = get_mcore_forward_no_padding_fn(hf_config)
    values = forward(
        model,
        inputs["input_ids"],
        inputs["multi_modal_inputs"],
        value_model=True,
        vision_model=hasattr(hf_config, "vision_config"),
        pad_token_id=self.model_config.tokenizer.pad_token_id,
        data_format="thd" if self.engine_config.use_remove_padding else "bshd",
    )
    return values, partial(postprocess_micro_batch_func, data=batch)


value_forward_step.__qualname__ = f"{CLASS_NAME}.{FORWARD}"  # where it lives once applied
mark_as_ours(value_forward_step)


def apply(layout: VerlLayout, changes: ChangeSet) -> Outcome:
    engine_class = getattr(layout.megatron_impl, CLASS_NAME, None)
    if engine_class is None:
        return Outcome(NAME, NOT_APPLICABLE, f"verl has no {CLASS_NAME} (did verl's Megatron engine import?)")
    current = engine_class.__dict__.get(FORWARD)
    if is_ours(current):
        return Outcome(NAME, ALREADY_APPLIED, f"{CLASS_NAME}.{FORWARD} is npu_shim's, set earlier in this process")
    if fingerprint.known_release(current, VERL_0_7_1):
        changes.setattr(engine_class, FORWARD, value_forward_step)
        return Outcome(NAME, APPLIED, f"{CLASS_NAME}.{FORWARD} (verl 0.7.1's) now passes data_format, not enable_mtp")
    if release := fingerprint.known_release(current, WITH_5870):
        return Outcome(NAME, NATIVE, f"{CLASS_NAME}.{FORWARD} passes data_format (verl #5870, in {release})")
    if release := fingerprint.known_release(current, WITHOUT_THE_KEYWORD):
        return Outcome(NAME, NOT_APPLICABLE, f"{CLASS_NAME}.{FORWARD} of verl {release} passes no enable_mtp")
    return Outcome(NAME, NOT_APPLICABLE, f"{CLASS_NAME}.{FORWARD} is not verl 0.7.1's; left as verl ships it")
