"""Apply deliberate bugs to npu_shim, one at a time, and see whether the fast test layer (tests/unit) catches each.

Each mutation names a behaviour, not a line: its name says what breaking it means, its ``target`` says where the
behaviour lives, by file and qualified name (``npu_shim/patcher.py:Fix.apply``, found with ``ast``), and the bug is
a small edit of that target alone: a whole replacement source (``source``), or an ``old``/``new`` text edit inside
the target's own source. Code that moves within its file, or other code changing around it, leaves a mutation as it
was; a target that no longer exists, or an ``old`` text no longer in it, is reported *stale*, by name. A target is:

* in a Python file, a function, class or method (``Writer._keep``), a module-level assignment (``EXIT_CODES``),
  a module-level ``if`` by its test (``if __name__ == "sitecustomize"``), or ``<module>`` (the whole file: for
  module-level statements that have no name, old/new only);
* in a JSON file, a value by its keys (``functions["verl/models/mcore/util.py:build"]["0.8.0"]``), its text being
  the value as JSON: ``source`` is the new value's JSON text;
* in a TOML file, a table by its header (``[project.entry-points."verl.plugins"]``), up to the next header.

``source=REMOVED`` removes the target. Each mutation is made in a copy of the checkout (the working tree is never
touched; ``--jobs`` copies, one per core by default, judge mutations side by side). It is *killed* when ``pytest
tests/unit -x`` fails with it (the first failing test is printed), *survived* when the unit layer stays green, and
*broken* when the mutated Python does not compile or the edit changes nothing (a mutation must express a bug, not a
syntax error). Run with the unit environment that ``make test`` builds::

    .cache/envs/unit-*/bin/python scripts/mutations.py              # every mutation, 10-80 s each
    .cache/envs/unit-*/bin/python scripts/mutations.py watcher:      # those whose name contains "watcher:"
    .cache/envs/unit-*/bin/python scripts/mutations.py chain: kit:   # ... "chain:" or "kit:"
    .cache/envs/unit-*/bin/python scripts/mutations.py --list        # names and targets, each target looked up

A known survivor is checked against the layer its reason names with ``--python`` (that environment's interpreter)
and ``--tests`` (the test paths or ids), the environment's test variables set as ``noxfile.test_variables`` sets
them; there a survivor is reported as one (docs/testing.md has the commands)::

    NPU_SHIM_TEST_VERL=0.9.1 NPU_SHIM_SIM_MINDSPEED=master NPU_SHIM_TEST_BRIDGE=mbridge \
    .cache/envs/unit-*/bin/python scripts/mutations.py --python .cache/envs/verl-0.9.1-a5-*/bin/python \
        --tests tests/matrix/test_upstream_fixes.py megatron_checkpoint_metadata:

Exit status 1 when a mutation survived, went stale or is broken, unless it is a known survivor: one the unit layer
cannot see, with the reason and the layer that kills it (``survives_because``, also in docs/testing.md); 2 when the
layer fails without any mutation.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REMOVED = "<removed>"  # as ``source``: the target goes
# Start-up runs these from the checkout's root (links) and npu_shim_bootstrap/: the copy must hold all of them.
MUST_BE_COPIED = ("npu_shim_bootstrap/sitecustomize.py", "npu_shim_bootstrap/_npu_shim_chain.py")
MUST_BE_LINKS = ("sitecustomize.py", "_npu_shim_chain.py")
UNIT_LAYER = (os.path.abspath(sys.executable), ("tests/unit",))  # what a mutation runs against (else --python, --tests)


@dataclass(frozen=True)
class Mutation:
    name: str  # "area: what the broken behaviour means"
    target: str  # "path:qualified name" (see the module's docstring)
    source: str = ""  # the target's whole new source (dedented), or REMOVED; or
    old: str = ""  # a text once in the target's source ...
    new: str = ""  # ... and what it becomes
    survives_because: str = ""  # a known survivor of the unit layer: why, and which layer catches it

    @property
    def path(self) -> str:
        return self.target.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.target.partition(":")[2]


KIT_NO_TORCH = "the unit layer has no torch; "
MUTATIONS = [
    # --- start-up: the bootstrap and its chain (standard library, before anything of npu_shim) ---
    Mutation(
        "start-up: the common case decided without looking for a sitecustomize it hides",
        'npu_shim_bootstrap/sitecustomize.py:if __name__ == "sitecustomize"',
        old='(entry + "/sitecustomize.py")',
        new='(entry + "/no_such_module.py")',
    ),
    Mutation(
        "start-up: a module imported that an empty sitecustomize does not import",
        'npu_shim_bootstrap/sitecustomize.py:if __name__ == "sitecustomize"',
        old="    here = os.path.dirname(__file__)\n",
        new="    import json  # noqa: F401\n    here = os.path.dirname(__file__)\n",
    ),
    Mutation(
        "start-up: the common case taken with NPU_SHIM_DISABLE set",
        'npu_shim_bootstrap/sitecustomize.py:if __name__ == "sitecustomize"',
        old='"NPU_SHIM_DISABLE" not in os.environ',
        new='"NPU_SHIM_DISABLE" not in ()',
    ),
    Mutation(
        "start-up: the common case taken in a Python npu_shim does not serve",
        'npu_shim_bootstrap/sitecustomize.py:if __name__ == "sitecustomize"',
        old="sys.version_info >= (3, 10)",
        new="sys.version_info >= (2, 7)",
    ),
    Mutation(
        "chain: a served interpreter with a hidden sitecustomize left without the watcher",
        "npu_shim_bootstrap/_npu_shim_chain.py:start",
        old="            sys.meta_path.insert(0, bootstrap)\n",
        new="            pass\n",
    ),
    Mutation(
        "chain (2.7): the first entry without a sitecustomize ends the search",
        "npu_shim_bootstrap/_npu_shim_chain.py:_run_python2",
        old="    except ImportError:\n        return False\n",
        new="    except ImportError:\n        return True\n",
    ),
    Mutation(
        "chain (2.7): an ImportError of the user's own sitecustomize reported, which 2.7's site keeps silent",
        "npu_shim_bootstrap/_npu_shim_chain.py:_run_python2",
        old="        except ImportError:  # 2.7's site swallows any ImportError of sitecustomize, silently\n"
        "            pass\n",
        new="",
    ),
    Mutation(
        "chain (3.x): an ImportError that names sitecustomize reported, which 3.x's site keeps silent",
        "npu_shim_bootstrap/_npu_shim_chain.py:_run_python3",
        old='        if not (isinstance(error, ImportError) and error.name == "sitecustomize"):\n'
        "            _report(error)\n",
        new="        _report(error)\n",
    ),
    # --- the watcher: the first import of verl and of Megatron ---
    Mutation(
        "watcher: the name it came for left waiting (MegatronAdaptor's own import of Megatron comes back)",
        "npu_shim/watcher.py:find_spec",
        old="    stop_waiting(top)",
        new="    pass",
    ),
    Mutation(
        "watcher: a bad switch value never reported where start-up no longer reads the switches",
        "npu_shim/watcher.py:find_spec",
        old="        read_all()",
        new="        pass",
    ),
    Mutation(
        "watcher: MegatronAdaptor imported again where it is already loaded",
        "npu_shim/watcher.py:adaptor_wanted",
        source="""
        def adaptor_wanted() -> bool:
            return switch(ADAPTOR_SWITCH) and found(ADAPTOR)
        """,
    ),
    Mutation(
        "watcher: the bootstrap left in sys.meta_path beside the watcher that takes over (two watchers)",
        "npu_shim/watcher.py:take_over",
        old="        sys.meta_path[sys.meta_path.index(bootstraps[0])] = this\n",
        new="        sys.meta_path.insert(0, this)\n",
    ),
    Mutation(
        "watcher: the bootstrap taken out and the watcher put first (the list the import system iterates shifts)",
        "npu_shim/watcher.py:take_over",
        old="        sys.meta_path[sys.meta_path.index(bootstraps[0])] = this\n",
        new="        sys.meta_path.remove(bootstraps[0])\n        sys.meta_path.insert(0, this)\n",
    ),
    Mutation(
        "watcher: a second watcher left beside this one where both are in sys.meta_path",
        "npu_shim/watcher.py:take_over",
        old="        for finder in bootstraps:\n            sys.meta_path.remove(finder)\n",
        new="        pass\n",
    ),
    Mutation(
        "route: an import of one of npu_shim's modules by its full name taken as `import npu_shim` (it activates)",
        "npu_shim/watcher.py:route_of_this_import",
        source="""
        def route_of_this_import() -> "str | None":
            if VERL in sys.modules and names_npu_shim(os.environ.get(VERL_MODULES)):
                return VERL_MODULES
            return "import"
        """,
    ),
    Mutation(
        "route: verl's import of the modules VERL_USE_EXTERNAL_MODULES names taken as a user's `import npu_shim`",
        "npu_shim/watcher.py:route_of_this_import",
        old="    if VERL in sys.modules and names_npu_shim(os.environ.get(VERL_MODULES)):\n",
        new="    if False:\n",
    ),
    Mutation(
        "route: a VERL_USE_EXTERNAL_MODULES name with blanks (which verl cannot import) taken as naming npu_shim",
        "npu_shim/watcher.py:names_npu_shim",
        source="""
        def names_npu_shim(modules: "str | None") -> bool:
            return PACKAGE in {name.strip() for name in (modules or "").split(",")}
        """,
    ),
    # --- the hook and its log line ---
    Mutation(
        "hook: the fixes run under the hook's lock (a fix that imports a watched module waits for itself)",
        "npu_shim/hook.py:on_module_imported",
        old="        results = apply_module(module, Writer())\n",
        new="        with _lock:\n            results = apply_module(module, Writer())\n",
    ),
    Mutation(
        "log: the line that says where the shim changed verl written at DEBUG (nobody sees it)",
        "npu_shim/hook.py:on_module_imported",
        old="        logger.info(\n",
        new="        logger.debug(\n",
    ),
    Mutation(
        "log: a process where nothing changed says so anyway",
        "npu_shim/hook.py:on_module_imported",
        old="    if applied:",
        new="    if results:",
    ),
    Mutation(
        "log: no handler of the shim's own (INFO lost where the application set up no logging)",
        "npu_shim/hook.py:register",
        old="    logger.addHandler(StderrUntilConfigured())\n",
        new="    pass\n",
    ),
    Mutation(
        "log: the shim's handler writes beside the application's (the line twice)",
        "npu_shim/hook.py:StderrUntilConfigured.__init__",
        old="        self.addFilter(lambda record: not logging.getLogger().handlers)\n",
        new="",
    ),
    Mutation(
        "log: NPU_SHIM_LOG_LEVEL not read",
        "npu_shim/hook.py:register",
        old="        logger.setLevel(log_level())\n",
        new="        logger.setLevel(logging.INFO)\n",
    ),
    # --- settings: the switches ---
    Mutation(
        "switches: NPU_SHIM_DISABLED_FIXES not honoured",
        "npu_shim/catalogue.py:apply_module",
        old="            if fix.name in turned_off\n",
        new="            if False\n",
    ),
    Mutation(
        "switches: an unknown fix name in NPU_SHIM_DISABLED_FIXES not reported",
        "npu_shim/settings.py:disabled_fixes",
        old="    if unknown:\n",
        new="    if False:\n",
    ),
    # --- the patcher: the one writer, the registry of originals, "already applied" ---
    Mutation(
        "patcher: a binding keeps verl's function and binds nothing",
        "npu_shim/patcher.py:Writer.bind",
        old="        setattr(owner, attribute, value)\n",
        new="",
    ),
    Mutation(
        "patcher: npu_shim's value left unmarked (a second activation cannot tell it from verl's)",
        "npu_shim/patcher.py:Writer.bind",
        old="            value.__npu_shim__ = True",
        new="            pass",
    ),
    Mutation(
        "patcher: revert in the order the edits were made",
        "npu_shim/patcher.py:Writer.revert",
        source="""
        def revert(self) -> None:
            for undo in self._undo:
                undo()
            self._undo.clear()
        """,
    ),
    Mutation(
        "patcher: the last original wins (a second application keeps npu_shim's own as verl's)",
        "npu_shim/patcher.py:Writer._keep",
        source="""
        def _keep(self, owner: Any, attribute: str) -> None:
            kept = _originals.setdefault(owner, {})
            kept[attribute] = vars(owner).get(attribute)
            self._undo.append(lambda: kept.pop(attribute, None))
        """,
    ),
    Mutation(
        "patcher: a revert keeps verl's original recorded (reverted fixes' names judged as replaced)",
        "npu_shim/patcher.py:Writer._keep",
        old="            self._undo.append(lambda: kept.pop(attribute, None))\n",
        new="",
    ),
    # Not here: Writer.record's record kept after a revert. An equivalent mutation: "already applied" also needs each
    # name to be npu_shim's still, which the revert undid (and "a revert keeps verl's original recorded" is above).
    Mutation(
        "patcher: what a fix replaced never recorded (every activation applies it again)",
        "npu_shim/patcher.py:Writer.record",
        source="""
        def record(self, fix: str, module: ModuleType) -> None:
            self._replaced = []
        """,
    ),
    Mutation(
        "patcher: a fix's own earlier edits judged afresh by a second activation (shared_repatch's binding: native)",
        "npu_shim/patcher.py:Fix.apply",
        old="        if replaced and all(was_replaced(owner, attribute) for owner, attribute in replaced):\n",
        new="        if False:\n",
    ),
    Mutation(
        "patcher: a fix judged already applied where verl has bound its own under one of its names since",
        "npu_shim/patcher.py:Fix.apply",
        old="all(was_replaced(owner, attribute) for owner, attribute in replaced)",
        new="any(was_replaced(owner, attribute) for owner, attribute in replaced)",
    ),
    Mutation(
        "patcher: a fix writes its edits whatever its judgement",
        "npu_shim/patcher.py:Fix.apply",
        old="        if not judged.missing:\n            return judged\n",
        new="",
    ),
    Mutation(
        "patcher: a name verl lacked still judged replaced once verl binds its own there (a reload)",
        "npu_shim/patcher.py:was_replaced",
        old="    return current is None or is_ours(current)\n",
        new="    return True\n",
    ),
    Mutation(
        "apply: a failure leaves the partial edits in place",
        "npu_shim/catalogue.py:apply_module",
        old="        writer.revert()\n",
        new="",
    ),
    # --- recognition: a verl function judged by its fingerprint ---
    Mutation(
        "recognition: code no release has is 'not applicable' where the version says the change is missing",
        "npu_shim/recognition.py:KnownFunction.judge",
        old="        elif not (self.needed_on_any_version or verl_release() in self.missing_in):\n",
        new="        elif not self.needed_on_any_version:\n",
    ),
    Mutation(
        "recognition: a release with the change taken for one without it",
        "npu_shim/recognition.py:KnownFunction.judge",
        old="        if releases and set(releases) & set(self.missing_in):\n",
        new="        if releases and set(releases) & {*self.missing_in, *self.fixed_in}:\n",
    ),
    Mutation(
        "recognition: npu_shim's own binding where verl has none reported as verl having none",
        "npu_shim/recognition.py:KnownFunction.judge",
        old="            ours = is_ours(vars(owner).get(self.attribute))\n",
        new="            ours = False\n",
    ),
    Mutation(
        "recognition: a replaced function judged by its replacement, not verl's own (a second activation's judgement)",
        "npu_shim/recognition.py:KnownFunction.judge",
        old="        current = get_original(owner, self.attribute)\n",
        new="        current = vars(owner).get(self.attribute)\n",
    ),
    Mutation(
        "recognition: a function known_code.json lacks raises KeyError (every fix of the module reverted)",
        "npu_shim/recognition.py:KnownFunction.releases",
        old="        table = known_code().get(self.source)\n",
        new="        table = known_code()[self.source]\n",
    ),
    Mutation(
        "recognition: a rebinding leaves the name where the function is defined as verl's (vlm_mask_on_npu's util)",
        "npu_shim/recognition.py:Rebinding.as_fix",
        old="            for owner in [first, *(owner for owner in others if self.judge(owner).missing)]:\n",
        new="            for owner in [first]:\n",
    ),
    # --- fingerprint.py and its table ---
    Mutation(
        "fingerprint: nested functions counted by their name alone",
        "npu_shim/fingerprint.py:_canonical",
        old="    if isinstance(value, ast.AST):\n",
        new='    if isinstance(value, ast.FunctionDef) and value.name != "f":\n'
        "        return value.name\n"
        "    if isinstance(value, ast.AST):\n",
    ),
    Mutation(
        "fingerprint: falsy fields dropped with the empty ones (0, False and '' alike)",
        "npu_shim/fingerprint.py:_canonical",
        old="for name, field in fields if field not in (None, [])",
        new="for name, field in fields if field",
    ),
    Mutation(
        "fingerprint: 3.12's empty f-string parts kept (the table then depends on the Python)",
        "npu_shim/fingerprint.py:_kept",
        old='        return [part for part in field if not (isinstance(part, ast.Constant) and part.value == "")]\n',
        new="        return field\n",
    ),
    Mutation(
        "fingerprint: a decorated function read as no function (judged unrecognised at run time)",
        "npu_shim/fingerprint.py:function_fingerprint",
        old="        function = inspect.unwrap(function)\n",
        new="        pass\n",
    ),
    Mutation(
        "known_code.json: a release edited out of the table",
        'npu_shim/known_code.json:functions["verl/workers/engine/mindspeed/transformer_impl.py:_mindspeed_repatch"]'
        '["0.8.0"]',
        source=REMOVED,
    ),
    Mutation(
        "known_code.json: 0.7.0's code taken for 0.7.1's (#5870's critic forward)",
        'npu_shim/known_code.json:functions["verl/workers/engine/megatron/transformer_impl.py:'
        'MegatronEngineWithValueHead.forward_step"]["0.7.1"]',
        old='"8ee2e60b0a96e80675fb1ba34df8b7db"',
        new='"3f9eb4cb491ecc199435678ec74ef5a2"',
    ),
    Mutation(
        "known_code.json: a release with #5580 given the code of one without (missing and fixed overlap)",
        'npu_shim/known_code.json:functions["verl/utils/megatron/router_replay_utils.py:get_moe_num_layers_to_build"]'
        '["0.8.0"]',
        old='"12cca92592dd06acba07e964c14fc70b"',
        new='"b9d3518c8e78a50c14f892000534509d"',
    ),
    Mutation(
        "fingerprints.py: a release whose wheel lacks the function's file read all the same",
        "scripts/fingerprints.py:fingerprints",
        old='            text = archive.read(member).decode("utf-8") if member in members else None\n',
        new='            text = archive.read(member).decode("utf-8")\n',
    ),
    # --- the fixes ---
    Mutation(
        "shared_repatch: copy the user's config only for a string attention_backend",
        "npu_shim/fixes/shared_repatch.py:mindspeed_repatch",
        old='    config = dict(engine_config.get("override_transformer_config", None) or {})'
        "  # never the user's dict\n"
        '    backend = config.get("attention_backend")\n'
        "    if isinstance(backend, str):\n",
        new='    config = engine_config.get("override_transformer_config", None) or {}\n'
        '    backend = config.get("attention_backend")\n'
        "    if isinstance(backend, str):\n"
        "        config = dict(config)\n",
    ),
    Mutation(
        "shared_repatch: context_parallel_size passed at any size",
        "npu_shim/fixes/shared_repatch.py:mindspeed_repatch",
        old="    if engine_config.context_parallel_size > 1:\n",
        new="    if engine_config.context_parallel_size >= 1:\n",
    ),
    Mutation(
        "shared_repatch: a string attention_backend handed to MindSpeed as it is",
        "npu_shim/fixes/shared_repatch.py:mindspeed_repatch",
        old='            config["attention_backend"] = AttnBackend[backend]\n',
        new="            AttnBackend[backend]\n",
    ),
    Mutation(
        "value_engine: no export from verl.workers.engine",
        "npu_shim/fixes/value_engine.py:edit",
        old="    for package in (engine_package, sys.modules.get(MINDSPEED_PACKAGE)):\n",
        new="    for package in (sys.modules.get(MINDSPEED_PACKAGE),):\n",
    ),
    Mutation(
        "value_engine: a reverted registration stays in verl's registry",
        "npu_shim/fixes/value_engine.py:edit",
        old='    writer.on_revert(lambda: slots.pop(KEY["device"], None))\n',
        new="",
    ),
    Mutation(
        "value_engine: the class without upstream's mesh init (it never repatches)",
        "npu_shim/fixes/value_engine.py:edit",
        old="_init_device_mesh = repatch_then_init_device_mesh(engine_class)",
        new="_init_device_mesh = value_head_engine._init_device_mesh",
    ),
    Mutation(
        "shared_repatch: a MindSpeed engine (value or LM head) repatches after the device mesh",
        "npu_shim/fixes/shared_repatch.py:repatch_then_init_device_mesh",
        old="        mindspeed_repatch(self.engine_config)\n        super(engine_class, self)._init_device_mesh()\n",
        new="        super(engine_class, self)._init_device_mesh()\n        mindspeed_repatch(self.engine_config)\n",
    ),
    Mutation(
        "value_engine: (device, vendor) registry keys not recognised",
        "npu_shim/fixes/value_engine.py:VerlLayout.registered",
        old="            if key == device or (isinstance(key, tuple) and key[:1] == (device,)):\n",
        new="            if key == device:\n",
    ),
    Mutation(
        "lm_engine_repatch: an LM engine's own _init_device_mesh not taken as the change (judged by its __init__)",
        "npu_shim/fixes/lm_engine_repatch.py:repatches_in_mesh_init",
        source="""
        def repatches_in_mesh_init(engine_class: type) -> str:
            return ""
        """,
    ),
    Mutation(
        "lm_engine_repatch: keep verl's __init__ (two repatches, one after the mesh)",
        "npu_shim/fixes/lm_engine_repatch.py:edit",
        old='    writer.remove(engine_class, "__init__")\n',
        new="",
    ),
    Mutation(
        "shared_repatch: the mesh init's super() taken from the instance's class",
        "npu_shim/fixes/shared_repatch.py:repatch_then_init_device_mesh",
        old="        super(engine_class, self)._init_device_mesh()\n",
        new="        super(type(self), self)._init_device_mesh()\n",
    ),
    Mutation(
        "megatron_critic: the pad id taken from the tokenizer's eos",
        "npu_shim/fixes/megatron_critic.py:value_forward_step",
        old="pad_token_id=self.model_config.tokenizer.pad_token_id,",
        new="pad_token_id=self.model_config.tokenizer.eos_token_id,",
    ),
    Mutation(
        "megatron_critic: vision_model never passed as True",
        "npu_shim/fixes/megatron_critic.py:value_forward_step",
        old='vision_model=hasattr(hf_config, "vision_config"),',
        new="vision_model=False,",
    ),
    Mutation(
        "moe_layer_offset: the stage's layer offset ignored",
        "npu_shim/fixes/moe_layer_offset.py:moe_num_layers_to_build",
        old="range(first, first + layers)",
        new="range(layers)",
    ),
    Mutation(
        "moe_layer_offset: #5580 applied where Megatron takes the keywords",
        "npu_shim/fixes/moe_layer_offset.py:megatron_takes_the_keywords",
        source="""
        def megatron_takes_the_keywords(module: ModuleType) -> str:
            return ""
        """,
    ),
    Mutation(
        "npu_causal_mask: applied where verl already has #7055",
        "npu_shim/fixes/npu_causal_mask.py:MASK_BUILDER",
        old='    missing_in=("0.8.0",),\n    fixed_in=("0.9.0", "0.9.1"),\n',
        new='    missing_in=("0.8.0", "0.9.0", "0.9.1"),\n    fixed_in=(),\n',
    ),
    Mutation(
        "megatron_checkpoint_metadata: the copy keeps declared fields only (megatron's mcore_data lost again)",
        "npu_shim/fixes/megatron_checkpoint_metadata.py:_declaring_extras",
        old="    if not extras:\n",
        new="    if True:\n",
        survives_because="the unit layer has no torch or Megatron: tests/matrix/test_upstream_fixes.py and "
        "test_training.py kill it in the 0.9.1-a5 environment (megatron-core 0.12.0, torch 2.10)",
    ),
    Mutation(
        "megatron_checkpoint_metadata: judged not applicable where torch's writer copies the metadata",
        "npu_shim/fixes/megatron_checkpoint_metadata.py:judge",
        old='    if not (uses(FileSystemWriter.finish, "dataclasses") and uses(FileSystemWriter.finish, "replace")):\n',
        new="    if True:\n",
        survives_because="the unit layer has no torch or Megatron: tests/matrix/test_upstream_fixes.py kills it in "
        "the 0.9.1-a5 environment",
    ),
    Mutation(
        "ray_npu_device_index: Ray's physical NPU id passed on as the device index",
        "npu_shim/fixes/ray_npu_device_index.py:device_index",
        source="""
        def device_index(accelerator_id: str, visible: list[str]) -> str:
            return accelerator_id
        """,
    ),
    Mutation(
        "ray_npu_device_index: ids translated where Ray sets each worker's ASCEND_RT_VISIBLE_DEVICES (NOSET unset)",
        "npu_shim/fixes/ray_npu_device_index.py:visible_devices",
        old="    if not environ.get(NOSET) or not listed:",
        new="    if not listed:",
    ),
    Mutation(
        "ray_npu_device_index: an ASCEND_RT_VISIBLE_DEVICES with blanks ('4, 5') read without its ids",
        "npu_shim/fixes/ray_npu_device_index.py:visible_devices",
        old='[entry.strip() for entry in listed.split(",")]',
        new='listed.split(",")',
    ),
    Mutation(
        "patcher: with_globals rebinds in verl's own module (every caller and thread sees Ray's translated ids, and "
        "npu_smi_card's stand-in subprocess)",
        "npu_shim/patcher.py:with_globals",
        old="    namespace = {**function.__globals__, **names}\n",
        new="    namespace = function.__globals__\n    namespace.update(names)\n",
    ),
    Mutation(
        "npu_smi_card: the IPC decision made again at each check (npu-smi at every weight sync)",
        "npu_shim/fixes/npu_smi_card.py:decision",
        old="@cache  #",
        new="#",
    ),
    Mutation(
        "npu_smi_card: the visible-device variables never read (a host's listing only)",
        "npu_shim/fixes/npu_smi_card.py:visible_cards",
        old="    for variable in VISIBLE:\n",
        new="    for variable in ():\n",
    ),
    Mutation(
        "npu_smi_card: an A3 die's card never asked",
        "npu_shim/fixes/npu_smi_card.py:visible_cards",
        old="            cards += [str(int(first)), str(int(first) // 2)]\n",
        new="            cards += [str(int(first))]\n",
    ),
    Mutation(
        "npu_smi_card: npu-smi asked again after no card answered (verl 0.8.0+'s retries)",
        "npu_shim/fixes/npu_smi_card.py:BoardQuery.run",
        old="        if self._answer is None:",
        new="        if True:",
    ),
    # --- mindspeed_line: what MindSpeed does with an engine's config ---
    Mutation(
        "mindspeed_line: fusion attention off for the key on every line (upstream's flaw)",
        "npu_shim/mindspeed_line.py:_fusion_attention",
        old="    if defaults is not None and not hasattr(defaults, BATCH_INVARIANT):\n",
        new="    if False:\n",
    ),
    Mutation(
        "mindspeed_line: an inherited batch-invariant key ignored",
        "npu_shim/mindspeed_line.py:_fusion_attention",
        old="    return False if requested or inherited else configured\n",
        new="    return False if requested else configured\n",
    ),
    Mutation(
        "mindspeed_line: batch-invariant attention with context parallelism let through",
        "npu_shim/mindspeed_line.py:_refuse_context_parallelism",
        old="    if batch_invariant and int(size) > 1:\n",
        new="    if batch_invariant and int(size) > 2:\n",
    ),
    Mutation(
        "mindspeed_line: the refusal reads the new engine's CP size only, not the one MindSpeed kept",
        "npu_shim/mindspeed_line.py:_refuse_context_parallelism",
        old='    size = config.get("context_parallel_size", getattr(current, "context_parallel_size", 1))\n',
        new='    size = config.get("context_parallel_size", 1)\n',
    ),
    # --- propagation: children, Ray's runtime_env ---
    Mutation(
        "propagation: a Hydra override written for a runtime_env that needs Ray's ${PYTHONPATH} expansion",
        "npu_shim/propagation.py:hydra_override",
        source="""
        def hydra_override(env: dict[str, Any]) -> str | None:
            return f"{HYDRA_KEY}={hydra_value(env)}"
        """,
    ),
    Mutation(
        "propagation: VERL_USE_EXTERNAL_MODULES written with the blanks verl cannot import (' npu_shim')",
        "npu_shim/propagation.py:verl_modules_runtime_env",
        old='    env_vars[VERL_MODULES] = ",".join(modules)\n',
        new='    env_vars[VERL_MODULES] = ", ".join(modules)\n',
    ),
    # --- the plugin route and the distributions ---
    Mutation(
        "plugin: the shim's distribution declares no verl.plugins entry point",
        'pyproject.toml:[project.entry-points."verl.plugins"]',
        source=REMOVED,
    ),
    Mutation(
        "plugin: the entry point's module activates nothing",
        "npu_shim/verl_plugin.py:<module>",
        old="activate(VERL_PLUGINS)\n",
        new="VERL_PLUGINS  # noqa: B018\n",
    ),
    Mutation(
        "distributions: the kit's wheel leaves out the dist-info that lets `import torch` load the stand-in",
        "kit/pyproject.toml:[tool.setuptools.package-data]",
        old='    "simulated/*.dist-info/*",\n',
        new="",
    ),
    Mutation(
        "distributions: the kit's metadata admits a torch its compute mode is not tested on",
        "kit/pyproject.toml:[project]",
        old='"torch>=2.10,<2.14,!=2.11.*,!=2.12.*"',
        new='"torch>=2.10,<2.14"',
    ),
    Mutation(
        "distributions: the shim's build backend runs setuptools in the checkout, not in a copy of it",
        "build_backend/out_of_tree.py:_out_of_tree",
        old="            os.chdir(copy)\n",
        new="            os.chdir(source)\n",
    ),
    # --- the CLI ---
    Mutation(
        "cli: a command's unknown option told with the top-level usage",
        "npu_shim/__main__.py:main",
        old="        (parser if before_the_command else args.command_parser).error(",
        new="        parser.error(",
    ),
    Mutation(
        "cli: the bootstrap-dir example wrapped as prose",
        "npu_shim/__main__.py:_parser",
        old="        formatter_class=argparse.RawDescriptionHelpFormatter,\n",
        new="",
    ),
    Mutation(
        "tests/conftest.py: the guard takes each test's 'before' after collection, as it used to",
        "tests/conftest.py:_the_test_process_stays_unpatched",
        old="    before = _shim_state()\n",
        new="    before = _AT_START = _shim_state()\n",
    ),
    # --- the doctor (npu_shim/doctor/*) ---
    Mutation(
        "distributions: the doctor reads the kit's mark instead of torch_npu's version",
        "npu_shim/doctor/verl_state.py:_torch_npu",
        old='str(version) if (version := getattr(module, "__version__", None)) else None',
        new='bool(getattr(module, "SIMULATED", False))',
    ),
    Mutation(
        "doctor: a verl.workers.engine that fails to import left unjudged (status ok)",
        "npu_shim/doctor/verl_state.py:problems",
        old='    if not report["value_model_megatron_resolves"]:\n',
        new='    if report["registry"] and not report["value_model_megatron_resolves"]:\n',
    ),
    Mutation(
        "doctor: an unrecognised fix without which the critic fails left out of the status",
        "npu_shim/doctor/verl_state.py:problems",
        old='[*report["unrecognised"], *report["needed_but_off"]]',
        new='report["needed_but_off"]',
    ),
    Mutation(
        "doctor: a fix the critic needs, turned off, left out of the status",
        "npu_shim/doctor/verl_state.py:problems",
        old='[*report["unrecognised"], *report["needed_but_off"]]',
        new='report["unrecognised"]',
        survives_because="no synthetic layout has a fix a critic needs (megatron_critic is real 0.7.1's code): "
        "tests/matrix/test_doctor.py::test_a_fix_a_critic_needs_turned_off_is_a_problem_the_doctor_names kills it",
    ),
    Mutation(
        "doctor: --device npu where verl is not installed is not applicable again (exit 0)",
        "npu_shim/doctor/verl_state.py:problems",
        old='"verl is not installed here (--device npu)"] if report["assumed_device"] == "npu" else why',
        new='"verl is not installed here (--device npu)"] if False else why',
    ),
    Mutation(
        "doctor: no MindSpeed where verl looks up NPU engines is ok",
        "npu_shim/doctor/verl_state.py:problems",
        old='    if not report["mindspeed_installed"]:\n',
        new="    if False:\n",
    ),
    Mutation(
        "doctor: --strict and NPU_SHIM_STRICT=1 ignored for a name that is no fix's",
        "npu_shim/doctor/verl_state.py:problems",
        old='    if shim["unknown_fixes"] and (options.get("strict") or switch("NPU_SHIM_STRICT")):\n',
        new="    if False:\n",
    ),
    Mutation(
        "doctor: a hook that failed while patching reported as one that has not run",
        "npu_shim/doctor/verl_state.py:_shim_state",
        old="    elif failure is not None:\n"
        '        module = getattr(hook, "failed_module", None) or "verl"\n'
        '        reason = f"the shim failed while patching {module} and left it as it shipped ({failure_text})"\n',
        new="",
    ),
    Mutation(
        "doctor: verl 0.9's VERL_ENGINE_DEVICE ignored (its engines looked up for the device it sees)",
        "npu_shim/doctor/verl_state.py:collect",
        old='reads_it = uses(getattr(layout.registry, "get_engine_cls", None), "VERL_ENGINE_DEVICE")',
        new="reads_it = False",
    ),
    Mutation(
        "doctor: a watched module that did not import named as the engine package",
        "npu_shim/doctor/verl_state.py:_fixes",
        old="{fix.watches} did not import ({import_errors.get(fix.watches,",
        new="{ENGINE_PACKAGE} did not import ({import_errors.get(ENGINE_PACKAGE,",
    ),
    Mutation(
        "doctor: Megatron-Bridge offered beside a megatron-core it cannot import on",
        "npu_shim/doctor/bridge_state.py:meaning",
        old="    if version is not None and version < OLDEST_MEGATRON_FOR_BRIDGE:\n",
        new="    if False:\n",
    ),
    Mutation(
        "doctor: a Megatron-Bridge without what the images install beside it told to install Megatron-Bridge",
        "npu_shim/doctor/bridge_state.py:meaning",
        old='        ways_out = f"{pip} {shlex.quote(package)}, or {VANILLA}"\n',
        new="",
    ),
    Mutation(
        "doctor: --device npu not passed to the probe",
        "npu_shim/doctor/command.py:probe_options",
        old="device=device, strict=strict",
        new="device=None, strict=strict",
    ),
    Mutation(
        "doctor: the assumed device not used for the registry's lookup",
        "npu_shim/doctor/probe.py:device_assumed",
        old="module.get_device_name, engine_device = (lambda: device),",
        new="_, engine_device = (lambda: device),",
    ),
    Mutation(
        "doctor: the lookup-only report ignores the assumed device in its status",
        "npu_shim/doctor/probe.py:_lookup_only",
        old='(device or facts["device"]) == "npu"',
        new='facts["device"] == "npu"',
    ),
    Mutation(
        "plugin: the doctor reads VERL_USE_EXTERNAL_PLUGINS set but empty as auto (verl loads none)",
        "npu_shim/doctor/routes.py:_plugin_route",
        old='("auto" if policy is None else policy)',
        new='(policy or "auto")',
    ),
    Mutation(
        "plugin: the doctor ignores a VERL_USE_EXTERNAL_PLUGINS list that leaves the shim out",
        "npu_shim/doctor/routes.py:_plugin_route",
        old='names == "auto" or (names != "none" and PACKAGE in {name.strip() for name in names.split(",")})',
        new='names != "none"',
    ),
    Mutation(
        "plugin: the doctor tells users to install npu-shim from an index that does not have it",
        "npu_shim/doctor/routes.py:_plugin_route",
        old="{shlex.quote(install_from)}",
        new="npu-shim",
    ),
    Mutation(
        "routes: a suggested PYTHONPATH entry printed unquoted",
        "npu_shim/doctor/routes.py:export_pythonpath",
        old="{shlex.quote(entry)}",
        new="{entry}",
    ),
    Mutation(
        "routes: a route not set up, while another works, still told to be set up",
        "npu_shim/doctor/routes.py:judge",
        old='        if effective not in (None, name) and not route["configured"]:\n',
        new="        if False:\n",
    ),
    Mutation(
        "routes: a route that activated a shim that then did nothing still says yes",
        "npu_shim/doctor/routes.py:judge",
        old='        if route["works"] and not shim["active"]:\n',
        new="        if False:\n",
    ),
    Mutation(
        "report: a key missing where nothing was read",
        "npu_shim/doctor/report.py:blank",
        old='        "rollout_ipc": None,',
        new="",
    ),
    Mutation(
        "report: a problem exits 0",
        "npu_shim/doctor/report.py:EXIT_CODES",
        old="PROBLEM: 1,",
        new="PROBLEM: 0,",
    ),
    Mutation(
        "report: a probe that ran another npu_shim release printed as the doctor's own judgement",
        "npu_shim/doctor/probe.py:probe",
        old="            if theirs != ours:\n",
        new="            if False:\n",
    ),
    Mutation(
        "settings: a misspelt fix name without the nearest known one",
        "npu_shim/settings.py:with_nearest",
        old='f"{name} (did you mean {nearest[0]}?)" if nearest else name',
        new="name",
    ),
    # --- the kit (no torch in the unit layer: the named tests/kit tests kill these) ---
    Mutation(
        "kit: dropout's draws never move the device's generator on",
        "kit/simulated_npu/simulated/torch_npu/_rng.py:on_device_generator",
        old="        GENERATOR.set_state(cpu.get_state())\n",
        new="        pass\n",
        survives_because=KIT_NO_TORCH + "tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: a deep copy of an npu tensor shares the original's memory",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py:NpuTensor.__deepcopy__",
        old="NpuTensor(self._inner.detach().clone(), requires_grad=self.requires_grad)",
        new="NpuTensor(self._inner.detach(), requires_grad=self.requires_grad)",
        survives_because=KIT_NO_TORCH + "tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: an in-place view op (t_) given back by identity, its wrapper's sizes left as they were",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py:_aliasing",
        old="        if info.is_inplace_view_op or info.read_only_alias_match_indexes:\n",
        new="        if info.read_only_alias_match_indexes:\n",
        survives_because=KIT_NO_TORCH + "tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: a view's result taken as fresh, its storage not made its base's",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py:_aliasing",
        old="        if info.is_inplace_view_op or info.read_only_alias_match_indexes:\n",
        new="        if info.is_inplace_view_op:\n",
        survives_because=KIT_NO_TORCH + "tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: resize_ of an npu tensor to another size let through to torch's metadata pass",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py:_resize",
        old="    if tuple(size) != tuple(self.shape):\n",
        new="    if False:\n",
        survives_because=KIT_NO_TORCH + "tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: MindSpeed's fusion attention delimits packed sequences by their unpadded starts",
        "kit/simulated_npu/simulated/mindspeed/compute.py:fusion_attention",
        old='        starts_q = getattr(packed_seq_params, "cu_seqlens_q_padded", None)\n'
        '        starts_kv = getattr(packed_seq_params, "cu_seqlens_kv_padded", None)\n',
        new="        starts_q = starts_kv = None\n",
        survives_because="the unit layer has no torch or Megatron; tests/kit/test_compute_mode.py::"
        "test_mindspeed_fusion_attention_is_the_forward_after_repatch_and_computes kills it",
    ),
    Mutation(
        "kit: an op mixing an npu tensor with a one-element 1-d CPU tensor accepted",
        "kit/simulated_npu/simulated/torch_npu/_device_rules.py:refuse_if_mixed",
        old='    if tensor.dim() > 0 and tensor.device.type == "cpu" and func not in CROSS_DEVICE:\n',
        new='    if tensor.numel() > 1 and tensor.device.type == "cpu" and func not in CROSS_DEVICE:\n',
        survives_because=KIT_NO_TORCH + "tests/kit/test_device_rules.py::"
        "test_an_op_mixing_npu_and_cpu_tensors_raises_as_torch_does_for_any_two_devices kills it",
    ),
    Mutation(
        "kit: FusedAdam's step ignores a restored parameter group (the step counted on the optimizer)",
        "kit/simulated_npu/simulated/mindspeed/core/optimizer/adamw.py:AdamW._next_step",
        old='        count = int(group["step"]) + 1 if "step" in group else 1\n',
        new='        self._count = count = getattr(self, "_count", 0) + 1\n',
        survives_because=KIT_NO_TORCH + "tests/kit/test_device_rules.py::"
        "test_megatrons_adam_resumes_from_its_state_dict_with_the_restored_group kills it",
    ),
    Mutation(
        "kit: compute mode on any torch, untested",
        "kit/simulated_npu/simulated/torch_npu/_torch_version.py:check",
        old="    if _major_minor(torch_version) in SUPPORTED:\n",
        new="    if True:\n",
        survives_because=KIT_NO_TORCH + "tests/kit/test_torch_version.py::"
        "test_compute_mode_refuses_a_torch_it_is_not_tested_on kills it",
    ),
    Mutation(
        "kit: the refusal raised as an Exception while torch imports (torch's autoload error is then the last line)",
        "kit/simulated_npu/simulated/torch_npu/_torch_version.py:check",
        old="        raise SystemExit(message)",
        new="        raise UnsupportedTorch(message)",
        survives_because=KIT_NO_TORCH + "tests/kit/test_torch_version.py::"
        "test_where_torch_loads_the_kit_the_refusal_is_the_last_line_not_torchs_autoload_error kills it",
    ),
]


class Stale(Exception):
    """The target, or the text the mutation edits inside it, is no longer there."""


class Broken(Exception):
    """The mutation changes nothing, or what it makes does not compile."""


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _python_node(tree: ast.Module, qualname: str) -> ast.stmt:
    if qualname.startswith("if "):  # a module-level `if` (start-up's `if __name__ == "sitecustomize"`), by its test
        wanted = ast.dump(ast.parse(qualname[3:], mode="eval").body)
        found = [node for node in tree.body if isinstance(node, ast.If) and ast.dump(node.test) == wanted]
        if len(found) == 1:
            return found[0]
        raise Stale(f"no module-level `{qualname}`")
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for depth, name in enumerate(qualname.split(".")):
        assigned = [  # a module-level (or class-level) name given a value: FIX = ..., EXIT_CODES = ...
            n
            for n in body
            if (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))
            or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == name)
        ]
        defined = [n for n in body if isinstance(n, _DEFINITIONS) and n.name == name]
        matches = defined or (assigned if depth == len(qualname.split(".")) - 1 else [])
        if len(matches) != 1:
            raise Stale(f"{'no' if not matches else 'more than one'} {name} in {'.'.join(qualname.split('.')[:depth])}")
        node = matches[0]
        body = getattr(node, "body", [])
    assert node is not None
    return node


def _python_segment(text: str, qualname: str) -> tuple[int, int, int]:
    """The target's lines (start and end offsets in ``text``, decorators included) and its indentation."""
    if qualname == "<module>":
        return 0, len(text), 0
    node = _python_node(ast.parse(text), qualname)
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: first - 1])
    end = sum(len(line) for line in lines[: node.end_lineno])
    return start, end, node.col_offset


def _json_keys(qualname: str) -> list[str]:
    """``functions["a:b"]["0.8.0"]`` as ``["functions", "a:b", "0.8.0"]``."""
    head, _, rest = qualname.partition("[")
    keys = [head] if head else []
    for key in re.findall(r'\["((?:[^"\\]|\\.)*)"\]', "[" + rest if rest else ""):
        keys.append(json.loads(f'"{key}"'))
    return keys


def _mutated_json(text: str, mutation: Mutation) -> str:
    data = json.loads(text)
    *parents, last = _json_keys(mutation.qualname)
    owner = data
    for key in parents:
        if not isinstance(owner, dict) or key not in owner:
            raise Stale(f"no {key!r}")
        owner = owner[key]
    if not isinstance(owner, dict) or last not in owner:
        raise Stale(f"no {last!r}")
    if mutation.source == REMOVED:
        del owner[last]
    else:
        segment = json.dumps(owner[last], indent=2)
        owner[last] = json.loads(mutation.source or _replaced_once(segment, mutation))
    return json.dumps(data, indent=2) + "\n"


def _toml_segment(text: str, header: str) -> tuple[int, int]:
    """A table: its header line up to the next header (or the end)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == header]
    if len(starts) != 1:
        raise Stale(f"no table {header}")
    following = [i for i in range(starts[0] + 1, len(lines)) if lines[i].startswith("[")]
    end = following[0] if following else len(lines)
    return sum(map(len, lines[: starts[0]])), sum(map(len, lines[:end]))


def _replaced_once(segment: str, mutation: Mutation) -> str:
    if segment.count(mutation.old) != 1:
        raise Stale(f"its text is {'not' if mutation.old not in segment else 'more than once'} in the target")
    return segment.replace(mutation.old, mutation.new)


def mutated(text: str, mutation: Mutation) -> str:
    """``text`` (the target file's) with the mutation made; Stale where its target or text is gone."""
    if mutation.path.endswith(".json"):
        result = _mutated_json(text, mutation)
    else:
        if mutation.path.endswith(".toml"):
            start, end = _toml_segment(text, mutation.qualname)
            indent = 0
        else:
            start, end, indent = _python_segment(text, mutation.qualname)
        segment = text[start:end]
        if mutation.source == REMOVED:
            replacement = ""
        elif mutation.source:
            replacement = textwrap.indent(textwrap.dedent(mutation.source).strip("\n") + "\n", " " * indent)
        else:
            replacement = _replaced_once(segment, mutation)
        result = text[:start] + replacement + text[end:]
    if result == text:
        raise Broken("it changes nothing")
    if mutation.path.endswith(".py"):
        try:
            compile(result, mutation.path, "exec")
        except SyntaxError as error:
            raise Broken(f"the mutated file does not compile: {error}") from None
    return result


def copy_checkout(destination: Path) -> None:
    """The files git knows of (tracked, and untracked but not ignored), as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a link to a file too (the root's sitecustomize.py); not .cache, a link to a directory
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)  # the checkout's sitecustomize.py stays a link
    missing = [name for name in MUST_BE_COPIED if not (destination / name).is_file()]
    missing += [name for name in MUST_BE_LINKS if not (destination / name).is_symlink()]
    if missing:
        raise SystemExit(f"the copy of the checkout lacks {', '.join(missing)}: start-up would not be the checkout's")


def run_layer(checkout: Path, layer: tuple[str, tuple[str, ...]]) -> str | None:
    """None when the layer (an interpreter, test paths) passes; else the first failing test (or what stopped pytest)."""
    python, tests = layer
    environ = dict(os.environ)
    if layer != UNIT_LAYER:  # a matrix environment has the kit installed, as a user installs it: the copy's goes first
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout / "kit"), environ.get("PYTHONPATH")]))
    completed = subprocess.run(
        [python, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider"],
        cwd=checkout,
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if completed.returncode == 0:
        return None
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", completed.stdout, re.MULTILINE)
    return failed[0] if failed else f"pytest exited {completed.returncode}"


def check_names() -> None:
    names = [mutation.name for mutation in MUTATIONS]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SystemExit(f"mutations named twice: {twice}")


def judge(mutation: Mutation, checkout: Path, layer: tuple[str, tuple[str, ...]]) -> tuple[str, str]:
    """The verdict on one mutation, made in ``checkout`` (a copy, restored after), and what it says beside it."""
    path = checkout / mutation.path
    try:
        original = path.read_text(encoding="utf-8")
        path.write_text(mutated(original, mutation), encoding="utf-8")
    except (Stale, OSError) as error:
        return "stale", f"{mutation.target}: {error}"
    except Broken as error:
        return "broken", f"{mutation.target}: {error}"
    try:
        failing = run_layer(checkout, layer)
    finally:
        path.write_text(original, encoding="utf-8")
    if failing is not None:
        return "killed", f"by {failing}"
    if mutation.survives_because and layer == UNIT_LAYER:
        return "known", mutation.survives_because
    return "survived", ""


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("select", nargs="*", help="only mutations whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="list them, each target looked up; run nothing")
    parser.add_argument("--python", default=sys.executable, help="another environment's interpreter (known survivors)")
    parser.add_argument("--tests", action="append", help="a test path or id to run instead (repeatable)")
    # The unit layer runs one test at a time: one copy of the checkout per core halves a run on the 2-core machine kind
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutations run side by side")
    return parser.parse_args()


def main() -> int:
    args = arguments()
    layer = (os.path.abspath(args.python), tuple(args.tests or UNIT_LAYER[1]))  # run from the copy
    if not os.access(layer[0], os.X_OK):
        raise SystemExit(f"--python {args.python}: no interpreter there (an environment's bin/python)")
    check_names()
    selected = [m for m in MUTATIONS if not args.select or any(part in m.name for part in args.select)]
    if args.list:
        bad = 0
        for mutation in selected:
            try:
                mutated((ROOT / mutation.path).read_text(encoding="utf-8"), mutation)
                verdict = "ok"
            except (Stale, Broken, OSError) as error:
                verdict, bad = f"{type(error).__name__.lower()}: {error}", bad + 1
            print(f"{mutation.name}\n    {mutation.target}  [{verdict}]")
        print(f"{len(selected)} mutations, {bad} stale or broken")
        return 1 if bad else 0
    with contextlib.ExitStack() as stack:
        checkouts = [
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="npu-shim-mutations-")))
            for _ in range(max(1, min(args.jobs, len(selected))))
        ]
        copies: queue.Queue[Path] = queue.Queue()  # the copies no mutation is being judged in
        for checkout in checkouts:
            copy_checkout(checkout)
            copies.put(checkout)
        failing = run_layer(checkouts[0], layer)
        if failing is not None:
            print(f"the layer fails without any mutation ({failing}): nothing to measure")
            return 2

        def judged_in_a_free_copy(mutation: Mutation) -> str:
            checkout = copies.get()
            try:
                started = time.monotonic()
                verdict, detail = judge(mutation, checkout, layer)
            finally:
                copies.put(checkout)
            line = f"{verdict:<8}  {time.monotonic() - started:5.1f} s  {mutation.name}"
            sys.stdout.write(line + (f"\n{'':18}{detail}" if detail else "") + "\n")  # one write: whole under --jobs
            sys.stdout.flush()
            return verdict

        with concurrent.futures.ThreadPoolExecutor(len(checkouts)) as pool:
            verdicts = list(pool.map(judged_in_a_free_copy, selected))
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("killed", "known", "survived", "stale", "broken"))
    print(counts + " (known: survivors of the unit layer that another layer kills)")
    return 0 if all(verdict in ("killed", "known") for verdict in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
