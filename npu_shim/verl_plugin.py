"""verl's plugin route: verl >= 0.9.0 loads the ``verl.plugins`` entry points at ``import verl``; ours is this module
(pyproject.toml), which activates the shim. verl reads ``VERL_USE_EXTERNAL_PLUGINS`` itself (``none``: no plugin)."""

from npu_shim import activate
from npu_shim.settings import VERL_PLUGINS

activate(VERL_PLUGINS)
