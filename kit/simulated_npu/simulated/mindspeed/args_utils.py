"""SIMULATED ``mindspeed.args_utils``: MindSpeed's own argument namespace, one per process.

MindSpeed builds its parser from the options every feature of its line registers and
parses the command line once; ``repatch`` only ever adds or overwrites keys on that
namespace (:func:`get_full_args`, while Megatron's training arguments do not exist, as
under verl), so a value set by one call persists into every later one.
``get_mindspeed_args(get_defaults=True)`` gives a fresh namespace of the defaults: the
options this line knows.
"""

from __future__ import annotations

import argparse

from mindspeed.features_manager import MindSpeedFeaturesManager

_MINDSPEED_ARGS: argparse.Namespace | None = None


def get_mindspeed_args(get_defaults: bool = False) -> argparse.Namespace:
    global _MINDSPEED_ARGS
    if not get_defaults and _MINDSPEED_ARGS is not None:
        return _MINDSPEED_ARGS
    parser = argparse.ArgumentParser(description="MindSpeed Arguments (simulated)", allow_abbrev=False)
    MindSpeedFeaturesManager.register_features_args(parser)
    # MindSpeed parses the process's own command line; a test's or a worker's is not meant for it.
    args, _ = parser.parse_known_args([])
    if not get_defaults:
        _MINDSPEED_ARGS = args
    return args


def get_full_args() -> argparse.Namespace:
    """The namespace ``repatch`` writes to: MindSpeed's own (Megatron's training arguments are never set up here)."""
    return get_mindspeed_args()


def forget_mindspeed_args() -> None:
    """Test-only: back to the defaults, as in a fresh process (MindSpeed itself never forgets)."""
    global _MINDSPEED_ARGS
    _MINDSPEED_ARGS = None
