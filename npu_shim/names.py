"""The names the parts of npu_shim agree on, in a module that imports nothing: any part may read them, the
package's ``__init__`` included, without one part importing another that imports it back."""

import os

VERSION = "0.2.0"  # the one place it is written: npu_shim.__version__, and pyproject.toml reads it here
PACKAGE = "npu_shim"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
BOOTSTRAP_MARKER = "__npu_shim_bootstrap__"  # in our sitecustomize file's text: it is npu_shim's
WAITING = "npu_shim_waiting"  # the watcher's global (npu_shim/first_import.py); our sitecustomize module has it
VERL_MODULES = "VERL_USE_EXTERNAL_MODULES"  # verl (>= 0.6.0) imports the modules it names at `import verl`
VERL_PLUGINS = "verl.plugins"  # the entry-point group verl (>= 0.9.0) loads at `import verl`; ours is PACKAGE
VERL_PLUGINS_POLICY = "VERL_USE_EXTERNAL_PLUGINS"  # verl's switch for that group: auto (default), none, or names
