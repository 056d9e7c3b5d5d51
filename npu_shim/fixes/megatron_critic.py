"""Backport of verl #5870 ("[megatron] fix: support critic model", in 0.8.0): the critic's forward keyword.

Mirrors: ``MegatronEngineWithValueHead.forward_step`` after #5870: the forward asked for ``data_format``.
Missing when: it is exactly 0.7.1's, passing ``enable_mtp=``: every value forward raises ``TypeError`` (docs/fixes.md).
Does: sets :func:`value_forward_step` on the class (so on every engine derived from it); not the rest of #5870.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from npu_shim.recognition import Rebinding

NAME = "megatron_critic"
CLASS_NAME = "MegatronEngineWithValueHead"
FORWARD = "forward_step"


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

# release/v0.7.1's file has PyPI 0.7.1's code here; 0.6.x and 0.7.0 pass neither keyword.
VALUE_FORWARD = Rebinding(
    fix=NAME,
    source=f"verl/workers/engine/megatron/transformer_impl.py:{CLASS_NAME}.{FORWARD}",
    missing_in=("0.7.1",),
    fixed_in=("0.8.0", "0.9.0", "0.9.1"),
    change="verl #5870",
    if_left="unless the local patch mends it, a Megatron critic's first value forward raises TypeError: "
    "gptmodel_forward_no_padding() got an unexpected keyword argument 'enable_mtp'",
    breaks_critic=True,
    replacement=value_forward_step,
    applied="now passes data_format, not enable_mtp",
)
FIX = VALUE_FORWARD.as_fix()
