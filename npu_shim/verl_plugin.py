"""verl's plugin route: from verl 0.9.0, ``import verl`` loads every entry point of the ``verl.plugins`` group.

The shim's distribution declares ``npu_shim = "npu_shim.verl_plugin"`` there (pyproject.toml), so on those
releases installing it is enough: every process that imports verl, a Ray worker's included, activates the shim
with no variable to set or pass on, and a process that never imports verl pays nothing. verl reads
``VERL_USE_EXTERNAL_PLUGINS`` itself: ``none`` loads no plugin, a comma-separated list only those it names
(``npu_shim`` is this one). Older verl never reads the group, and nothing imports this module there.

Importing a module of ours by its full name activates nothing (npu_shim.import_route): this module does.
"""

from npu_shim import activate
from npu_shim.names import VERL_PLUGINS

activate(VERL_PLUGINS)
